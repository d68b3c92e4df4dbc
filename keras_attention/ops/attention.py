"""Multi-head scaled dot-product attention with the layout of `keras.ops`."""

import math
import warnings

import numpy as np
from keras import backend, ops

from keras_attention._checks import (
    check_dims_match,
    check_mask_shape,
    check_positive_int,
    check_positive_number,
    check_rank,
    dims_equal,
    static_shape,
)
from keras_attention.ops.chunked import DEFAULT_CHUNK_SIZE, chunked_attention
from keras_attention.ops.fused import fused_attention
from keras_attention.ops.masks import (
    attended_keys,
    merge_masks,
    zero_unattended,
)
from keras_attention.ops.mods import (
    document_mask_mod,
)
from keras_attention.ops.plan import (
    KERNELS,
    KernelUnavailable,
    is_key_padding,
    keras_ops_path,
    plan_kernel,
)
from keras_attention.ops.random import attention_dropout_words, check_dropout_rate
from keras_attention.ops.sinks import apply_sinks, check_sinks, kept_share
from keras_attention.ops.softmax import MASKED_SCORE, masked_softmax
from keras_attention.ops.spec import build_spec


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
    bias=None,
    mask=None,
    scale=None,
    is_causal=False,
    flash_attention=None,
    attn_logits_soft_cap=None,
    *,
    chunk_size=None,
    sliding_window=None,
    alibi_slopes=None,
    score_mod=None,
    score_mod_inputs=(),
    mask_mod=None,
    segment_ids=None,
    query_offset=0,
    return_weights=False,
    return_lse=False,
    dropout_rate=0.0,
    seed=None,
    sinks=None,
):
    """Scaled dot-product attention, `softmax(Q K^T / sqrt(d_k)) V`, per head.

    `keras.ops.dot_product_attention`'s arguments in its order, so that a call
    written for it runs unchanged, on every backend and device (its flash path
    and soft cap need a GPU or TPU; here the memory-efficient path and every
    argument run on CPUs too, and train). Beyond it: attention weights or the
    log-sum-exp on request, padding masks that are safe for fully masked rows
    (they give zeros, never NaN), score and mask functions (FlexAttention's
    `score_mod` and `mask_mod`), packed sequences and queries at an offset
    into a cache. Keys and values may have fewer heads than the queries
    (grouped-query attention, Ainslie et al. 2023): query head `n` attends
    with key/value head `n // (N / N_kv)`, without copying the keys and values
    on the standard path. Keys and values at positions that no query may
    attend to (padding, keys past the last query of a causal mask) are never
    read: NaN or inf there reaches no output and no gradient.

    The score of query `i` for key `j` is built in this order: the scaled
    dot product, plus `bias`, minus ALiBi's `slope * |i - j|`, through
    `score_mod`, soft-capped; then `mask`, `is_causal`, `sliding_window`,
    `mask_mod` and `segment_ids` decide which keys it sees.

    Args:
        query: `(batch, T, num_heads, head_dim)`.
        key: `(batch, S, num_kv_heads, head_dim)`, `num_kv_heads` a divisor
            of `num_heads` (equal for multi-head attention, 1 for multi-query
            attention).
        value: `(batch, S, num_kv_heads, value_dim)`.
        bias: optional float tensor broadcastable to `(batch, num_heads, T, S)`
            added to the scaled scores. Not on the memory-efficient path,
            which never builds `(T, S)` tensors: a bias computed from the
            positions goes there as a `score_mod`.
        mask: optional boolean tensor broadcastable to
            `(batch, num_heads, T, S)`; True = attend.
        scale: multiplier of the scores; default `1 / sqrt(head_dim)`.
        is_causal: query `i` only attends to keys `j <= i + query_offset`
            (with `T < S` and no offset, the upper-left alignment of
            `keras.ops`; `query_offset=S - T` aligns to the lower right).
        flash_attention: True takes a memory-efficient path: the backend's
            fused kernel where one serves the call (PyTorch's
            `scaled_dot_product_attention`, cuDNN or this package's Pallas
            kernel on a GPU with JAX; see `attention_path`), else the chunked
            path (tiles of `chunk_size`, default 256). False takes the
            standard path. None (the default) takes the fused kernel where
            one serves, else the chunked path when `chunk_size` is set or
            the call is long (from 1024 x 1024 queries x keys, 512 x 512
            with a causal mask or a window, without a dense bias), else
            the standard path. The rules are `ops.plan.plan_kernel`'s.
        attn_logits_soft_cap: if set, scores `s` become
            `cap * tanh(s / cap)` before the softmax (Gemma 2; the tanh of
            JAX's TPU kernels that keras.ops reaches only there).
        chunk_size: the memory-efficient path with tiles of this many
            queries and keys: memory grows as O(T * chunk_size) instead of
            O(T * S), in the backward pass too (a custom gradient recomputes
            each tile), and tiles that no query may see are skipped. Same
            result as the standard path to float tolerance; cannot return
            weights.
        sliding_window: if set, query `i` only attends to keys `j` with
            `|i - j| < sliding_window` (with `is_causal`, the
            `sliding_window` most recent keys); on the chunked path time and
            memory grow as T * sliding_window, not T * S.
        alibi_slopes: optional `num_heads` constants (not trained, e.g.
            `alibi_slopes(num_heads)`): ALiBi's bias `-slope_h * |i - j|` is
            added to the scores of head `h` (Press et al. 2022), computed tile
            by tile on the chunked path.
        score_mod: `score_mod(score, b, h, q_idx, kv_idx, *score_mod_inputs)`
            returns the new scores (see `keras_attention.ops.mods`), on both
            paths, in the forward and the backward pass.
        score_mod_inputs: tensors `score_mod` reads (a trainable bias table);
            passed as its last arguments, so that their gradients are exact
            on the memory-efficient path too. There a `score_mod` may also
            close over them on JAX (`jax.closure_convert` hoists them into
            the custom gradient); TensorFlow and PyTorch cannot do that, and
            a closure over a trainable variable (TensorFlow) or a tensor that
            requires a gradient (PyTorch) raises a ValueError that says so.
        mask_mod: `mask_mod(b, h, q_idx, kv_idx)` returns True where query
            `q_idx` may attend to key `kv_idx`; the memory-efficient path
            skips every tile it masks whole.
        segment_ids: packed sequences: int `(batch, T)` ids of the document
            of each position (self-attention), or a pair `(query_ids (batch,
            T), key_ids (batch, S))`; a query attends only to keys of its
            own document (JAX's `SegmentIds`). Tiles between two documents
            are skipped on the memory-efficient path, so a packed row costs
            the sum of its documents' squared lengths.
        query_offset: the absolute position of the first query (int or
            scalar tensor): queries over a cache of earlier keys, a prompt
            prefilled in one pass. The causal mask, the sliding window,
            ALiBi and the `q_idx` of the mods count from it.
        return_weights: also return the weights `(batch, num_heads, T, S)`
            (standard path only).
        return_lse: also return the log-sum-exp of each query's scores
            `(batch, num_heads, T)`, float32 (-inf for a query that sees no
            key): two attentions over the halves of the keys merge exactly
            into the attention over all of them with it.
        dropout_rate: attention dropout: each normalized weight `p_ij` is
            dropped with this probability and the kept ones scaled by
            `1 / (1 - dropout_rate)` (the log-sum-exp is unchanged, the
            weights returned are those before dropout). The mask is a hash
            of `(seed, b, h, q_idx, kv_idx)`, the same on the standard and
            the chunked path and in the Pallas kernel, which regenerate it
            tile by tile in the backward pass (nothing of size `(T, S)` is
            stored). PyTorch's SDPA draws its own mask from PyTorch's
            generator (it differs, and ignores `seed`); cuDNN has no
            dropout. A float in `[0, 1)`.
        seed: the dropout's seed: an int (the same mask at every call), a
            `keras.random.SeedGenerator` (drawn once per call) or a seed
            tensor of two ints. None draws from Keras' global seed
            generator, which traced code (`jax.jit`, `tf.function`) cannot:
            there a seed is required.
        sinks: optional float `(num_heads,)`: per head, a logit that joins
            every query's softmax as one more key with no value (GPT-OSS's
            learned sinks; `keras_attention.ops.sinks`). Computed exactly
            from the log-sum-exp, `output * sigmoid(lse - sink)`, so only
            paths that return it take the call. The weights returned are
            the scaled ones, the log-sum-exp includes the sink.

    Returns:
        `(batch, T, num_heads, value_dim)`, followed by the weights and the
        log-sum-exp when requested (a tuple then).

    Example:

    >>> q = keras.random.normal((2, 5, 4, 8))
    >>> kv = keras.random.normal((2, 7, 4, 8))
    >>> dot_product_attention(q, kv, kv).shape
    (2, 5, 4, 8)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Ainslie et al., 2023. GQA](https://arxiv.org/abs/2305.13245)
        - [Press et al., 2022. ALiBi](https://arxiv.org/abs/2108.12409)
        - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
        - [Gemma Team, 2024. Gemma 2](https://arxiv.org/abs/2408.00118)
    """
    query, key, value = _common_dtype(query, key, value)
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
    q_shape, k_shape = _check_inputs(query, key, value, mask)
    check_positive_int("chunk_size", chunk_size, allow_none=True)
    check_positive_int("sliding_window", sliding_window, allow_none=True)
    _check_choices(
        flash_attention, chunk_size, return_weights, bias, attn_logits_soft_cap
    )
    _check_mods(score_mod, score_mod_inputs, mask_mod)
    sinks = check_sinks(sinks, q_shape[2])
    words = attention_dropout_words(dropout_rate, seed, query)
    spec = _spec(
        q_shape,
        k_shape,
        scale=scale,
        dropout_rate=dropout_rate,
        dropout_words=words,
        query_offset=query_offset,
        mask=mask,
        bias=bias,
        is_causal=is_causal,
        sliding_window=sliding_window,
        segment_ids=segment_ids,
        mask_mod=mask_mod,
        alibi_slopes=alibi_slopes,
        score_mod=score_mod,
        score_mod_inputs=score_mod_inputs,
        soft_cap=attn_logits_soft_cap,
    )
    # Sinks are applied from the log-sum-exp: only paths that return it.
    needs_lse = return_lse or sinks is not None
    path = plan_kernel(
        spec,
        query,
        value,
        flash_attention=flash_attention,
        chunk_size=chunk_size,
        return_weights=return_weights,
        return_lse=needs_lse,
    )
    results = _run(
        path,
        query,
        key,
        value,
        spec,
        chunk_size,
        return_weights,
        needs_lse,
        flash_attention=flash_attention,
        mask=mask,
        is_causal=is_causal,
        sliding_window=sliding_window,
        query_offset=query_offset,
    )
    if sinks is None:
        return results
    return apply_sinks(results, sinks, return_weights, return_lse)


def _run(
    path,
    query,
    key,
    value,
    spec,
    chunk_size,
    return_weights,
    return_lse,
    *,
    flash_attention,
    mask,
    is_causal,
    sliding_window,
    query_offset,
):
    """The call on `path`, falling back to a `keras.ops` path where a
    kernel turns out unable to trace it."""
    # Keys and values no query may see are never read: the standard path
    # zeroes them from the full dense mask it builds, the chunked path and
    # the Pallas kernel in each partial tile, SDPA from its dense mask; the
    # vendor kernels, which take no other mask, get them zeroed here.
    if path in KERNELS:
        query_length, key_length = _length(query, 1), _length(key, 1)
        reach = None
        if sliding_window is not None:
            reach = _window_reach(
                query_length, key_length, sliding_window, query_offset
            )
        attended = _attended_keys(
            merge_masks(mask, reach),
            is_causal,
            query_length,
            key_length,
            key.shape[2],
            query_offset,
        )
        kinds = spec.mask_kinds()
        # (Padding over the keys beside the causal mask or a window is
        # exact above: it does not depend on the query.)
        reads_functions = path in ("torch_flex", "jax_tokamax")
        if reads_functions and (
            any(k not in ("causal", "window") for k in kinds)
            or (kinds and spec.mask is not None and not is_key_padding(spec.mask))
        ):
            # Documents, a mask_mod, or a dense mask beside the parts, which
            # FlexAttention and tokamax read as functions: the keys no query
            # sees under all of them together.
            seen = ops.transpose(spec.seen_keys(query, key), (0, 2, 1))
            seen = ops.any(_split_heads(seen, _groups(query, key)), axis=3)
            attended = seen if attended is None else ops.logical_and(attended, seen)
        key = zero_unattended(key, attended)
        value = zero_unattended(value, attended)

        try:
            # `_standard`: where a dense mask the plan hoped is padding is
            # not (the chunked path's custom gradient cannot sit in JAX's
            # conditional: it closes over the mask).
            return fused_attention(
                path, query, key, value, spec, return_lse, fallback=_standard
            )
        except KernelUnavailable as error:
            warnings.warn(
                f"{error} The call takes the `keras.ops` path instead.",
                stacklevel=2,
            )
            path = keras_ops_path(spec, query, value, flash_attention)
    if path == "chunked":
        return _chunked(query, key, value, spec, chunk_size, return_lse)
    return _standard(query, key, value, spec, return_weights, return_lse)


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


def _chunked(query, key, value, spec, chunk_size, return_lse=False):
    """The chunked path, grouped heads copied for its tiles."""
    groups = _groups(query, key)
    if groups > 1:
        # The tiles slice one head axis; the copies cost O(S * N * H), the
        # size of the queries, against O(T * S * N) of attention.
        key, value = ops.repeat(key, groups, 2), ops.repeat(value, groups, 2)
    return chunked_attention(
        query,
        key,
        value,
        spec,
        chunk_size=chunk_size or DEFAULT_CHUNK_SIZE,
        return_lse=return_lse,
    )


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


def attention_path(
    query,
    value,
    *,
    mask=None,
    bias=None,
    is_causal=False,
    query_offset=0,
    flash_attention=None,
    chunk_size=None,
    sliding_window=None,
    alibi_slopes=None,
    score_mod=None,
    mask_mod=None,
    segment_ids=None,
    attn_logits_soft_cap=None,
    return_weights=False,
    return_lse=False,
    dropout_rate=0.0,
    sinks=None,
):
    """The computation `dot_product_attention` takes for these arguments
    (the same names), on this backend and device: a backend's fused kernel
    (`"torch_sdpa"`, `"torch_flex"`, `"jax_cudnn"`, `"jax_tokamax"`,
    `"jax_pallas"`) where one
    serves the call and `flash_attention` is not False, else `"chunked"`
    (`chunk_size` or `flash_attention=True`) or `"standard"`; the rules are
    `keras_attention.ops.plan.plan_kernel`'s. An explicit `chunk_size`
    always takes the chunked path.

    Args:
        query: `(batch, T, num_heads, head_dim)` (its dtype and head size
            decide whether cuDNN fits).
        value: `(batch, S, num_kv_heads, value_dim)`.
        mask: as for `dot_product_attention`.
        bias: as for `dot_product_attention`.
        is_causal: as for `dot_product_attention`.
        query_offset: as for `dot_product_attention`.
        flash_attention: as for `dot_product_attention`.
        chunk_size: as for `dot_product_attention`.
        sliding_window: as for `dot_product_attention`.
        alibi_slopes: as for `dot_product_attention`.
        score_mod: as for `dot_product_attention`.
        mask_mod: as for `dot_product_attention`.
        segment_ids: as for `dot_product_attention`.
        attn_logits_soft_cap: as for `dot_product_attention`.
        return_weights: as for `dot_product_attention`.
        return_lse: as for `dot_product_attention`.
        dropout_rate: as for `dot_product_attention` (cuDNN takes none).
        sinks: as for `dot_product_attention` (only paths that return the
            log-sum-exp take them).

    Returns:
        One of `keras_attention.ops.plan.PATHS`: `"torch_sdpa"`,
        `"torch_flex"`, `"jax_cudnn"`, `"jax_tokamax"`, `"jax_pallas"`,
        `"chunked"` or `"standard"`.

    Example:

    >>> q = keras.random.normal((1, 8, 2, 4))
    >>> attention_path(q, q, chunk_size=4)
    'chunked'

    References:
        - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
    """
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
    check_dropout_rate(dropout_rate)
    q_shape, v_shape = static_shape(query), static_shape(value)
    spec = _spec(
        q_shape,
        v_shape,
        scale=None,
        query_offset=query_offset,
        mask=mask,
        bias=bias,
        is_causal=is_causal,
        sliding_window=sliding_window,
        segment_ids=segment_ids,
        mask_mod=mask_mod,
        alibi_slopes=alibi_slopes,
        score_mod=score_mod,
        score_mod_inputs=(),
        soft_cap=attn_logits_soft_cap,
        dropout_rate=dropout_rate,
    )
    return plan_kernel(
        spec,
        query,
        value,
        flash_attention=flash_attention,
        chunk_size=chunk_size,
        return_weights=return_weights,
        return_lse=return_lse or sinks is not None,
    )


def _common_dtype(query, key, value):
    """The three as tensors of their common dtype, as in `keras.ops`."""
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    dtype = backend.result_type(query.dtype, key.dtype, value.dtype)
    return tuple(
        x if backend.standardize_dtype(x.dtype) == dtype else ops.cast(x, dtype)
        for x in (query, key, value)
    )


def _check_choices(flash_attention, chunk_size, return_weights, bias, soft_cap):
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
    slopes = np.asarray(slopes, "float32")
    if slopes.shape != (num_heads,):
        raise ValueError(
            f"`alibi_slopes` must hold one slope per query head, shape "
            f"({num_heads},); received shape {slopes.shape}."
        )
    return slopes


def _window_reach(query_length, key_length, window, query_offset=0):
    """`(1, S)`: the keys within `window - 1` positions of some query, or
    None when every key is. The chunked path applies the window tile by tile
    and never builds the `(T, S)` band; the keys no query may see go into the
    mask so that they are zeroed before anything reads them, as for any
    mask."""
    if (
        isinstance(query_length, int)
        and isinstance(key_length, int)
        and isinstance(query_offset, int)
        and key_length <= query_offset + query_length + window - 1
        and query_offset - window + 1 <= 0
    ):
        return None
    positions = ops.arange(key_length, dtype="int32")
    first = ops.cast(query_offset, "int32") - window + 1
    last = ops.cast(query_offset, "int32") + query_length + window - 1
    return ops.logical_and(
        ops.greater_equal(positions, first), ops.less(positions, last)
    )[None, :]


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
    peak = ops.stop_gradient(ops.max(scores, axis=-1, keepdims=True))
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
        attends = ops.greater(ops.max(scores, axis=-1, keepdims=True), MASKED_SCORE / 2)
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
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1])
    if alibi_slopes is not None:
        alibi_slopes = _check_slopes(alibi_slopes, q_shape[2])
    spec = build_spec(
        scale=scale,
        mask=mask,
        bias=bias,
        is_causal=is_causal,
        alibi_slopes=alibi_slopes,
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
