"""The backends' fused kernels behind dot_product_attention: which call takes
which kernel (a table, the backend and the device faked), and on PyTorch,
whose kernel every CPU runs, the same outputs and gradients as the standard
path."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import causal_mask, dot_product_attention
from keras_attention.ops.fused import CUDNN_MAX_HEAD_DIM, fused_kernel
from tests.conftest import trainable_gradients

rng = np.random.default_rng(0)
B, T, S, N, H = 2, 7, 9, 4, 8
Q = rng.normal(size=(B, T, N, H)).astype("float32")
K = rng.normal(size=(B, S, N, H)).astype("float32")
V = rng.normal(size=(B, S, N, 5)).astype("float32")
PADDING = np.ones((B, 1, 1, S), bool)
PADDING[0, ..., 6:] = False
PADDING[1] = False  # the second row attends to nothing: zeros


def kernel(backend_name, platform="cpu", dtype="bfloat16", head_dim=64, **call):
    query = keras.KerasTensor((B, T, N, head_dim), dtype)
    options = {"mask": None, "is_causal": False, "query_offset": 0, "plain": True}
    options.update(call)
    return fused_kernel(
        query, query, backend_name=backend_name, platform=platform, **options
    )


@pytest.mark.parametrize(
    ("backend_name", "platform", "call", "expected"),
    [
        # PyTorch's kernel serves every plain call, on every device.
        ("torch", "cpu", {}, "torch_sdpa"),
        ("torch", "gpu", {"mask": PADDING, "is_causal": True}, "torch_sdpa"),
        ("torch", "cpu", {"is_causal": True, "query_offset": 3}, "torch_sdpa"),
        # Anything beyond a mask and the causal mask: the keras.ops paths.
        ("torch", "gpu", {"plain": False}, None),
        ("jax", "gpu", {"plain": False}, None),
        # cuDNN: a GPU, half precision, head sizes up to 128, no dense mask,
        # the causal mask from position 0.
        ("jax", "gpu", {}, "jax_cudnn"),
        ("jax", "gpu", {"is_causal": True}, "jax_cudnn"),
        ("jax", "gpu", {"dtype": "float16"}, "jax_cudnn"),
        ("jax", "gpu", {"dtype": "float32"}, None),
        ("jax", "gpu", {"head_dim": CUDNN_MAX_HEAD_DIM + 64}, None),
        ("jax", "gpu", {"mask": PADDING}, None),
        ("jax", "gpu", {"is_causal": True, "query_offset": 3}, None),
        ("jax", "cpu", {}, None),
        ("jax", "tpu", {}, None),
        # TensorFlow's XLA compiles the keras.ops paths itself.
        ("tensorflow", "gpu", {}, None),
    ],
)
def test_the_kernel_follows_the_call_the_backend_and_the_device(
    backend_name, platform, call, expected
):
    call = dict(call)
    shape = {k: call.pop(k) for k in ("dtype", "head_dim") if k in call}
    assert kernel(backend_name, platform, **shape, **call) == expected


torch_only = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="PyTorch's kernel, on PyTorch"
)


def standard_and_fused(**call):
    fused = dot_product_attention(Q, K, V, **call)
    standard = dot_product_attention(Q, K, V, flash_attention=False, **call)
    return ops.convert_to_numpy(fused), ops.convert_to_numpy(standard)


@torch_only
@pytest.mark.parametrize(
    "call",
    [
        {},
        {"is_causal": True},
        {"mask": PADDING},
        {"mask": PADDING, "is_causal": True},
        {"is_causal": True, "query_offset": S - T},
        {"mask": rng.random((B, N, T, S)) > 0.4, "scale": 0.3},
    ],
)
def test_torch_kernel_equals_the_standard_path(call):
    fused, standard = standard_and_fused(**call)
    np.testing.assert_allclose(fused, standard, atol=2e-6)
    if "mask" in call and call["mask"] is PADDING:
        assert not np.isnan(fused).any()
        np.testing.assert_array_equal(fused[1], 0.0)


@torch_only
def test_torch_kernel_takes_grouped_heads():
    key, value = K[:, :, :2], V[:, :, :2]
    fused = dot_product_attention(Q, key, value, is_causal=True)
    standard = dot_product_attention(
        Q, key, value, is_causal=True, flash_attention=False
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(fused), ops.convert_to_numpy(standard), atol=2e-6
    )


@torch_only
def test_torch_kernel_gradients_equal_the_standard_paths_and_stop_at_empty_rows():
    variables = [keras.Variable(x) for x in (Q, K, V)]
    # NaN in keys no query sees reaches no gradient.
    values = V.copy()
    values[0, 6:] = np.nan
    variables[2].assign(values)

    def loss(flash_attention):
        def fn():
            out = dot_product_attention(
                *variables, mask=PADDING, flash_attention=flash_attention
            )
            return ops.sum(ops.square(out))

        return fn

    fused = trainable_gradients(variables, loss(None))
    standard = trainable_gradients(variables, loss(False))
    for got, want in zip(fused, standard, strict=True):
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want, atol=1e-5)


@torch_only
def test_torch_kernel_runs_in_half_precision():
    half = [ops.cast(x, "float16") for x in (Q, K, V)]
    fused = dot_product_attention(*half, is_causal=True)
    assert keras.backend.standardize_dtype(fused.dtype) == "float16"
    want = dot_product_attention(Q, K, V, mask=causal_mask(T, S))
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(fused, "float32")),
        ops.convert_to_numpy(want),
        atol=5e-3,
    )


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="jax.nn, on JAX")
@pytest.mark.parametrize("is_causal", [False, True])
def test_jax_kernel_is_called_with_the_layout_scale_and_mask(monkeypatch, is_causal):
    """cuDNN needs a GPU: here `jax.nn.dot_product_attention` runs with XLA
    in its place, to check what the dispatch hands it (grouped heads too)."""
    import jax

    from keras_attention.ops.fused import fused_attention

    calls = []
    original = jax.nn.dot_product_attention

    def on_cpu(*args, implementation=None, **kwargs):
        calls.append(implementation)
        return original(*args, implementation="xla", **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", on_cpu)
    values = K[:, :, :2]
    got = fused_attention("jax_cudnn", Q, K[:, :, :2], values, None, 0.3, is_causal, 0)
    want = dot_product_attention(
        Q, K[:, :, :2], values, scale=0.3, is_causal=is_causal, flash_attention=False
    )
    assert calls == ["cudnn"]
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=2e-6
    )
