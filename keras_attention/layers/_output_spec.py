"""The symbolic outputs of a layer that may also return its attention
scores."""

import keras


def output_spec(layer, input_shape, return_attention_scores):
    """`layer`'s `compute_output_spec` from its `compute_output_shape`: one
    `KerasTensor` of `layer.compute_dtype`, or a tuple of them (the output and
    the scores) where `return_attention_scores`.

    Args:
        layer: a layer whose `compute_output_shape(input_shape,
            return_attention_scores)` gives one shape, or a tuple of shapes
            where `return_attention_scores`.
        input_shape: the shape of the layer's inputs.
        return_attention_scores: whether the layer returns its scores too.
    """
    shapes = layer.compute_output_shape(input_shape, return_attention_scores)
    if not return_attention_scores:
        return keras.KerasTensor(shapes, dtype=layer.compute_dtype)
    return tuple(keras.KerasTensor(s, dtype=layer.compute_dtype) for s in shapes)
