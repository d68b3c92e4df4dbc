"""Multi-head scaled dot-product attention with the layout of `keras.ops`:
the op, `dot_product_attention`, and the choice of its path,
`attention_path`. The call's arguments are checked in
`keras_attention.ops.attention_checks`, `keras_attention.ops.plan` picks the
path, and this module runs it: a backend's fused kernel (`ops.fused`), with
the keys and values that no query sees zeroed first, the chunked path
(`ops.chunked`) or the standard path (`ops.standard_path`, which also holds
`attention_weights` and `apply_attention_weights`)."""

import warnings

from keras import ops

from keras_attention._checks import check_positive_int, static_shape
from keras_attention.ops.attention_checks import (
    _check_choices,
    _check_inputs,
    _check_mods,
    _common_dtype,
    _spec,
)
from keras_attention.ops.chunked import DEFAULT_CHUNK_SIZE, chunked_attention
from keras_attention.ops.fused import fused_attention
from keras_attention.ops.masks import merge_masks, zero_unattended
from keras_attention.ops.plan import (
    KERNELS,
    KernelUnavailable,
    is_key_padding,
    keras_ops_path,
    plan_kernel,
)
from keras_attention.ops.random import attention_dropout_words, check_dropout_rate
from keras_attention.ops.sinks import apply_sinks, check_sinks

# The names marked F401 were this module's before the standard path moved to
# standard_path: importable from here as before.
from keras_attention.ops.standard_path import (
    _attended_keys,
    _groups,
    _length,
    _split_heads,
    _standard,
    apply_attention_weights,  # noqa: F401
    attention_weights,  # noqa: F401
)


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
            # The user's call: `_run` is called by `dot_product_attention`.
            warnings.warn(
                f"{error} The call takes the `keras.ops` path instead.",
                stacklevel=3,
            )
            path = keras_ops_path(spec, query, value, flash_attention)
    if path == "chunked":
        return _chunked(query, key, value, spec, chunk_size, return_lse)
    return _standard(query, key, value, spec, return_weights, return_lse)


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
