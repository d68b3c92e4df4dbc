"""Attention over several axes at once (images, video), in the layout of
`keras.layers.MultiHeadAttention(attention_axes=...)`."""

import string

from keras import ops

from keras_attention.ops.softmax import masked_softmax


def attention_equations(rank, attention_axes):
    """The einsum equations of the scores (`key, query -> scores`) and of the
    combination (`weights, value -> output`).

    Args:
        rank: rank of the projected tensors `(B, <other axes>, <attention
            axes>, heads, dim)`.
        attention_axes: the attended axes, non-negative.

    Returns:
        Two equations; the scores are `(B, <other axes>, heads, <query
        attention axes>, <key attention axes>)`.
    """
    query = string.ascii_lowercase[:rank]
    key = "".join(
        string.ascii_lowercase[rank + i] if i in attention_axes else query[i]
        for i in range(rank)
    )
    batch = [i for i in range(rank - 1) if i not in attention_axes]
    scores = "".join(
        [query[i] for i in batch]
        + [query[i] for i in attention_axes]
        + [key[i] for i in attention_axes]
    )
    return f"{key},{query}->{scores}", f"{scores},{key}->{query}"


def multi_axis_attention_weights(query, key, mask, attention_axes, scale):
    """`softmax(scale * Q K^T)` normalized over every attention axis at once.

    Args:
        query: `(B, <other axes>, <attention axes>, heads, dim)`.
        key: the same layout, with its own attention axes' sizes.
        mask: optional boolean, True = attend, without the heads axis (and
            maybe without the other axes): they are inserted in front of the
            attention axes, as Keras does.
        attention_axes: the attended axes of `query`, non-negative.
        scale: multiplier of the scores.

    Returns:
        `(B, <other axes>, heads, <query attention axes>, <key attention
        axes>)`; a query that may attend to nothing gets zeros.
    """
    scores_equation, _ = attention_equations(len(query.shape), attention_axes)
    scores = ops.einsum(scores_equation, key, query * ops.cast(scale, query.dtype))
    num_axes = len(attention_axes)
    if mask is not None:
        while len(mask.shape) < len(scores.shape):
            mask = ops.expand_dims(mask, -2 * num_axes - 1)
    rank = len(scores.shape)
    return masked_softmax(scores, mask, axis=tuple(range(rank - num_axes, rank)))


def apply_multi_axis_weights(weights, value, attention_axes):
    """The outputs `(B, <other axes>, <query attention axes>, heads, dim)` of
    `weights` from `multi_axis_attention_weights` over `value`."""
    _, combine_equation = attention_equations(len(value.shape), attention_axes)
    return ops.einsum(combine_equation, weights, ops.cast(value, weights.dtype))
