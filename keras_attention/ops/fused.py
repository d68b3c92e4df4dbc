"""The backends' own fused attention kernels, behind the one dispatch of
`dot_product_attention`: each reads the call's `AttentionSpec` (which one
serves a call is `keras_attention.ops.plan.plan_kernel`'s choice).

- `"torch_sdpa"`: PyTorch's `scaled_dot_product_attention`. The causal mask
  alone goes to it as `is_causal`; every other mask part, evaluated on the
  whole grid, and the bias parts (ALiBi, a dense bias) go as its mask;
  dropout as its `dropout_p` (PyTorch's generator draws that mask).
- `"jax_cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")`, the
  causal mask and a window as its own arguments.
- `"jax_pallas"`: `keras_attention.ops.pallas_flex.flex_attention`, which
  applies every part inside its tiles over the spec's block map.

A fully masked query row gives zeros here too: its mask row is opened to
every key (so that no kernel divides by zero) and its output multiplied by
zero, which also stops its gradient.

References:
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
    - [Dao, 2023. FlashAttention-2](https://arxiv.org/abs/2307.08691)
"""

from keras import ops

from keras_attention.ops.plan import is_key_padding, is_zero_offset
from keras_attention.ops.spec import BlockGrid, dense_mask_part

# The tile of the Pallas kernel: 128 x 128 fills a Hopper SM's tensor cores
# in bf16 and keeps two tiles of scores in its registers and shared memory.
PALLAS_BLOCK_SIZE = 128


def fused_attention(kernel, query, key, value, spec, return_lse=False):
    """Attention of `(B, T, N, H)` queries over `(B, S, N_kv, H)` keys and
    values as `spec` describes it, with `kernel` (one of
    `keras_attention.ops.plan.KERNELS`): `(B, T, N, H_v)` equal to the
    standard path's to float rounding, and the log-sum-exp `(B, N, T)` too
    with `return_lse` (the Pallas kernel only)."""
    if kernel == "jax_cudnn":
        return _jax_cudnn(query, key, value, spec)
    if kernel == "jax_pallas":
        return _jax_pallas(query, key, value, spec, return_lse)
    return _torch_sdpa(query, key, value, spec)


def _jax_cudnn(query, key, value, spec):
    import jax

    window = spec.window
    local_window = None
    if window is not None:
        local_window = (window - 1, 0 if spec.is_causal else window - 1)
    return jax.nn.dot_product_attention(
        query,
        key,
        value,
        scale=float(spec.scale),
        is_causal=spec.is_causal,
        local_window_size=local_window,
        implementation="cudnn",
    )


def _jax_pallas(query, key, value, spec, return_lse):
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
            batch, key_length = ops.shape(key)[0], ops.shape(key)[1]
            keys = ops.reshape(ops.cast(spec.mask, "bool"), (-1, key_length))
            native["key_mask"] = ops.broadcast_to(keys, (batch, key_length))
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
