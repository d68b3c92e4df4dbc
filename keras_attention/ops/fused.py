"""The backends' own fused attention kernels, behind the one dispatch of
`dot_product_attention`: each reads the call's `AttentionSpec` (which one
serves a call is `keras_attention.ops.plan.plan_kernel`'s choice).

- `"torch_sdpa"`: PyTorch's `scaled_dot_product_attention`, for what it
  takes as its own arguments: no mask, the causal mask from offset 0 (as
  `is_causal`) alone, a padding or other dense mask and a dense bias (as
  its `attn_mask`) without it. Off a CUDA device it also takes every other
  mask part, evaluated on the whole grid, and ALiBi, as a dense mask and
  bias. Dropout goes as its `dropout_p` (PyTorch's generator draws that
  mask).
- `"torch_flex"`: PyTorch's FlexAttention (`keras_attention.ops.
  torch_flex`), compiled, on a CUDA device for the rest: windows, packed
  documents, ALiBi, the soft cap, a user's `mask_mod` and `score_mod`, the
  causal mask at an offset or beside a dense mask, and any call that asks
  for the log-sum-exp; the mask parts as its `BlockMask`, the score parts
  as its `score_mod`.
- `"jax_cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")`, the
  causal mask and a window as its own arguments, padding over the keys as
  sequence lengths where it is right padding (checked in the graph; left
  padding takes the Pallas kernel in the same compiled function).
- `"jax_tokamax"`: tokamax's Mosaic GPU attention (`keras_attention.ops.
  tokamax_attention`), the causal mask, windows, documents and right
  padding as ranges of keys per query, the soft cap as its own; documents
  out of order and other padding take the Pallas kernel in the same
  compiled function.
- `"jax_pallas"`: `keras_attention.ops.pallas_flex.flex_attention`, which
  applies every part inside its tiles over the spec's block map.

A fully masked query row gives zeros here too: for SDPA its mask row is
opened to every key (so that no kernel divides by zero) and its output
multiplied by zero, which also stops its gradient; FlexAttention returns
zeros for it itself.

References:
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
    - [Dao, 2023. FlashAttention-2](https://arxiv.org/abs/2307.08691)
"""

from keras import ops

from keras_attention.ops.plan import is_factorable, is_key_padding, is_zero_offset
from keras_attention.ops.spec import BlockGrid, dense_mask_part

# The tile of the Pallas kernel: 64 queries by 64 keys, for every head size.
# Measured on an H100 (JAX 0.11.2, B=8, T=4096, 16 heads of 128, bf16,
# causal, forward + backward): tiles of 128 ran ALiBi in 23.5 ms, packed
# documents in 11.8 ms, and the soft cap's backward asked for 256 KiB of
# shared memory (227 KiB there) and failed; tiles of 64 took 9.5, 5.0 and
# 13.6 ms; tiles of 32, 20.5 and 7.3 ms. Heads of 256 features need 64
# anyway: a 128-row tile of them is 192 KiB before the scores.
PALLAS_BLOCK_SIZE = 64


def fused_attention(kernel, query, key, value, spec, return_lse=False, fallback=None):
    """Attention of `(B, T, N, H)` queries over `(B, S, N_kv, H)` keys and
    values as `spec` describes it, with `kernel` (one of
    `keras_attention.ops.plan.KERNELS`): `(B, T, N, H_v)` equal to the
    standard path's to float rounding, and the log-sum-exp `(B, N, T)` too
    with `return_lse` (the Pallas kernel and FlexAttention only). A JAX
    kernel given a dense mask the plan found factorable checks in the graph
    whether it is padding, and calls `fallback(query, key, value, spec)`
    (a `keras.ops` path) where it is not."""
    if kernel.startswith("jax") and is_factorable(spec.mask):
        return _factored(kernel, query, key, value, spec, fallback, return_lse)
    if kernel == "torch_flex":
        from keras_attention.ops.torch_flex import torch_flex_attention

        return torch_flex_attention(query, key, value, spec, return_lse)
    if kernel == "jax_cudnn":
        return _jax_cudnn(query, key, value, spec)
    if kernel == "jax_pallas":
        return _jax_pallas(query, key, value, spec, return_lse)
    if kernel == "jax_tokamax":
        from keras_attention.ops.tokamax_attention import tokamax_attention

        def pallas():
            return _jax_pallas(query, key, value, spec)

        return tokamax_attention(query, key, value, spec, pallas)
    return _torch_sdpa(query, key, value, spec)


def _factored(kernel, query, key, value, spec, fallback, return_lse=False):
    """A dense `(B or 1, 1, T, S)` mask: where it is a mask over queries
    times one over keys (padding), `kernel` takes the keys' with the rows
    zeroed after it (their log-sum-exp -inf); else `fallback(query, key,
    value, spec, return_lse=return_lse)`, the standard path. Both are
    compiled, and one select picks per call, on the device. The standard
    branch's `(T, S)` buffers may be reserved even when the
    kernel runs: padding as Keras masks or `(B, 1, S)` avoids both."""
    import jax

    mask = ops.cast(spec.mask, "bool")
    rows = ops.any(mask, axis=-1)  # (B or 1, 1, T)
    cols = ops.any(mask, axis=-2)  # (B or 1, 1, S)
    factored = ops.all(
        ops.equal(mask, ops.logical_and(rows[..., None], cols[..., None, :]))
    )

    # The branches take the tensors they differentiate as operands: a
    # custom gradient inside a branch may not close over the outer trace.
    def by_kernel(query, key, value, mask):
        rows, cols = ops.any(mask, axis=-1), ops.any(mask, axis=-2)
        keys = spec._replace(mask=cols[:, :, None, :])
        results = fused_attention(kernel, query, key, value, keys, return_lse)
        output = results[0] if return_lse else results
        shown = ops.transpose(rows, (0, 2, 1))[..., None]  # (B or 1, T, 1, 1)
        output = ops.where(shown, output, ops.zeros((), output.dtype))
        if not return_lse:
            return output
        return output, ops.where(rows, results[1], float("-inf"))  # (B, N, T)

    def by_fallback(query, key, value, mask):
        masked = spec._replace(mask=mask)
        return fallback(query, key, value, masked, return_lse=return_lse)

    operands = (query, key, value, mask)
    return jax.lax.cond(factored, by_kernel, by_fallback, *operands)


def _jax_cudnn(query, key, value, spec):
    import jax

    window = spec.window
    local_window = None
    if window is not None:
        local_window = (window - 1, 0 if spec.is_causal else window - 1)

    def cudnn(lengths=None):
        return jax.nn.dot_product_attention(
            query,
            key,
            value,
            scale=float(spec.scale),
            is_causal=spec.is_causal,
            local_window_size=local_window,
            key_value_seq_lengths=lengths,
            implementation="cudnn",
        )

    if spec.mask is None:
        return cudnn()
    # Padding over the keys: cuDNN reads right padding as lengths; any other
    # pattern (left padding, holes) takes the Pallas kernel. Both are
    # compiled, the check picks one per call without leaving the device.
    keys = _key_mask(spec.mask, key)
    lengths = jax.numpy.sum(keys, axis=1, dtype="int32")
    positions = jax.numpy.arange(keys.shape[1], dtype="int32")
    right_padding = jax.numpy.all(keys == (positions[None, :] < lengths[:, None]))

    def by_lengths():
        # A row with no key gives zeros, as on every path (cuDNN's own
        # result for an empty row is not specified).
        output = cudnn(jax.numpy.maximum(lengths, 1))
        return jax.numpy.where((lengths > 0)[:, None, None, None], output, 0)

    return jax.lax.cond(
        right_padding, by_lengths, lambda: _jax_pallas(query, key, value, spec)
    )


def _key_mask(mask, key):
    """A padding mask `(B or 1, 1, 1, S)` (or `(S,)`) as bool `(B, S)`."""
    batch, key_length = ops.shape(key)[0], ops.shape(key)[1]
    keys = ops.reshape(ops.cast(mask, "bool"), (-1, key_length))
    return ops.broadcast_to(keys, (batch, key_length))


def _jax_pallas(query, key, value, spec, return_lse=False):
    from keras_attention.ops.pallas_flex import flex_attention

    block_size = PALLAS_BLOCK_SIZE
    grid = BlockGrid.of(query, key, block_size, spec.query_offset)
    tile_mask = None if spec.mask is None else grid.pad_mask(spec.mask)
    block_map = spec.block_map(grid, tile_mask)
    # What the kernel reads as tiles (no gather, which Triton does not
    # lower): the documents' ids, ALiBi's slopes, a padding mask over keys.
    native = {}
    mask_parts = []
    for part in spec.mask_parts:
        if part.kind == "documents":
            native["segment_ids"] = part.data
        else:
            mask_parts.append(part)
    score_parts = []
    for part in spec.score_parts:
        if part.kind == "alibi":
            native["alibi_slopes"] = part.data[0]
        else:
            score_parts.append(part)
    if spec.mask is not None:
        if is_key_padding(spec.mask):
            native["key_mask"] = _key_mask(spec.mask, key)
        else:
            mask_parts.append(dense_mask_part(spec.mask, spec.query_offset))
    rest = spec._replace(
        mask=None, mask_parts=tuple(mask_parts), score_parts=tuple(score_parts)
    )
    output, lse = flex_attention(
        query,
        key,
        value,
        scale=float(spec.scale),
        block_map=block_map,
        block_size=block_size,
        score_mod=rest.score_mod,
        score_mod_inputs=spec.score_mod_inputs,
        mask_mod=rest.mask_mod,
        query_offset=spec.query_offset,
        interpret=_pallas_interprets(),
        dropout_rate=spec.dropout_rate,
        dropout_words=spec.dropout_words,
        **native,
    )
    return (output, lse) if return_lse else output


def _torch_sdpa(query, key, value, spec):
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    mask, is_causal = spec.mask, spec.is_causal
    causal_alone = spec.mask_kinds() == ("causal",) and mask is None
    if spec.mask_parts and not (causal_alone and is_zero_offset(spec.query_offset)):
        # PyTorch takes a causal mask only alone and from offset 0; any other
        # part is evaluated on the whole grid.
        mask, is_causal = spec.dense_mask(query, key), False
    bias = None
    if spec.bias is not None or spec.score_parts:
        batch, query_length, heads = ops.shape(query)[:3]
        zeros = ops.zeros((batch, heads, query_length, ops.shape(key)[1]), "float32")
        bias = spec.dense_scores(query, key, zeros)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        # Every PyTorch kernel takes grouped heads as copies; `enable_gqa`
        # (PyTorch 2.5) only spares the math kernel the copy.
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    attends = None
    if mask is not None:
        mask = torch.as_tensor(mask, dtype=torch.bool, device=q.device)
        while mask.dim() < 4:
            mask = mask[None]
        # Keys no query of a head sees: weight 0, but `0 * NaN` is NaN in the
        # kernel's products (and the rows opened below read every key).
        seen = mask.any(dim=-2)[..., None]
        k, v = (torch.where(seen, x, x.new_zeros(())) for x in (k, v))
        attends = mask.any(dim=-1, keepdim=True)
        mask = mask | ~attends
    if bias is not None:
        bias = bias.to(q.dtype)
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
        if is_causal:
            # PyTorch takes no float mask beside `is_causal`.
            causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
            bias = bias.masked_fill(~causal.to(q.device), float("-inf"))
            is_causal = False
        mask = bias
    # Dropout from PyTorch's own generator: its mask differs from the hash
    # of the other paths, and ignores the seed.
    output = scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=is_causal,
        scale=float(spec.scale),
        dropout_p=spec.dropout_rate,
    )
    if attends is not None:
        output = output * attends.to(output.dtype)
    return output.transpose(1, 2)


def _pallas_interprets():
    """Off a GPU (a test with the device faked for the plan) Pallas can only
    interpret the kernel: Triton compiles for GPUs."""
    import jax

    return jax.default_backend() != "gpu"
