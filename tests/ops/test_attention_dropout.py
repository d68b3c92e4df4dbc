"""Attention dropout inside dot_product_attention: one mask, a hash of (seed,
b, h, q_idx, kv_idx), drawn on the whole grid by the standard path and tile
by tile by the chunked path and the Pallas kernel (JAX, Pallas' interpreter,
the device faked as a GPU), in the forward and the backward pass alike;
PyTorch's SDPA draws its own, checked by its statistics."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import attention_path, dot_product_attention
from keras_attention.ops.plan import plan_kernel
from keras_attention.ops.spec import build_spec
from keras_attention.utils.backend import compile_function, value_and_grad

BACKEND = keras.backend.backend()
rng = np.random.default_rng(3)
B, T, S, N, H = 2, 7, 10, 4, 8
Q = rng.normal(size=(B, T, N, H)).astype("float32")
K = rng.normal(size=(B, S, 2, H)).astype("float32")  # grouped: 2 key heads
V = rng.normal(size=(B, S, 2, 5)).astype("float32")
PADDING = np.ones((B, 1, 1, S), bool)
PADDING[1, ..., 7:] = False

CALLS = [
    {},
    {"is_causal": True, "query_offset": S - T},
    {"sliding_window": 3, "is_causal": True},
    {
        "segment_ids": (
            np.array([[0] * 3 + [1] * 4] * B),
            np.array([[0] * 5 + [1] * 5] * B),
        )
    },
    {"mask": PADDING, "attn_logits_soft_cap": 4.0},
]
PATHS = ["chunked", "pallas"]


def _path_arguments(path, monkeypatch):
    if path == "standard":
        return {"flash_attention": False}
    if path == "chunked":
        return {"chunk_size": 4}
    if BACKEND != "jax":
        pytest.skip("the Pallas kernel runs on JAX")
    from keras_attention.ops import fused, plan

    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    monkeypatch.setattr(fused, "PALLAS_BLOCK_SIZE", 4)  # several tiles
    return {"flash_attention": True}


def _numpy(x):
    return ops.convert_to_numpy(x)


def _ids(call):
    return "+".join(sorted(call)) or "plain"


@pytest.mark.parametrize("call", CALLS, ids=_ids)
@pytest.mark.parametrize("path", PATHS)
def test_every_path_draws_the_standard_paths_mask(path, call, monkeypatch):
    arguments = _path_arguments(path, monkeypatch)
    expected = {"chunked": "chunked", "pallas": "jax_pallas"}[path]
    assert attention_path(Q, V, dropout_rate=0.3, **call, **arguments) == expected
    dropout = {"dropout_rate": 0.3, "seed": 11}
    found = dot_product_attention(Q, K, V, **call, **dropout, **arguments)
    want = dot_product_attention(Q, K, V, flash_attention=False, **call, **dropout)
    plain = dot_product_attention(Q, K, V, flash_attention=False, **call)
    np.testing.assert_allclose(_numpy(found), _numpy(want), atol=2e-6)
    assert np.abs(_numpy(want) - _numpy(plain)).max() > 0.1  # dropout acted


def _gradients(arguments, weights):
    weights = ops.convert_to_tensor(weights)

    def loss(q, k, v):
        return ops.sum(dot_product_attention(q, k, v, **arguments) * weights)

    gradients = compile_function(
        lambda *x: value_and_grad(loss)(*x)[1], jit_compile=BACKEND == "jax"
    )
    return [
        _numpy(g) for g in gradients(*(ops.convert_to_tensor(x) for x in (Q, K, V)))
    ]


@pytest.mark.parametrize("call", CALLS[1:4], ids=_ids)
@pytest.mark.parametrize("path", PATHS)
def test_the_backward_pass_regenerates_the_forward_mask(path, call, monkeypatch):
    """The hand-written gradients equal autodiff of the standard path with the
    same seed: the backward pass drops what the forward pass dropped."""
    arguments = _path_arguments(path, monkeypatch)
    weights = rng.normal(size=(B, T, N, 5)).astype("float32")
    dropout = {"dropout_rate": 0.4, "seed": 2, **call}
    found = _gradients({**dropout, **arguments}, weights)
    want = _gradients({**dropout, "flash_attention": False}, weights)
    plain = _gradients({**call, "flash_attention": False}, weights)
    for name, got, expected, undropped in zip("qkv", found, want, plain, strict=True):
        np.testing.assert_allclose(got, expected, atol=2e-5, err_msg=f"d{name}")
        assert np.abs(expected - undropped).max() > 1e-3, name


def _kept_factors(rate, seed, **arguments):
    """One-hot values make each output feature one weight: the ratio of the
    dropped output to the weight without dropout, for every seen pair."""
    length, heads = 32, 2
    q = np.random.default_rng(0).normal(size=(2, length, heads, 4)).astype("float32")
    k = np.random.default_rng(1).normal(size=(2, length, heads, 4)).astype("float32")
    v = np.broadcast_to(
        np.eye(length, dtype="float32")[None, :, None], (2, length, heads, length)
    )
    out = dot_product_attention(q, k, v, dropout_rate=rate, seed=seed, **arguments)
    _, weights = dot_product_attention(
        q, k, v, flash_attention=False, return_weights=True
    )
    weights = np.transpose(_numpy(weights), (0, 2, 1, 3))  # (B, T, N, S)
    return _numpy(out) / weights


@pytest.mark.parametrize("path", ["standard", "chunked", "sdpa"])
def test_kept_fraction_and_scale(path):
    rate = 0.25
    arguments = {"standard": {"flash_attention": False}, "chunked": {"chunk_size": 8}}
    if path == "sdpa":
        if BACKEND != "torch":
            pytest.skip("PyTorch's kernel, on PyTorch")
        q = np.zeros((1, 4, 2, 4), "float32")
        assert attention_path(q, q, dropout_rate=rate) == "torch_sdpa"
    factors = _kept_factors(rate, 4, **arguments.get(path, {}))
    kept = factors > 0.5
    np.testing.assert_allclose(factors[kept], 1 / (1 - rate), rtol=1e-4)
    np.testing.assert_allclose(factors[~kept], 0.0, atol=1e-4)
    assert abs(kept.mean() - (1 - rate)) < 0.03, kept.mean()


def test_seeds():
    """The same int seed gives the same mask; another seed or the next draw of
    a SeedGenerator another; rate 0 is no dropout."""
    arguments = {"flash_attention": False}

    def masks(seed, rate=0.5):
        return _kept_factors(rate, seed, **arguments) > 0.5

    first, again, other = masks(1), masks(1), masks(2)
    np.testing.assert_array_equal(first, again)
    assert 0.3 < (first != other).mean() < 0.7
    generator = keras.random.SeedGenerator(5)
    assert 0.3 < (masks(generator) != masks(generator)).mean() < 0.7
    tensor_seed = ops.convert_to_tensor([3, 7], "int32")
    np.testing.assert_array_equal(masks(tensor_seed), masks(tensor_seed))
    plain = dot_product_attention(Q, K, V, flash_attention=False, is_causal=True)
    zero = dot_product_attention(
        Q, K, V, flash_attention=False, is_causal=True, dropout_rate=0.0, seed=3
    )
    np.testing.assert_array_equal(_numpy(zero), _numpy(plain))


@pytest.mark.parametrize("rate", [1.0, -0.1, float("nan"), "0.1", True, None])
def test_a_bad_rate_is_refused(rate):
    with pytest.raises(ValueError, match="dropout_rate"):
        dot_product_attention(Q, K, V, dropout_rate=rate, seed=1)
    with pytest.raises(ValueError, match="dropout_rate"):
        attention_path(Q, V, dropout_rate=rate)


def test_a_bad_seed_is_refused():
    with pytest.raises(ValueError, match="seed='one'"):
        dot_product_attention(Q, K, V, dropout_rate=0.1, seed="one")


def test_traced_code_needs_a_seed():
    message = "needs a `seed`.*received seed=None"
    if BACKEND == "jax":
        import jax

        def attend(q):
            return dot_product_attention(q, K, V, dropout_rate=0.1)

        with pytest.raises(ValueError, match=message):
            jax.jit(attend)(Q)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        @tf.function
        def attend(q):
            return dot_product_attention(q, K, V, dropout_rate=0.1)

        with pytest.raises(ValueError, match=message):
            attend(tf.constant(Q))
    else:
        pytest.skip("eager PyTorch draws from Keras' global seed generator")
    # Eager code draws from Keras' global generator.
    assert _numpy(dot_product_attention(Q, K, V, dropout_rate=0.1)).shape == (
        B,
        T,
        N,
        5,
    )


def test_cudnn_takes_no_dropout():
    half = ops.zeros((1, 8, 2, 64), "bfloat16")

    def plan(**arguments):
        spec = build_spec(scale=0.125, is_causal=True, **arguments)
        return plan_kernel(spec, half, half, backend_name="jax", platform="gpu")

    assert plan() == "jax_cudnn"
    # jax.nn's cuDNN has no dropout: the Pallas kernel drops out in its tiles.
    assert plan(dropout_rate=0.1) == "jax_pallas"
