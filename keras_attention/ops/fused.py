"""The backends' own fused attention kernels, behind the one dispatch of
`dot_product_attention`.

Where a call is plain enough (no bias, score or mask function, ALiBi, soft
cap, window, packed documents, weights or log-sum-exp asked for; a boolean
mask at most), a backend's fused kernel computes it faster, and in O(T)
memory, than the `keras.ops` paths, which stay the reference:

- `"torch_sdpa"`: PyTorch's `scaled_dot_product_attention` (its flash,
  memory-efficient or cuDNN kernels on a GPU, its flash kernel on a CPU,
  which trains), on any device PyTorch runs on;
- `"jax_cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")` on
  a GPU, in bfloat16 or float16, head sizes up to 128, without a mask
  (cuDNN fed a dense mask runs far below its own speed).

A fully masked query row gives zeros here too: its mask row is opened to
every key (so that no kernel divides by zero) and its output multiplied by
zero, which also stops its gradient.

References:
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
    - [Dao, 2023. FlashAttention-2](https://arxiv.org/abs/2307.08691)
"""

from keras import backend, ops

from keras_attention.ops.masks import causal_mask, merge_masks

KERNELS = ("torch_sdpa", "jax_cudnn")
# cuDNN's flash attention through jax.nn: half precision, head sizes up to 128.
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128


def fused_kernel(
    query,
    value,
    *,
    mask,
    is_causal,
    query_offset,
    plain,
    backend_name=None,
    platform=None,
):
    """The fused kernel that computes a call, or None for the `keras.ops`
    paths.

    Args:
        query, value: the call's query and values (their dtype and head sizes
            decide).
        mask: the boolean mask, or None.
        is_causal, query_offset: the causal mask asked for, from this offset.
        plain: the call asks for nothing beyond a mask and the causal mask
            (no bias, mods, ALiBi, soft cap, window, segments, weights,
            log-sum-exp, forced chunks, nor `flash_attention=False`).
        backend_name: the Keras backend (default: the current one).
        platform: `"cpu"`, `"gpu"` or `"tpu"`, the device the tensors live
            on (default: asked of the backend; a test fakes it).

    Returns:
        One of `KERNELS`, or None.
    """
    if not plain:
        return None
    backend_name = backend_name or backend.backend()
    if backend_name == "torch":
        return "torch_sdpa"
    if backend_name == "jax":
        platform = platform or _jax_platform()
        fits = (
            platform == "gpu"
            and mask is None
            and (not is_causal or _is_zero(query_offset))
            and backend.standardize_dtype(query.dtype) in CUDNN_DTYPES
            and query.shape[-1] is not None
            and query.shape[-1] <= CUDNN_MAX_HEAD_DIM
            and query.shape[-1] == value.shape[-1]
        )
        return "jax_cudnn" if fits else None
    return None


def fused_attention(kernel, query, key, value, mask, scale, is_causal, query_offset):
    """Attention of `(B, T, N, H)` queries over `(B, S, N_kv, H)` keys and
    values with `kernel` (one of `KERNELS`); the result `(B, T, N, H_v)`
    equals the standard path's to float rounding."""
    if kernel == "jax_cudnn":
        import jax

        return jax.nn.dot_product_attention(
            query,
            key,
            value,
            scale=float(scale),
            is_causal=is_causal,
            implementation="cudnn",
        )
    if is_causal and not (mask is None and _is_zero(query_offset)):
        # PyTorch takes a causal mask only alone and from offset 0.
        mask = merge_masks(
            mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1], query_offset)
        )
        is_causal = False
    return _torch_sdpa(query, key, value, mask, scale, is_causal)


def _torch_sdpa(query, key, value, mask, scale, is_causal):
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        # Every PyTorch kernel takes grouped heads as copies; `enable_gqa`
        # (PyTorch 2.5) only spares the math kernel the copy.
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    attends = None
    if mask is not None:
        mask = torch.as_tensor(mask, dtype=torch.bool, device=q.device)
        attends = mask.any(dim=-1, keepdim=True)
        mask = mask | ~attends
    output = scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, scale=float(scale)
    )
    if attends is not None:
        output = output * attends.to(output.dtype)
    return output.transpose(1, 2)


def _is_zero(offset):
    return isinstance(offset, int) and offset == 0


def _jax_platform():
    import jax

    return jax.default_backend()
