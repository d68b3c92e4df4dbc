"""The attention op's arguments checked: the layouts of the queries, keys,
values and mask (the first three converted to their common dtype), the
choice of path, the score and mask functions, ALiBi's slopes and the segment
ids; and the call's `AttentionSpec` built from them. Shared by
`dot_product_attention` and `attention_path` (`keras_attention.ops.attention`)
and `attention_weights` (`keras_attention.ops.standard_path`)."""

import math

import numpy as np
from keras import backend, ops

from keras_attention._checks import (
    check_dims_match,
    check_mask_shape,
    check_positive_number,
    check_rank,
    dims_equal,
    static_shape,
)
from keras_attention.ops.mods import document_mask_mod
from keras_attention.ops.spec import build_spec


def _common_dtype(query, key, value):
    """The three as tensors of their common dtype, as in `keras.ops`."""
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    dtype = backend.result_type(query.dtype, key.dtype, value.dtype)
    return tuple(
        x if backend.standardize_dtype(x.dtype) == dtype else ops.cast(x, dtype)
        for x in (query, key, value)
    )


def _check_inputs(query, key, value, mask):
    """Raises a ValueError where the queries, keys, values or mask do not fit
    the layout `(batch, length, num_heads, head_dim)`; returns the static
    shapes of the queries and keys."""
    q, k, v = static_shape(query), static_shape(key), static_shape(value)
    for name, shape in (("query", q), ("key", k), ("value", v)):
        check_rank(name, shape, 4)
    layout = "(batch, length, num_heads, head_dim)"
    check_dims_match("query", q[0], "key", k[0], "batch size (axis 0)", hint=layout)
    for axis, what in ((0, "batch size (axis 0)"), (2, "number of heads (axis 2)")):
        check_dims_match("key", k[axis], "value", v[axis], what, hint=layout)
    if None not in (q[2], k[2]) and q[2] % k[2]:
        raise ValueError(
            "The number of key/value heads must divide the number of query "
            "heads (each group of query heads shares one key/value head); "
            f"received query heads {q[2]} and key heads {k[2]}, in the layout "
            f"{layout}."
        )
    check_dims_match("query", q[3], "key", k[3], "head dimension (axis 3)")
    check_dims_match("key", k[1], "value", v[1], "sequence length (axis 1)")
    if mask is not None:
        check_mask_shape(
            "mask",
            static_shape(mask),
            (q[0], q[2], q[1], k[1]),
            "(batch, num_heads, query_length, key_length) =",
        )
    return q, k


def _spec(q_shape, k_shape, *, scale, alibi_slopes, segment_ids, **arguments):
    """The call's `AttentionSpec` from its checked arguments."""
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1])
    if alibi_slopes is not None:
        alibi_slopes = _check_slopes(alibi_slopes, q_shape[2])
    if segment_ids is not None:
        segment_ids = _segment_id_pair(segment_ids, q_shape, k_shape)
    return build_spec(
        scale=scale,
        alibi_slopes=alibi_slopes,
        segment_ids=segment_ids,
        **arguments,
    )


def _check_choices(flash_attention, chunk_size, return_weights, bias, soft_cap):
    """Raises a ValueError for a choice of path that the other arguments
    contradict, and for a soft cap that is not a positive number."""
    if flash_attention is False and chunk_size is not None:
        raise ValueError(
            "`flash_attention=False` asks for the standard path and "
            f"`chunk_size={chunk_size}` for the memory-efficient one; pass one "
            "of them."
        )
    memory_efficient = flash_attention or chunk_size is not None
    if memory_efficient and return_weights:
        raise ValueError(
            "`return_weights=True` cannot be combined with `chunk_size` or "
            "`flash_attention=True`: the memory-efficient path never "
            "materializes the (T, S) weights."
        )
    if memory_efficient and bias is not None:
        raise ValueError(
            "`bias` cannot be combined with `chunk_size` or "
            "`flash_attention=True`: the memory-efficient path never builds "
            "the (T, S) scores a dense bias adds to. A bias computed from the "
            "positions goes through `score_mod` (T5's: "
            "`mods.relative_position_score_mod`), ALiBi's through "
            "`alibi_slopes`, both computed tile by tile."
        )
    check_positive_number("attn_logits_soft_cap", soft_cap, allow_none=True)


def _check_mods(score_mod, score_mod_inputs, mask_mod):
    """Raises a ValueError where the score and mask functions are not
    functions, or `score_mod_inputs` are not a tuple for a `score_mod`."""
    for name, mod in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if mod is not None and not callable(mod):
            raise ValueError(
                f"`{name}` must be a function; received {type(mod).__name__}."
            )
    if not isinstance(score_mod_inputs, (tuple, list)):
        raise ValueError(
            "`score_mod_inputs` must be a tuple of tensors; received "
            f"{type(score_mod_inputs).__name__}."
        )
    if score_mod_inputs and score_mod is None:
        raise ValueError(
            "`score_mod_inputs` are the extra arguments of `score_mod`; "
            f"received {len(score_mod_inputs)} of them and no `score_mod`."
        )


def _segment_id_pair(segment_ids, q_shape, k_shape):
    """`(query_ids, key_ids)`, checked against the queries and keys."""
    if isinstance(segment_ids, (tuple, list)):
        if len(segment_ids) != 2:
            raise ValueError(
                "`segment_ids` must be one tensor (batch, T) or a pair "
                "(query_ids (batch, T), key_ids (batch, S)); received a "
                f"sequence of {len(segment_ids)}."
            )
        query_ids, key_ids = segment_ids
    else:
        query_ids, key_ids = segment_ids, None
    document_mask_mod(query_ids, key_ids)  # checks the dtypes and ranks
    expected = (
        ("segment_ids", static_shape(query_ids), q_shape[:2]),
        ("key segment_ids", static_shape(key_ids), k_shape[:2]),
    )
    if key_ids is None and q_shape[1] is not None and k_shape[1] is not None:
        if q_shape[1] != k_shape[1]:
            raise ValueError(
                "One `segment_ids` tensor serves self-attention, with as many "
                f"keys as queries; received {q_shape[1]} queries and "
                f"{k_shape[1]} keys: pass (query_ids, key_ids)."
            )
    for name, shape, want in expected:
        if shape is not None and not all(map(dims_equal, shape, want)):
            raise ValueError(
                f"`{name}` must be (batch, length) = {want}; received shape {shape}."
            )
    return query_ids, query_ids if key_ids is None else key_ids


def _check_slopes(slopes, num_heads):
    """ALiBi's slopes as float32 `(num_heads,)` constants; a ValueError for
    another shape."""
    slopes = np.asarray(slopes, "float32")
    if slopes.shape != (num_heads,):
        raise ValueError(
            f"`alibi_slopes` must hold one slope per query head, shape "
            f"({num_heads},); received shape {slopes.shape}."
        )
    return slopes
