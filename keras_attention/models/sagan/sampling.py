"""Using a SAGAN generator network: its inputs, its images, and the weights
of its self-attention."""

import keras
import numpy as np
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.layers.conditional_batch_normalization import (
    ConditionalBatchNormalization,
)


def _num_classes(generator):
    """The number of classes of a conditional generator (the size of its
    first conditional batch norm's table), or None."""
    if len(generator.inputs) == 1:
        return None
    for layer in generator.layers:
        if isinstance(layer, ConditionalBatchNormalization):
            return layer.num_classes
    raise ValueError(f"`{generator.name}` has a labels input but no class table.")


def to_unit_range(images):
    """Generator outputs in [-1, 1] as float32 numpy images in [0, 1]."""
    return np.clip((np.asarray(images, "float32") + 1.0) / 2.0, 0.0, 1.0)


def generator_inputs(generator, batch_size, labels=None, seed=None):
    """Inputs for a SAGAN generator network: standard normal `z`, and for a
    conditional one the given labels or labels drawn uniformly.

    Args:
        generator: a network from `sagan_generator` (or a loaded one).
        batch_size: number of images.
        labels: int `(batch_size,)` classes, conditional generators only.
        seed: an int, a `keras.random.SeedGenerator`, or None.

    Returns:
        `z`, or `[z, labels]`.
    """
    z = keras.random.normal((batch_size, generator.inputs[0].shape[-1]), seed=seed)
    num_classes = _num_classes(generator)
    if num_classes is None:
        if labels is not None:
            raise ValueError(f"`{generator.name}` is unconditional; received labels.")
        return z
    if labels is None:
        labels = keras.random.randint((batch_size,), 0, num_classes, seed=seed)
    labels = ops.convert_to_tensor(labels)
    known = isinstance(batch_size, int) and None not in labels.shape
    if known and tuple(labels.shape) != (batch_size,):
        raise ValueError(
            f"`labels` must have shape ({batch_size},); received {tuple(labels.shape)}."
        )
    return [z, ops.cast(labels, "int32")]


def sample_images(generator, num_images, labels=None, seed=None, batch_size=256):
    """Generates images with a SAGAN generator network.

    Args:
        generator: a network from `sagan_generator` (or a loaded one).
        num_images: how many.
        labels: int `(num_images,)` classes for a conditional generator
            (drawn uniformly when None).
        seed: int seed of `z` (and of drawn labels).
        batch_size: images per forward pass.

    Returns:
        float32 numpy `(num_images, size, size, channels)` in [0, 1].
    """
    check_positive_int("num_images", num_images)
    seed = keras.random.SeedGenerator(seed)
    inputs = generator_inputs(generator, num_images, labels, seed)
    return to_unit_range(generator.predict(inputs, batch_size=batch_size, verbose=0))


def generator_attention(generator, inputs):
    """A SAGAN generator's images and self-attention weights.

    Args:
        generator: a network from `sagan_generator` with attention.
        inputs: `z` (or `[z, labels]`), e.g. from `generator_inputs`.

    Returns:
        `(images, weights)`: float32 numpy images in [0, 1] and weights
        `(B, r * r, r * r)` over the `r x r` map the block attends over (row =
        query position, row-major; each row sums to 1).
    """
    try:
        block = generator.get_layer("self_attention")
    except ValueError:
        raise ValueError(
            f"`{generator.name}` has no self-attention block (built with "
            "attention=False)."
        ) from None
    features = keras.Model(generator.inputs, block.input)(inputs, training=False)
    _, weights = block(features, return_attention_scores=True, training=False)
    images = to_unit_range(ops.convert_to_numpy(generator(inputs, training=False)))
    return images, ops.convert_to_numpy(ops.cast(weights, "float32"))
