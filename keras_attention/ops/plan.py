"""Which computation serves one attention call: `plan_kernel`.

A pure function of the call's `AttentionSpec`, the backend, the device, the
dtype, the shapes and what the caller asked for, so that every choice is one
row of a table (tests/ops/test_plan.py, the device faked). The computations:

- `"torch_sdpa"`: PyTorch's `scaled_dot_product_attention` (flash, cuDNN or
  memory-efficient kernels on a GPU; the flash kernel on a CPU, which
  trains), on PyTorch, on any device;
- `"torch_flex"`: PyTorch's FlexAttention, compiled (`keras_attention.ops.
  torch_flex`), which applies the mask and score parts inside its tiles, on
  PyTorch with a CUDA device;
- `"jax_cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")` on a
  GPU, half precision, head sizes up to 128 (256 from Hopper on), the
  causal mask, a window and padding over the keys as sequence lengths;
- `"jax_tokamax"`: tokamax's Mosaic GPU flash attention (`keras_attention.
  ops.tokamax_attention`, the `tokamax` extra) on Hopper and Blackwell, half
  precision, for calls cuDNN does not take and it computes whole: the soft
  cap, packed documents, a window that is not causal, heads cuDNN refuses;
- `"jax_pallas"`: this package's Pallas kernel (`keras_attention.ops.
  pallas_flex`), which applies the mask and score parts inside its tiles,
  on a GPU with JAX, for every call cuDNN does not take whole;
- `"chunked"` and `"standard"`: the `keras.ops` paths, the reference. Where
  no kernel serves, the chunked path takes long calls by itself
  (`keras_ops_path`, the crossover measured below).

This is the one place a call's computation is chosen: the layers decide only
which parts they pass to the op (`layers.attention_plan`), then ask here.
"""

import functools
import importlib.util

import numpy as np
from keras import backend

from keras_attention.ops.spec import AttentionSpec

KERNELS = ("torch_sdpa", "torch_flex", "jax_cudnn", "jax_tokamax", "jax_pallas")
PATHS = (*KERNELS, "chunked", "standard")
# cuDNN's flash attention through jax.nn: half precision, head sizes up to 128,
# up to 256 from Hopper on (compute capability 9.0), multiples of 8.
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128
CUDNN_MAX_HEAD_DIM_HOPPER = 256
HOPPER = (9, 0)
# tokamax's Mosaic GPU attention: sm90 and sm100 only (its `gpu_utils`), and
# heads up to 256: for wider heads its forward's smallest tiles (128 queries,
# two stages of 64 keys) need more than a Hopper's 227 KiB of shared memory,
# by its own estimate.
TOKAMAX_GPUS = ((9, 0), (11, 0))
TOKAMAX_MAX_HEAD_DIM = 256
TOKAMAX_MASKS = ("causal", "window", "documents")
TOKAMAX_SCORES = ("soft_cap",)
# The Pallas kernel's largest head: a tile of 64 queries and keys of 256
# features still fits a GPU's shared memory (fused.PALLAS_BLOCK_SIZE).
PALLAS_MAX_HEAD_DIM = 256
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
# Where no kernel serves, the chunked path takes a call by itself from this
# many queries x keys squared; below it the standard path is as fast or
# faster. Measured (XLA, forward + backward, width 256, 4096 tokens per
# batch, 2-core CPU): causal, chunked/standard is 0.82 at T=512 and 0.63 at
# 1024 (it skips the tiles above the diagonal); not causal, 1.05 at 512 and
# 0.94 at 1024. Tiles of 256 (`chunked.DEFAULT_CHUNK_SIZE`) beat 128 and
# 512 at every length measured. Counting scores, not keys, keeps a few
# queries over a long cache (a decoding step, the `k` beams of
# `ancestry_beam_search`) on the standard path: their `(T, S)` scores are no
# bigger than the keys, and the chunked path's loop over tiles costs there
# (the beam step of width 4 at 256 tokens took 7x greedy's step on an H200).
AUTO_CHUNK_MIN_LENGTH = 1024
AUTO_CHUNK_MIN_LENGTH_CAUSAL = 512


class KernelUnavailable(RuntimeError):
    """The kernel the plan chose cannot compute the call after all, found
    only when it traces the call (PyTorch's FlexAttention tracing a user's
    `mask_mod` with Dynamo): `dot_product_attention` warns and takes a
    `keras.ops` path instead."""


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
    gpu_capability=None,
):
    """The computation that serves a call (one of `PATHS`).

    An explicit `chunk_size` takes the chunked path, `flash_attention=False`
    or `return_weights` the standard one. Otherwise a fused kernel serves
    wherever one computes the call, whatever `flash_attention` (None or
    True):

    - PyTorch on a CUDA device: SDPA for what it takes as its own
      arguments (the causal mask from offset 0 alone, as `is_causal`; a
      padding or other dense mask and a dense bias, without the causal
      mask, as its `attn_mask`); FlexAttention (`"torch_flex"`) for every
      other call: windows, documents, ALiBi, the soft cap, a custom
      `mask_mod` or `score_mod`, the causal mask at an offset or beside a
      dense mask, and every call that asks for the log-sum-exp; but not a
      `score_mod` with `score_mod_inputs` (T5's table), which goes where it
      goes off CUDA.
    - PyTorch elsewhere (PyTorch's FlexAttention on a CPU is uncompiled or
      inference-only): SDPA for every call without a custom score function,
      soft cap or log-sum-exp asked for; its other parts (windows,
      documents, a `mask_mod`, ALiBi, a dense bias) become a dense mask and
      bias, which costs what the standard path costs, so with
      `flash_attention=True` (memory asked to stay O(T)) only calls with at
      most a padding mask and the causal mask take it.
    - JAX on a GPU: cuDNN for calls it takes whole (half precision, heads up
      to 128, 256 on Hopper, no dense mask but padding over the keys, no
      bias or score part, the causal mask and a window from position 0);
      with the `tokamax` extra on Hopper and Blackwell, tokamax's Mosaic
      GPU kernel for the other half-precision calls it takes whole (the
      soft cap, documents, any window, padding over the keys, heads up to
      256, from position 0, no dropout and no log-sum-exp asked for);
      the Pallas kernel for the other calls it computes without a gather
      (`PALLAS_MASKS`, `PALLAS_SCORES`, a padding mask over keys, float32,
      heads up to 256, any offset, the log-sum-exp).
    - Otherwise a `keras.ops` path (`keras_ops_path`): a dense `(T, S)`
      mask or bias, T5's table or a custom score or mask function on a GPU
      (Triton has no gather), and every call on a CPU, a TPU and
      TensorFlow. The chunked path with `flash_attention=True` or from
      `AUTO_CHUNK_MIN_LENGTH` squared scores (`AUTO_CHUNK_MIN_LENGTH_CAUSAL`
      where a causal mask or a window skips tiles), else the standard one.

    Args:
        spec: the call's `AttentionSpec`.
        query: `(B, T, N, H)` (dtype and head size decide cuDNN, its
            length the chunked path).
        value: `(B, S, N_kv, H_v)`.
        flash_attention: as for `dot_product_attention`.
        chunk_size: as for `dot_product_attention`.
        return_weights: as for `dot_product_attention`.
        return_lse: as for `dot_product_attention`; also asked for
            `sinks`, which are applied from it (cuDNN, tokamax and SDPA,
            which do not return it, then leave the call to the others).
        backend_name: the Keras backend (default: the current one).
        platform: `"cpu"`, `"gpu"` or `"tpu"` (default: the backend's
            device, `"gpu"` for CUDA on PyTorch; a test fakes it).
        gpu_capability: the GPU's compute capability `(major, minor)`
            (default: the first device's; a test fakes it).

    Returns:
        One of `PATHS`.
    """
    if chunk_size is not None:
        return "chunked"
    if flash_attention is False or return_weights:
        return "standard"
    memory_efficient = bool(flash_attention)
    backend_name = backend_name or backend.backend()
    if backend_name == "torch" and (platform or _torch_platform()) == "gpu":
        # A score_mod's inputs (T5's table) are read with Keras' gathers,
        # whose gradient FlexAttention's backward does not trace.
        # FlexAttention has no dropout: SDPA takes it as `dropout_p`.
        flex = not spec.score_mod_inputs and not spec.dropout_rate
        if flex and (return_lse or not _sdpa_takes_natively(spec)):
            return "torch_flex"
    if backend_name == "torch" and not return_lse:
        if _sdpa_takes(spec, memory_efficient):
            return "torch_sdpa"
    if backend_name == "jax" and (platform or _jax_platform()) == "gpu":
        capability = gpu_capability or _gpu_capability()
        if is_factorable(spec.mask):
            # A dense mask that may be padding (rows and columns): the kernel
            # that takes the call with padding over the keys serves when the
            # graph finds it is (fused.py), the standard path when not.
            spec = spec._replace(mask=_KEY_PADDING_SHAPE)
        if not return_lse and _cudnn_takes(spec, query, value, capability):
            return "jax_cudnn"
        if not return_lse and _tokamax_takes(spec, query, value, capability):
            return "jax_tokamax"
        # Lowered for CUDA in CI (tests/ops/test_lowering.py) and checked in
        # Pallas' interpreter against the standard path: the default for
        # what cuDNN does not take.
        if _pallas_takes(spec, query):
            return "jax_pallas"
    return keras_ops_path(spec, query, value, flash_attention)


def keras_ops_path(spec, query, value, flash_attention=None):
    """`"chunked"` or `"standard"`, where no kernel serves the call.

    `flash_attention=True` takes the chunked path. With None, so do calls of
    at least `AUTO_CHUNK_MIN_LENGTH` squared queries x keys
    (`AUTO_CHUNK_MIN_LENGTH_CAUSAL` squared where a causal mask or a window
    lets it skip tiles), both lengths known when tracing, without a dense
    bias (whose `(T, S)` scores the chunked path never builds). Keys of a
    length known only when the graph runs keep the standard path; queries
    of one leave the keys' length alone to decide.
    """
    if flash_attention:
        return "chunked"
    query_length, key_length = query.shape[1], value.shape[1]
    if flash_attention is False or spec.bias is not None:
        return "standard"
    if not isinstance(key_length, int):
        return "standard"
    skips_tiles = spec.is_causal or spec.window is not None
    threshold = AUTO_CHUNK_MIN_LENGTH_CAUSAL if skips_tiles else AUTO_CHUNK_MIN_LENGTH
    if isinstance(query_length, int):
        long_enough = query_length * key_length >= threshold * threshold
    else:  # the queries' length unknown: the keys' alone
        long_enough = key_length >= threshold
    return "chunked" if long_enough else "standard"


def _sdpa_takes(spec, memory_efficient):
    if any(kind not in BIAS_SCORES for kind in spec.score_kinds()):
        return False
    if not memory_efficient:
        return True
    plain_masks = all(kind == "causal" for kind in spec.mask_kinds())
    return plain_masks and spec.bias is None and not spec.score_parts


def _sdpa_takes_natively(spec):
    """Whether SDPA takes the call as its own arguments, no part evaluated
    into a dense mask or bias: the causal mask (`is_causal`, from offset 0)
    alone, or a dense mask and bias (`attn_mask`) alone."""
    kinds = spec.mask_kinds()
    if spec.score_parts or any(kind != "causal" for kind in kinds):
        return False
    if kinds:
        dense = spec.mask is not None or spec.bias is not None
        return is_zero_offset(spec.query_offset) and not dense
    return True


def _pallas_takes(spec, query):
    head_dim = query.shape[-1]
    return (
        head_dim is not None
        and head_dim <= PALLAS_MAX_HEAD_DIM
        and spec.bias is None
        and (spec.mask is None or is_key_padding(spec.mask))
        and all(kind in PALLAS_MASKS for kind in spec.mask_kinds())
        and all(kind in PALLAS_SCORES for kind in spec.score_kinds())
    )


def _tokamax_takes(spec, query, value, capability):
    """tokamax's Mosaic GPU kernel takes the call whole (its `Mask` of key
    ranges per query row, `keras_attention.ops.tokamax_attention`). Its
    documents out of order and padding that is not right padding go to the
    Pallas kernel in the graph, so that kernel must take the call too."""
    low, high = TOKAMAX_GPUS
    kinds = spec.mask_kinds()
    head_dim, value_dim = query.shape[-1], value.shape[-1]
    return (
        capability is not None
        and low <= tuple(capability) < high
        and _tokamax_available()
        and backend.standardize_dtype(query.dtype) in CUDNN_DTYPES
        and spec.bias is None
        and not spec.dropout_rate
        and (spec.mask is None or is_key_padding(spec.mask))
        and all(kind in TOKAMAX_MASKS for kind in kinds)
        and all(kind in TOKAMAX_SCORES for kind in spec.score_kinds())
        and (not kinds or is_zero_offset(spec.query_offset))
        and head_dim is not None
        and value_dim is not None
        and max(head_dim, value_dim) <= TOKAMAX_MAX_HEAD_DIM
        and _pallas_takes(spec, query)
    )


@functools.cache
def _tokamax_available():
    """Whether tokamax is installed and traces with this JAX (checked once,
    on a GPU that it serves: importing it costs seconds)."""
    if importlib.util.find_spec("tokamax") is None:
        return False
    from keras_attention.ops.tokamax_attention import tokamax_traces

    return tokamax_traces()


# A stand-in of a mask's shape over keys alone, `(1, 1, 1, 1)`: the plan
# reads masks by their shape only.
_KEY_PADDING_SHAPE = np.ones((1, 1, 1, 1), bool)


def is_factorable(mask):
    """Whether a dense mask `(B or 1, 1, T, S)` (or `(B, T, S)`-like, one
    mask for every head) may be padding, a mask over queries and one over
    keys (the `(B, T, S)` a padded batch builds): `fused.py` checks in the
    graph whether it is."""
    if mask is None or is_key_padding(mask):
        return False
    shape = tuple(mask.shape)
    return len(shape) == 4 and shape[1] == 1


def is_key_padding(mask):
    """Whether a dense mask is one row of keys per batch row, `(B or 1, 1,
    1, S)` (or of lower rank, `(S,)`), which kernels read as a key mask."""
    shape = tuple(mask.shape)
    return len(shape) == 1 or all(size == 1 for size in shape[-3:-1])


def _cudnn_takes(spec, query, value, capability):
    """cuDNN through `jax.nn` takes the call whole: padding over the keys
    goes as sequence lengths where it is right padding, which
    `fused.fused_attention` checks in the graph (the Pallas kernel serves
    left padding), so the Pallas kernel must take the call too."""
    kinds = spec.mask_kinds()
    head_dim = query.shape[-1]
    max_head_dim = CUDNN_MAX_HEAD_DIM
    if capability is not None and tuple(capability) >= HOPPER:
        max_head_dim = CUDNN_MAX_HEAD_DIM_HOPPER
    padding_only = spec.mask is None or (
        is_key_padding(spec.mask) and _pallas_takes(spec, query)
    )
    return (
        padding_only
        and spec.bias is None
        and not spec.score_parts
        and not spec.dropout_rate  # jax.nn's cuDNN call has no dropout
        and all(kind in STRUCTURAL_MASKS for kind in kinds)
        and (not kinds or is_zero_offset(spec.query_offset))
        # jax.nn's cuDNN takes a window only with the causal mask ("cuDNN
        # doesn't support right window ... when causal mask is not used").
        and (spec.window is None or spec.is_causal)
        and backend.standardize_dtype(query.dtype) in CUDNN_DTYPES
        and head_dim is not None
        and head_dim <= max_head_dim
        and head_dim % 8 == 0
        and head_dim == value.shape[-1]
    )


def is_zero_offset(offset):
    """Whether `query_offset` is known to be 0 (a Python int): kernels that
    align the causal mask to the upper left take only that."""
    return isinstance(offset, int) and offset == 0


def _jax_platform():
    import jax

    return jax.default_backend()


def _gpu_capability():
    """The first device's compute capability `(major, minor)`, or None
    where it has none (not an NVIDIA GPU)."""
    import jax

    capability = getattr(jax.devices()[0], "compute_capability", None)
    if not capability:
        return None
    return tuple(int(part) for part in str(capability).split("."))


def _torch_platform():
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"
