"""The standard path of the attention op: the `(T, S)` scores and weights
built whole, on `keras.ops`. The op's `"standard"` path (`_standard`, also
the fused kernels' fallback), the public `attention_weights` and
`apply_attention_weights` that split it in two, and what they share: the
scores and weighted sums of grouped heads without copying the keys, a single
query by multiply-and-sum, the full dense mask with the keys no query sees
zeroed, the log-sum-exp of the rows."""

from keras import backend, ops

from keras_attention.ops.attention_checks import _check_inputs, _spec
from keras_attention.ops.masks import attended_keys, zero_unattended
from keras_attention.ops.sinks import check_sinks, kept_share
from keras_attention.ops.softmax import MASKED_SCORE, masked_softmax


def _standard(query, key, value, spec, return_weights=False, return_lse=False):
    """The standard path: the outputs, then the weights and the log-sum-exp
    where asked (a tuple then)."""
    results = []
    if return_weights or backend.standardize_dtype(value.dtype) == "float16":
        weights, lse, value = _weights(query, key, spec, return_lse, value)
        dropped = weights
        scale = _dense_dropout_scale(spec, weights)
        if scale is not None:
            dropped = weights * ops.cast(scale, weights.dtype)
        results.append(apply_attention_weights(dropped, value))
        if return_weights:
            results.append(weights)
        if return_lse:
            results.append(lse)
    else:
        results.extend(_attend_normalizing_last(query, key, value, spec, return_lse))
    return results[0] if len(results) == 1 else tuple(results)


def _attend_normalizing_last(query, key, value, spec, return_lse=False):
    """`softmax(S) V` computed as `(exp(S - max) V) / sum exp(S - max)`, as a
    list: the outputs, and their log-sum-exp if asked.

    Dividing the `(T, head_dim)` outputs instead of the `(T, S)` weights
    saves a pass over the scores in the forward and in the backward pass
    (20-30% of the attention time on a CPU). Not for float16 values: the
    unnormalized sum over S keys can pass float16's largest value (65504)
    where the normalized one never does.
    """
    dtype = backend.standardize_dtype(query.dtype)
    compute_dtype = _accumulation_dtype(dtype)
    mask, key, value = _full_mask_hiding_unseen(query, key, value, spec)
    scores = _dense_scores(query, key, spec, compute_dtype)
    if mask is not None:
        scores = ops.where(mask, scores, ops.cast(MASKED_SCORE, compute_dtype))
    # The maximum only keeps `exp` in range: the result does not depend on it.
    peak = ops.stop_gradient(ops.amax(scores, axis=-1, keepdims=True))
    # Masked scores underflow to exactly 0 once exponentiated, unless the
    # whole row is masked (its maximum is MASKED_SCORE itself): that row is
    # zeroed at the end, on (T, head_dim) outputs rather than (T, S) weights.
    unnormalized = ops.exp(scores - peak)
    total = ops.sum(unnormalized, axis=-1, keepdims=True)
    # Dropout after the normalizer: it drops normalized weights.
    dropout = _dense_dropout_scale(spec, unnormalized)
    if dropout is not None:
        unnormalized = unnormalized * ops.cast(dropout, unnormalized.dtype)
    outputs = _weighted_sum(ops.cast(unnormalized, value.dtype), value)
    outputs = ops.cast(outputs, compute_dtype) / _heads_second(total)
    attends = None
    if mask is not None:
        attends = ops.greater(peak, MASKED_SCORE / 2)
        outputs = ops.where(_heads_second(attends), outputs, 0.0)
    results = [ops.cast(outputs, dtype)]
    if return_lse:
        results.append(_finite_rows_lse(peak + ops.log(total), attends))
    return results


def _dense_scores(query, key, spec, compute_dtype):
    """The `(B, N, T, S)` scores of the standard path in `compute_dtype`."""
    # Scaling the queries before the matmul keeps float16 scores in range.
    query = query * ops.cast(spec.scale, query.dtype)
    raw = ops.cast(_scores(query, key), compute_dtype)
    return spec.dense_scores(query, key, raw)


def _dense_dropout_scale(spec, weights):
    """Dropout's factors `(B, N, T, S)` of the whole grid of `weights`, or
    None without dropout."""
    if not spec.dropout_rate:
        return None
    batch, heads, query_length, key_length = ops.shape(weights)
    return spec.dropout_scale(
        ops.arange(batch, dtype="int32")[:, None, None, None],
        ops.arange(heads, dtype="int32")[None, :, None, None],
        ops.arange(query_length, dtype="int32")[None, None, :, None],
        ops.arange(key_length, dtype="int32")[None, None, None, :],
        heads,
        query_length,
    )


def _finite_rows_lse(lse, attends):
    """`(B, N, T, 1)` log-sum-exp -> float32 `(B, N, T)`, -inf where a row
    sees no key."""
    lse = ops.cast(lse, "float32")
    if attends is not None:
        lse = ops.where(attends, lse, float("-inf"))
    return lse[..., 0]


# A single query (a decoding step) attends by multiply-and-sum rather than by
# matmul on TensorFlow and PyTorch: the product of one query with the keys is
# memory-bound either way, and their matmul first copies the (S, num_heads,
# head_dim) keys and values into its own layout, which costs more than the
# product itself; the fused multiply-and-sum reads them once, where they lie.
# JAX's XLA turns the matmul into a dot_general that needs no copy, while its
# CPU reduction loops are slow: there the multiply-and-sum made 4 decoder
# blocks decode 4x slower (45.8 against 11.1 ms per token, keras-hub 15.6;
# TensorFlow: 6.8 by the sum, 8.9 by matmul; 2-core CPU, batch 16, width
# 256, 8 heads, 128 slots). A few queries (the 4 beams of the ancestry beam
# search over one cache row) keep the matmul everywhere: by the sum, that
# search took 5.9x greedy's time on TensorFlow instead of 4.4x, and 2.43x
# instead of 1.90x on an H200 with JAX.
_SINGLE_QUERY_BY_SUM = backend.backend() != "jax"


def _by_sum(query_length):
    """Whether `query_length` queries attend by multiply-and-sum (see above)."""
    return _SINGLE_QUERY_BY_SUM and query_length == 1


def _scores(query, key):
    """`query . key` per head: `(B, N, T, S)` in the dtype of the query.

    With `N_kv < N` key heads, the queries are viewed as `(B, T, N_kv, G, H)`
    groups: head `n = k * G + g` meets key head `k`, and no key is copied."""
    groups = _groups(query, key)
    if not _by_sum(query.shape[1]):
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
    if not _by_sum(weights.shape[2]):
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
    """How many query heads share each key/value head."""
    return _group_size(query.shape[2], key.shape[2])


def _group_size(query_heads, key_heads):
    """Query heads per key/value head; 1 where either count is unknown."""
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
    """The dtype sums of `dtype` values accumulate in: float64 or float32."""
    return "float64" if backend.standardize_dtype(dtype) == "float64" else "float32"


def _heads_second(x):
    """`(B, N, T, 1)` -> `(B, T, N, 1)`, the layout of the outputs."""
    return ops.transpose(x, (0, 2, 1, 3))


def _length(x, axis):
    """The length of axis `axis`: a Python int where static, else a tensor."""
    static = x.shape[axis]
    return static if isinstance(static, int) else ops.shape(x)[axis]


def _attended_keys(
    mask, is_causal, query_length, key_length, key_heads=None, query_offset=0
):
    """Broadcastable to `(B, S, N_kv)`, the layout of the keys: True at the
    keys that some query of the heads sharing them may attend to; None when
    every key is."""
    if mask is not None:
        mask = ops.cast(mask, "bool")
        while len(mask.shape) < 4:
            mask = ops.expand_dims(mask, 0)
    attended = attended_keys(mask, query_length, key_length, is_causal, query_offset)
    if attended is None:
        return None
    if mask is None:  # the causal reach alone, (S,)
        return attended[:, None]
    attended = ops.transpose(attended, (0, 2, 1))
    heads = attended.shape[2]
    if key_heads is not None and heads not in (1, key_heads):
        attended = ops.any(_split_heads(attended, heads // key_heads), axis=3)
    return attended


def _full_mask_hiding_unseen(query, key, value, spec):
    """The call's full dense mask (bool, or None), and the keys and values
    (`value` may be None) with zeros where no query of the heads sharing them
    may look: a masked score's weight is 0, but `0 * NaN` is NaN in the
    products, forward and backward."""
    mask = spec.dense_mask(query, key)
    if mask is None:
        return None, key, value
    mask = ops.cast(mask, "bool")
    seen = _attended_keys(mask, False, None, None, key.shape[2])
    key = zero_unattended(key, seen)
    if value is not None:
        value = zero_unattended(value, seen)
    return mask, key, value


def _weights(query, key, spec, return_lse=False, value=None):
    """The weights in the dtype of the query, the log-sum-exp of the same
    scores if asked (else None), and `value` with the keys no query sees
    zeroed."""
    mask, key, value = _full_mask_hiding_unseen(query, key, value, spec)
    scores = _dense_scores(query, key, spec, "float32")
    weights = ops.cast(masked_softmax(scores, mask), query.dtype)
    if not return_lse:
        return weights, None, value
    attends = None
    if mask is not None:
        scores = ops.where(mask, scores, MASKED_SCORE)
        attends = ops.greater(
            ops.amax(scores, axis=-1, keepdims=True), MASKED_SCORE / 2
        )
    lse = ops.logsumexp(scores, axis=-1, keepdims=True)
    return weights, _finite_rows_lse(lse, attends), value


def attention_weights(
    query,
    key,
    mask=None,
    is_causal=False,
    scale=None,
    bias=None,
    alibi_slopes=None,
    attn_logits_soft_cap=None,
    sinks=None,
):
    """The weights `softmax(scale * Q K^T + bias)` `(B, N, T, S)` of
    `dot_product_attention` (same arguments, the soft cap and the sinks
    included), for code that transforms them, e.g. dropout, before
    `apply_attention_weights`. Keys at positions no query may attend to are
    never read."""
    query, key = ops.convert_to_tensor(query), ops.convert_to_tensor(key)
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
    q_shape, k_shape = _check_inputs(query, key, key, mask)
    spec = _spec(
        q_shape,
        k_shape,
        scale=scale,
        alibi_slopes=alibi_slopes,
        segment_ids=None,
        mask=mask,
        bias=bias,
        is_causal=is_causal,
        soft_cap=attn_logits_soft_cap,
    )
    sinks = check_sinks(sinks, q_shape[2])
    weights, lse, _ = _weights(query, key, spec, return_lse=sinks is not None)
    if sinks is None:
        return weights
    return weights * ops.cast(kept_share(lse, sinks)[..., None], weights.dtype)


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
