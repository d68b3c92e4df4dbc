"""How the Transformer models split their weights between devices under
`keras.distribution.ModelParallel`."""

import keras

# Megatron-LM's tensor parallelism (Shoeybi et al., 2019): the heads of every
# attention layer and the hidden units of every feed-forward layer are split
# between the devices of the model axis, so each device computes its heads
# and its slice of the feed-forward layer, and one all-reduce after the
# attention output and one after the feed-forward output put the halves
# together. Embeddings, layer norms and output biases stay whole.
# Keys are matched whole against the variables' paths (`re.fullmatch`).
_SHARDED_ON_MODEL_AXIS = {
    # (width, heads, head_dim) and their (heads, head_dim) biases.
    r".*/(query|key|value)/kernel": (None, "model", None),
    r".*/(query|key|value)/bias": ("model", None),
    # (heads, head_dim, width).
    r".*/attention_output/kernel": ("model", None, None),
    # (width, intermediate), (intermediate,) and (intermediate, width).
    r".*/feedforward/intermediate_dense/kernel": (None, "model"),
    r".*/feedforward/intermediate_dense/bias": ("model",),
    r".*/feedforward/output_dense/kernel": ("model", None),
}


def transformer_layout_map(device_mesh, model_dim_name="model"):
    """A `keras.distribution.LayoutMap` that shards the attention and
    feed-forward kernels of this package's Transformer blocks along one axis
    of `device_mesh` (Megatron-style tensor parallelism).

    The query, key and value projections and the attention output are split
    by heads; the feed-forward layer's first kernel by its output units, its
    second by its input units. Every other weight (embeddings, layer norms,
    output layers) is replicated. It applies to `Transformer`,
    `TransformerClassifier`, `TransformerTextEncoder` and `GPT`, whose blocks
    name their sublayers alike; the number of heads (and of key/value heads)
    and the feed-forward width must be multiples of the axis's size.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh`.
        model_dim_name: the mesh axis that splits the weights.

    Returns:
        The `LayoutMap`, for `keras.distribution.ModelParallel(layout_map=...)`.

    Example:

    ```python
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((1, len(devices)), ("batch", "model"), devices)
    distribution = keras.distribution.ModelParallel(
        layout_map=transformer_layout_map(mesh), batch_dim_name="batch"
    )
    with distribution.scope():
        model = Transformer(...)
    ```

    References:
        - [Shoeybi et al., 2019](https://arxiv.org/abs/1909.08053), Megatron-LM.
    """
    if model_dim_name not in device_mesh.axis_names:
        raise ValueError(
            f"`model_dim_name` must be an axis of the device mesh, one of "
            f"{tuple(device_mesh.axis_names)}; received {model_dim_name!r}."
        )
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in _SHARDED_ON_MODEL_AXIS.items():
        layout_map[pattern] = tuple(
            model_dim_name if axis == "model" else axis for axis in axes
        )
    return layout_map
