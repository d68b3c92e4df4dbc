"""Which computation serves one attention call: `plan_kernel`.

A pure function of the call's `AttentionSpec`, the backend, the device, the
dtype, the shapes and what the caller asked for, so that every choice is one
row of a table (tests/ops/test_plan.py, the device faked). The computations:

- `"torch_sdpa"`: PyTorch's `scaled_dot_product_attention` (flash, cuDNN or
  memory-efficient kernels on a GPU; the flash kernel on a CPU, which
  trains), on PyTorch, on any device;
- `"jax_cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")` on a
  GPU, half precision, head sizes up to 128;
- `"jax_pallas"`: this package's Pallas kernel (`keras_attention.ops.
  pallas_flex`), which applies the mask and score parts inside its tiles,
  on a GPU with JAX;
- `"chunked"` and `"standard"`: the `keras.ops` paths, the reference.
"""

from keras import backend

from keras_attention.ops.spec import AttentionSpec

KERNELS = ("torch_sdpa", "jax_cudnn", "jax_pallas")
PATHS = (*KERNELS, "chunked", "standard")
# cuDNN's flash attention through jax.nn: half precision, head sizes up to 128.
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128
# What a vendor kernel takes of the parts (anything else, a "custom" part or
# the soft cap, only the keras.ops paths and the Pallas kernel compute).
STRUCTURAL_MASKS = ("causal", "window")
BIAS_SCORES = ("alibi",)
# What the Pallas kernel computes inside its tiles without a gather (Triton
# lowers none on a GPU): the others, a custom part or T5's table, that it
# computes in Pallas' interpreter but would not lower, stay on the chunked
# path there.
PALLAS_MASKS = ("causal", "window", "documents")
PALLAS_SCORES = ("alibi", "soft_cap")


def plan_kernel(
    spec: AttentionSpec,
    query,
    value,
    *,
    flash_attention=None,
    chunk_size=None,
    return_weights=False,
    return_lse=False,
    backend_name=None,
    platform=None,
):
    """The computation that serves a call (one of `PATHS`).

    An explicit `chunk_size` takes the chunked path, `flash_attention=False`
    or `return_weights` the standard one. Otherwise:

    - PyTorch: SDPA for every call without a custom score function, soft cap
      or log-sum-exp asked for; its other parts (windows, documents, a
      `mask_mod`, ALiBi, a dense bias) become a dense mask and bias, which
      costs what the standard path costs, so with `flash_attention=True`
      (memory asked to stay O(T)) only calls with at most a padding mask and
      the causal mask take it.
    - JAX on a GPU: cuDNN for calls it takes whole (half precision, heads up
      to 128, no dense mask or bias, no score part, the causal mask and a
      window from position 0); with `flash_attention=True`, the Pallas
      kernel for the calls it computes without a gather (`PALLAS_MASKS`,
      `PALLAS_SCORES`, a padding mask over keys).
    - Otherwise the chunked path with `flash_attention=True`, else the
      standard one.

    Args:
        spec: the call's `AttentionSpec`.
        query: `(B, T, N, H)` (dtype and head size decide cuDNN).
        value: `(B, S, N_kv, H_v)`.
        flash_attention: as for `dot_product_attention`.
        chunk_size: as for `dot_product_attention`.
        return_weights: as for `dot_product_attention`.
        return_lse: as for `dot_product_attention`.
        backend_name: the Keras backend (default: the current one).
        platform: `"cpu"`, `"gpu"` or `"tpu"` (default: the backend's
            device; a test fakes it).

    Returns:
        One of `PATHS`.
    """
    if chunk_size is not None:
        return "chunked"
    if flash_attention is False or return_weights:
        return "standard"
    memory_efficient = bool(flash_attention)
    backend_name = backend_name or backend.backend()
    if backend_name == "torch" and not return_lse:
        if _sdpa_takes(spec, memory_efficient):
            return "torch_sdpa"
    if backend_name == "jax" and (platform or _jax_platform()) == "gpu":
        if not return_lse and _cudnn_takes(spec, query, value):
            return "jax_cudnn"
        # The Pallas kernel's Triton lowering is unverified on a GPU (none
        # was lent while it was written): it serves where memory was asked
        # for, in place of the chunked path, not yet by default.
        if memory_efficient and _pallas_takes(spec):
            return "jax_pallas"
    return "chunked" if memory_efficient else "standard"


def _sdpa_takes(spec, memory_efficient):
    if any(kind not in BIAS_SCORES for kind in spec.score_kinds()):
        return False
    if not memory_efficient:
        return True
    plain_masks = all(kind == "causal" for kind in spec.mask_kinds())
    return plain_masks and spec.bias is None and not spec.score_parts


def _pallas_takes(spec):
    return (
        spec.bias is None
        and (spec.mask is None or is_key_padding(spec.mask))
        and all(kind in PALLAS_MASKS for kind in spec.mask_kinds())
        and all(kind in PALLAS_SCORES for kind in spec.score_kinds())
    )


def is_key_padding(mask):
    """Whether a dense mask is one row of keys per batch row, `(B or 1, 1,
    1, S)` (or of lower rank, `(S,)`), which kernels read as a key mask."""
    shape = tuple(mask.shape)
    return len(shape) == 1 or all(size == 1 for size in shape[-3:-1])


def _cudnn_takes(spec, query, value):
    kinds = spec.mask_kinds()
    head_dim = query.shape[-1]
    return (
        spec.mask is None
        and spec.bias is None
        and not spec.score_parts
        and not spec.dropout_rate  # jax.nn's cuDNN call has no dropout
        and all(kind in STRUCTURAL_MASKS for kind in kinds)
        and (not kinds or is_zero_offset(spec.query_offset))
        and backend.standardize_dtype(query.dtype) in CUDNN_DTYPES
        and head_dim is not None
        and head_dim <= CUDNN_MAX_HEAD_DIM
        and head_dim == value.shape[-1]
    )


def is_zero_offset(offset):
    """Whether `query_offset` is known to be 0 (a Python int): kernels that
    align the causal mask to the upper left take only that."""
    return isinstance(offset, int) and offset == 0


def _jax_platform():
    import jax

    return jax.default_backend()
