"""Multi-head scaled dot-product attention with the layout of `keras.ops`."""

import math

import numpy as np
from keras import backend, ops

from keras_attention._checks import (
    check_dims_match,
    check_mask_shape,
    check_positive_int,
    check_rank,
    static_shape,
)
from keras_attention.ops.chunked import chunked_attention
from keras_attention.ops.masks import (
    attended_keys,
    causal_mask,
    merge_masks,
    sliding_window_mask,
    zero_unattended,
)
from keras_attention.ops.positions import alibi_bias
from keras_attention.ops.softmax import MASKED_SCORE, masked_softmax


def _check_inputs(query, key, value, mask):
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


def dot_product_attention(
    query,
    key,
    value,
    mask=None,
    is_causal=False,
    scale=None,
    chunk_size=None,
    return_weights=False,
    sliding_window=None,
    bias=None,
    alibi_slopes=None,
):
    """Scaled dot-product attention, `softmax(Q K^T / sqrt(d_k)) V`, per head.

    Same layout and semantics as `keras.ops.dot_product_attention`, plus
    attention weights on request and padding masks that are safe for fully
    masked rows (they give zeros, never NaN). Keys and values may have fewer
    heads than the queries (grouped-query attention, Ainslie et al. 2023):
    query head `n` attends with key/value head `n // (N / N_kv)`, without
    copying the keys and values on the standard path. Keys and values at positions
    that no query may attend to (padding, keys past the last query of a
    causal mask) are never read: NaN or inf there reaches no output and no
    gradient.

    Args:
        query: `(batch, T, num_heads, head_dim)`.
        key: `(batch, S, num_kv_heads, head_dim)`, `num_kv_heads` a divisor
            of `num_heads` (equal for multi-head attention, 1 for multi-query
            attention).
        value: `(batch, S, num_kv_heads, value_dim)`.
        mask: optional boolean tensor broadcastable to
            `(batch, num_heads, T, S)`; True = attend.
        is_causal: if True, query `i` only attends to keys `j <= i`.
        scale: multiplier of the scores; default `1 / sqrt(head_dim)`.
        chunk_size: if set, the memory-efficient path: keys are processed in
            blocks of this size with an online softmax, so memory grows as
            O(T * chunk_size) instead of O(T * S), in the backward pass too
            (custom gradient that recomputes each block). Same result as the
            standard path to float tolerance; cannot return weights.
        return_weights: also return the weights `(batch, num_heads, T, S)`.
        sliding_window: if set, query `i` only attends to keys `j` with
            `|i - j| < sliding_window` (with `is_causal`, the
            `sliding_window` most recent keys). The chunked path never
            computes the tiles wholly outside the window: its time and
            memory grow as T * sliding_window, not T * S.
        bias: optional float tensor broadcastable to `(batch, num_heads, T, S)`
            added to the scaled scores (a relative position bias, as in
            `keras.ops.dot_product_attention`). Not on the chunked path,
            which never builds the `(T, S)` scores.
        alibi_slopes: optional `num_heads` constants (not trained, e.g.
            `alibi_slopes(num_heads)`): ALiBi's bias `-slope_h * |i - j|` is
            added to the scores of head `h` (Press et al. 2022), computed tile
            by tile on the chunked path.

    Returns:
        `(batch, T, num_heads, value_dim)`, and the weights if requested.

    Example:

    >>> q = keras.random.normal((2, 5, 4, 8))
    >>> kv = keras.random.normal((2, 7, 4, 8))
    >>> dot_product_attention(q, kv, kv).shape
    (2, 5, 4, 8)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Ainslie et al., 2023. GQA](https://arxiv.org/abs/2305.13245)
        - [Press et al., 2022. ALiBi](https://arxiv.org/abs/2108.12409)
    """
    query = ops.convert_to_tensor(query)
    key = ops.convert_to_tensor(key)
    value = ops.convert_to_tensor(value)
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
    q_shape, k_shape = _check_inputs(query, key, value, mask)
    check_positive_int("chunk_size", chunk_size, allow_none=True)
    check_positive_int("sliding_window", sliding_window, allow_none=True)
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1])
    if chunk_size is not None and return_weights:
        raise ValueError(
            "`return_weights=True` cannot be combined with `chunk_size`: the "
            "chunked path never materializes the (T, S) weights."
        )
    if chunk_size is not None and bias is not None:
        raise ValueError(
            "`bias` cannot be combined with `chunk_size`: the chunked path "
            "never builds the (T, S) scores a dense bias adds to. ALiBi's bias "
            "goes through `alibi_slopes`, which the chunked path computes tile "
            "by tile."
        )
    query_length, key_length = _length(query, 1), _length(key, 1)
    if alibi_slopes is not None:
        alibi_slopes = _check_slopes(alibi_slopes, q_shape[2])
    if sliding_window is not None:
        mask = merge_masks(
            mask,
            sliding_window_mask(query_length, key_length, sliding_window)
            if chunk_size is None
            else _window_reach(query_length, key_length, sliding_window),
        )
    attended = _attended_keys(mask, is_causal, query_length, key_length, k_shape[2])
    key = zero_unattended(key, attended)
    value = zero_unattended(value, attended)
    if chunk_size is not None:
        groups = _group_size(q_shape[2], k_shape[2])
        if groups > 1:
            # The tiles slice one head axis; the copies cost O(S * N * H),
            # the size of the queries, against O(T * S * N) of attention.
            key, value = ops.repeat(key, groups, 2), ops.repeat(value, groups, 2)
        return chunked_attention(
            query,
            key,
            value,
            mask,
            is_causal=is_causal,
            scale=scale,
            chunk_size=chunk_size,
            sliding_window=sliding_window,
            alibi_slopes=alibi_slopes,
        )
    if alibi_slopes is not None:
        bias = _add_bias(bias, alibi_bias(alibi_slopes, query_length, key_length))
    if not return_weights and backend.standardize_dtype(value.dtype) != "float16":
        return _attend_normalizing_last(query, key, value, mask, is_causal, scale, bias)
    weights = _weights(query, key, mask, is_causal, scale, bias)
    outputs = apply_attention_weights(weights, value)
    if return_weights:
        return outputs, weights
    return outputs


def _check_slopes(slopes, num_heads):
    slopes = np.asarray(slopes, "float32")
    if slopes.shape != (num_heads,):
        raise ValueError(
            f"`alibi_slopes` must hold one slope per query head, shape "
            f"({num_heads},); received shape {slopes.shape}."
        )
    return slopes


def _add_bias(bias, extra):
    return extra if bias is None else ops.cast(bias, "float32") + extra


def _window_reach(query_length, key_length, window):
    """`(1, S)`: the keys within `window - 1` positions of some query, or
    None when every key is. The chunked path applies the window tile by tile
    and never builds the `(T, S)` band; the keys no query may see go into the
    mask so that they are zeroed before anything reads them, as for any
    mask."""
    if (
        isinstance(query_length, int)
        and isinstance(key_length, int)
        and key_length <= query_length + window - 1
    ):
        return None
    return ops.less(ops.arange(key_length), query_length + window - 1)[None, :]


def _attend_normalizing_last(query, key, value, mask, is_causal, scale, bias=None):
    """`softmax(S) V` computed as `(exp(S - max) V) / sum exp(S - max)`.

    Dividing the `(T, head_dim)` outputs instead of the `(T, S)` weights
    saves a pass over the scores in the forward and in the backward pass
    (20-30% of the attention time on a CPU). Not for float16 values: the
    unnormalized sum over S keys can pass float16's largest value (65504)
    where the normalized one never does.
    """
    dtype = backend.standardize_dtype(query.dtype)
    compute_dtype = "float64" if dtype == "float64" else "float32"
    query = query * ops.cast(scale, query.dtype)
    scores = ops.cast(_scores(query, key), compute_dtype)
    if bias is not None:
        scores = scores + ops.cast(bias, compute_dtype)
    if is_causal:
        mask = merge_masks(mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1]))
    if mask is not None:
        mask = ops.cast(mask, "bool")
        scores = ops.where(mask, scores, ops.cast(MASKED_SCORE, compute_dtype))
    # The maximum only keeps `exp` in range: the result does not depend on it.
    peak = ops.stop_gradient(ops.max(scores, axis=-1, keepdims=True))
    # Masked scores underflow to exactly 0 once exponentiated, unless the
    # whole row is masked (its maximum is MASKED_SCORE itself): that row is
    # zeroed at the end, on (T, head_dim) outputs rather than (T, S) weights.
    unnormalized = ops.exp(scores - peak)
    total = ops.sum(unnormalized, axis=-1, keepdims=True)
    outputs = _weighted_sum(ops.cast(unnormalized, value.dtype), value)
    outputs = ops.cast(outputs, compute_dtype) / _heads_second(total)
    if mask is not None:
        attends = ops.greater(_heads_second(peak), MASKED_SCORE / 2)
        outputs = ops.where(attends, outputs, 0.0)
    return ops.cast(outputs, dtype)


# A single query (one decoding step) attends by multiply-and-sum rather than
# by matmul: the product of one query with the keys is memory-bound either
# way, and a matmul first copies the (S, num_heads, head_dim) keys and values
# into its own layout, which costs more than the product itself; the fused
# multiply-and-sum reads them once, where they lie.


def _scores(query, key):
    """`query . key` per head: `(B, N, T, S)` in the dtype of the query.

    With `N_kv < N` key heads, the queries are viewed as `(B, T, N_kv, G, H)`
    groups: head `n = k * G + g` meets key head `k`, and no key is copied."""
    groups = _groups(query, key)
    if query.shape[1] != 1:
        if groups == 1:
            return ops.einsum("btnh,bsnh->bnts", query, key)
        scores = ops.einsum("btkgh,bskh->bkgts", _split_heads(query, groups), key)
        return _merge_heads(scores, 1)
    compute_dtype = _accumulation_dtype(query.dtype)
    # (B, 1, N_kv, G, H) * (B, S, N_kv, 1, H), summed over H: (B, S, N_kv, G).
    products = ops.cast(_split_heads(query, groups), compute_dtype) * ops.cast(
        key[:, :, :, None, :], compute_dtype
    )
    scores = ops.transpose(_merge_heads(ops.sum(products, axis=-1), 2), (0, 2, 1))
    return ops.cast(scores[:, :, None, :], query.dtype)


def _weighted_sum(weights, value):
    """`sum_s weights[b, n, t, s] * value[b, s, n // G, :]`: `(B, T, N, H)` in
    the dtype of the weights."""
    groups = _group_size(weights.shape[1], value.shape[2])
    if weights.shape[2] != 1:
        if groups == 1:
            return ops.einsum("bnts,bsnh->btnh", weights, value)
        grouped = _split_heads(weights, groups, axis=1)
        return _merge_heads(ops.einsum("bkgts,bskh->btkgh", grouped, value), 2)
    compute_dtype = _accumulation_dtype(weights.dtype)
    # (B, S, N_kv, G, 1) * (B, S, N_kv, 1, H), summed over S.
    per_key = ops.transpose(ops.cast(weights[:, :, 0, :], compute_dtype), (0, 2, 1))
    per_key = _split_heads(per_key, groups, axis=2)[..., None]
    products = per_key * ops.cast(value, compute_dtype)[:, :, :, None, :]
    summed = ops.sum(products, axis=1, keepdims=True)
    return ops.cast(_merge_heads(summed, 2), weights.dtype)


def _groups(query, key):
    return _group_size(query.shape[2], key.shape[2])


def _group_size(query_heads, key_heads):
    if query_heads is None or key_heads is None:
        return 1
    return query_heads // key_heads


def _split_heads(x, groups, axis=2):
    """Axis `axis` of N heads -> two axes `(N / groups, groups)`."""
    shape = ops.shape(x)
    return ops.reshape(
        x, (*shape[:axis], shape[axis] // groups, groups, *shape[axis + 1 :])
    )


def _merge_heads(x, axis):
    """Axes `axis, axis + 1` -> one axis of their product (the heads)."""
    shape = ops.shape(x)
    return ops.reshape(
        x, (*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :])
    )


def _accumulation_dtype(dtype):
    return "float64" if backend.standardize_dtype(dtype) == "float64" else "float32"


def _heads_second(x):
    """`(B, N, T, 1)` -> `(B, T, N, 1)`, the layout of the outputs."""
    return ops.transpose(x, (0, 2, 1, 3))


def _length(x, axis):
    static = x.shape[axis]
    return static if isinstance(static, int) else ops.shape(x)[axis]


def _attended_keys(mask, is_causal, query_length, key_length, key_heads=None):
    """Broadcastable to `(B, S, N_kv)`, the layout of the keys: True at the
    keys that some query of the heads sharing them may attend to; None when
    every key is."""
    if mask is not None:
        mask = ops.cast(mask, "bool")
        while len(mask.shape) < 4:
            mask = ops.expand_dims(mask, 0)
    attended = attended_keys(mask, query_length, key_length, is_causal)
    if attended is None:
        return None
    if mask is None:  # the causal reach alone, (S,)
        return attended[:, None]
    attended = ops.transpose(attended, (0, 2, 1))
    heads = attended.shape[2]
    if key_heads is not None and heads not in (1, key_heads):
        attended = ops.any(_split_heads(attended, heads // key_heads), axis=3)
    return attended


def _weights(query, key, mask, is_causal, scale, bias=None):
    # Scaling the queries before the matmul keeps float16 scores in range.
    query = query * ops.cast(scale, query.dtype)
    scores = _scores(query, key)
    if bias is not None:
        scores = ops.cast(
            ops.cast(scores, "float32") + ops.cast(bias, "float32"), scores.dtype
        )
    if is_causal:
        mask = merge_masks(mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1]))
    return masked_softmax(scores, mask)


def attention_weights(
    query, key, mask=None, is_causal=False, scale=None, bias=None, alibi_slopes=None
):
    """The weights `softmax(scale * Q K^T + bias)` `(B, N, T, S)` of
    `dot_product_attention` (same arguments), for code that transforms them,
    e.g. dropout, before `apply_attention_weights`. Keys at positions no query
    may attend to are never read."""
    query, key = ops.convert_to_tensor(query), ops.convert_to_tensor(key)
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
    q_shape, k_shape = _check_inputs(query, key, key, mask)
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1])
    query_length, key_length = _length(query, 1), _length(key, 1)
    if alibi_slopes is not None:
        slopes = _check_slopes(alibi_slopes, q_shape[2])
        bias = _add_bias(bias, alibi_bias(slopes, query_length, key_length))
    attended = _attended_keys(mask, is_causal, query_length, key_length, k_shape[2])
    key = zero_unattended(key, attended)
    return _weights(query, key, mask, is_causal, scale, bias)


def apply_attention_weights(weights, value, mask=None, is_causal=False):
    """`sum_s weights[b, n, t, s] * value[b, s, n, :]` -> `(B, T, N, H)`.

    Pass the `mask` and `is_causal` that made the weights, and the values at
    positions no query may attend to are never read: a zero weight alone does
    not hide a NaN or inf there (`0 * NaN` is NaN).
    """
    if mask is not None or is_causal:
        if mask is not None:
            mask = ops.convert_to_tensor(mask)
        attended = _attended_keys(
            mask, is_causal, _length(weights, 2), _length(value, 1), value.shape[2]
        )
        value = zero_unattended(value, attended)
    return _weighted_sum(weights, ops.cast(value, weights.dtype))
