"""Test support (never imported by the library): lower JAX functions for CUDA
on a machine without a GPU, and name the kernels they call.

`jax.export` traces and lowers a function for any platform, GPU-less: a
Pallas kernel run with `interpret=False` lowers to Triton (its Triton IR is
built then, inside the custom call), and cuDNN's attention to its `__cudnn$`
custom calls, once cuDNN is faked. Nothing is compiled and nothing runs, so
what this proves is that the kernels lower (Pallas' Triton lowering rules
accept every operation of the kernels), not that Triton or cuDNN compile or
compute them.

- `fake_hopper_gpu(monkeypatch, tokamax=False)`: the plan sees a GPU,
  Pallas does not interpret, and JAX's cuDNN attention sees cuDNN 9.10 on
  compute capability 9.0 (an H100), undone with `monkeypatch`; the plan
  sees tokamax installed only with `tokamax=True`, and tokamax then sees
  the H100 too (its Mosaic GPU kernels lower for CUDA from a CPU inside
  `tokamax.config.cross_compile(True)`, which the caller enters).
- `lowered_custom_calls(fn, *structs, grad=False)`: the custom calls of
  `fn`'s module exported for CUDA, forward or forward and backward.
- `TRITON`, `CUDNN`, `MOSAIC_GPU`: the kernels' custom call targets.
"""

import collections
import re

# Pallas' Triton call: `__gpu$xla.gpu.triton`, `triton_kernel_call_ffi` in
# newer jaxlibs.
TRITON = frozenset({"__gpu$xla.gpu.triton", "triton_kernel_call_ffi"})
# JAX's cuDNN fused attention (jax._src.cudnn.fused_attention_stablehlo's
# `_custom_name_maps`), forward and backward, with and without a bias and
# dropout.
CUDNN = frozenset(
    {
        f"__cudnn$fmha{kind}{direction}"
        for kind in (
            "Softmax",
            "ScaleBiasSoftmax",
            "SoftmaxDropout",
            "ScaleBiasSoftmaxDropout",
        )
        for direction in ("", "Backward")
    }
)
# Mosaic GPU's call (Pallas' Mosaic GPU lowering: tokamax's kernels).
MOSAIC_GPU = frozenset({"mosaic_gpu_v2"})
CUDNN_FORWARD = frozenset(name for name in CUDNN if not name.endswith("Backward"))
CUDNN_BACKWARD = CUDNN - CUDNN_FORWARD
# The compute capability and the cuDNN version faked: an H100 with cuDNN 9.10
# (`cudnn_get_version()`'s encoding, major * 10000 + minor * 100 + patch).
COMPUTE_CAPABILITY = (9, 0)
CUDNN_VERSION = 91000

_CALL = re.compile(r"stablehlo\.custom_call\s+@([\w$.\-]+)")
_CALL_GENERIC = re.compile(r'call_target_name\s*=\s*"([^"]+)"')


def fake_hopper_gpu(monkeypatch, tokamax=False):
    """Make the plan see a GPU, Pallas lower for it (no interpreter) and
    JAX's cuDNN attention see cuDNN `CUDNN_VERSION` on a device of
    `COMPUTE_CAPABILITY`, until `monkeypatch` undoes it. The plan sees
    tokamax installed with `tokamax` only (so that the tables of our own
    kernels do not depend on what is installed), and tokamax then sees a
    device of `COMPUTE_CAPABILITY` too."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_attention

    from keras_attention.ops import fused, plan

    def at_least(capability):
        return COMPUTE_CAPABILITY >= _capability(capability)

    def equal(capability):
        return COMPUTE_CAPABILITY == _capability(capability)

    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    monkeypatch.setattr(plan, "_gpu_capability", lambda: plan.HOPPER)
    monkeypatch.setattr(fused, "_pallas_interprets", lambda: False)
    monkeypatch.setattr(cudnn_attention, "check_cudnn_version", lambda: CUDNN_VERSION)
    monkeypatch.setattr(cudnn_attention, "check_compute_capability", at_least)
    monkeypatch.setattr(cudnn_attention, "is_cuda_compute_capability_equal", equal)
    monkeypatch.setattr(plan, "_tokamax_available", lambda: tokamax)
    if tokamax:
        from tokamax._src import gpu_utils

        major, minor = COMPUTE_CAPABILITY
        capability = float(f"{major}.{minor}")
        monkeypatch.setattr(gpu_utils, "_compute_capability", lambda d=None: capability)


def _capability(text):
    return tuple(int(x) for x in text.split("."))


def exported_text(fn, *structs, grad=False):
    """The StableHLO text of `fn` (of JAX arrays, returning one array)
    exported for CUDA with `structs` (`jax.ShapeDtypeStruct`s) as its
    arguments; with `grad`, of the gradient of the sum of its output, as
    float32, with respect to every float argument."""
    import jax
    import jax.numpy as jnp
    from jax import export

    target = fn
    if grad:
        floats = tuple(
            i for i, s in enumerate(structs) if jnp.issubdtype(s.dtype, jnp.floating)
        )
        if not floats:
            raise ValueError("`grad=True` needs a float argument.")

        def loss(*args):
            return jnp.sum(jnp.asarray(fn(*args), jnp.float32))

        target = jax.grad(loss, argnums=floats)
    kernels = TRITON | CUDNN | MOSAIC_GPU
    checks = [export.DisabledSafetyCheck.custom_call(name) for name in kernels]
    exported = export.export(
        jax.jit(target), platforms=["cuda"], disabled_checks=checks
    )(*structs)
    return exported.mlir_module()


def custom_call_counts(text):
    """How many times each custom call target occurs in StableHLO text (the
    pretty form `stablehlo.custom_call @name` and the generic one)."""
    return collections.Counter(_CALL.findall(text) + _CALL_GENERIC.findall(text))


def lowered_custom_calls(fn, *structs, grad=False):
    """The set of custom call targets of `fn` exported for CUDA (see
    `exported_text`)."""
    return set(custom_call_counts(exported_text(fn, *structs, grad=grad)))


def require_calls(calls, kernel_calls, what):
    """Raise an AssertionError naming what was found unless `calls` holds
    one of `kernel_calls`."""
    if not set(calls) & set(kernel_calls):
        raise AssertionError(
            f"{what}: no custom call of {sorted(kernel_calls)} in the lowered "
            f"module; it calls {sorted(calls) or 'none'}."
        )
