"""Attention sinks, `dot_product_attention(sinks=)`, on every path.

The reference is a softmax over each query's scores and the sink's logit in
float64 NumPy, the scores read back from the standard path's weights and
log-sum-exp without sinks. Seeded random calls (tests/ops/random_calls.py)
run on the standard and chunked paths, the Pallas kernel (JAX, Pallas'
interpreter), FlexAttention (PyTorch, a CUDA device faked) and the default;
their outputs and gradients (queries, keys, values, sinks) are compared.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import attention_path, dot_product_attention
from keras_attention.utils.backend import compile_function, value_and_grad
from tests.ops.random_calls import BACKEND, EXPECTED_PATH, path_call, random_case

NUM_CASES = 8


def _inputs(seed, sizes):
    rng = np.random.default_rng(seed)
    batch, q_len, k_len, heads, kv_heads = sizes
    q = rng.normal(size=(batch, q_len, heads, 4)).astype("float32")
    k = rng.normal(size=(batch, k_len, kv_heads, 4)).astype("float32")
    v = rng.normal(size=(batch, k_len, kv_heads, 3)).astype("float32")
    sinks = rng.normal(scale=2.0, size=(heads,)).astype("float32")
    weights = rng.normal(size=(batch, q_len, heads, 3)).astype("float32")
    return q, k, v, sinks, weights


def _reference(q, k, v, sinks, call):
    """float64: softmax over the scores and the sink, the sink's share
    dropped; `(output (B, T, N, H_v), weights (B, N, T, S))`."""
    _, weights, lse = dot_product_attention(
        q, k, v, **call, flash_attention=False, return_weights=True, return_lse=True
    )
    weights = ops.convert_to_numpy(weights).astype("float64")
    lse = ops.convert_to_numpy(lse).astype("float64")[..., None]
    with np.errstate(divide="ignore"):
        scores = np.where(weights > 0, np.log(weights) + lse, -np.inf)
    sink = np.broadcast_to(sinks.astype("float64")[None, :, None, None], lse.shape)
    logits = np.concatenate([scores, sink], axis=-1)
    probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    kept = probabilities[..., :-1]
    values = np.repeat(v.astype("float64"), q.shape[2] // v.shape[2], axis=2)
    return np.einsum("bnts,bsnh->btnh", kept, values), kept


def _outputs_and_gradients(attend):
    """`f(q, k, v, sinks, w) -> (output, [dq, dk, dv, dsinks])` of
    `sum(output * w)`: the gradient of `w` is the output."""

    def loss(q, k, v, sinks, w):
        return ops.sum(attend(q, k, v, sinks) * w)

    gradients = compile_function(
        lambda *tensors: value_and_grad(loss)(*tensors)[1],
        jit_compile=BACKEND == "jax",
    )

    def run(*arrays):
        tensors = [ops.convert_to_tensor(x) for x in arrays]
        *grads, output = (ops.convert_to_numpy(g) for g in gradients(*tensors))
        return output, grads

    return run


@pytest.mark.parametrize("path", ["standard", "chunked", "pallas", "flex", "default"])
@pytest.mark.parametrize("case", range(NUM_CASES))
def test_sinks_equal_the_reference_on_every_path(case, path, monkeypatch):
    extra = {} if path == "default" else path_call(path, monkeypatch)
    if extra is None:
        pytest.skip(f"no {path} path on {BACKEND}")
    call, sizes, _ = random_case(np.random.default_rng([11, case]))
    q, k, v, sinks, w = _inputs(case, sizes)
    chosen = attention_path(q, v, **call, **extra, sinks=sinks)
    if path == "flex" and chosen != "torch_flex":
        pytest.skip(f"FlexAttention does not take this call ({chosen})")
    if path != "default":
        assert chosen == EXPECTED_PATH[path]
    assert chosen not in ("torch_sdpa", "jax_cudnn", "jax_tokamax")

    def attend(with_extra):
        def fn(q, k, v, sinks):
            return dot_product_attention(q, k, v, **call, **with_extra, sinks=sinks)

        return fn

    want_output, _ = _reference(q, k, v, sinks, call)
    output, grads = _outputs_and_gradients(attend(extra))(q, k, v, sinks, w)
    np.testing.assert_allclose(output, want_output, rtol=1e-5, atol=1e-5)
    standard = {"flash_attention": False}
    _, want_grads = _outputs_and_gradients(attend(standard))(q, k, v, sinks, w)
    for name, grad, want in zip(
        ("q", "k", "v", "sinks"), grads, want_grads, strict=True
    ):
        assert np.isfinite(grad).all(), f"d{name} is not finite"
        np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-5, err_msg=name)


def _concatenated_sink(q, k, v, sinks, mask):
    """keras-hub's GPT-OSS formulation in keras.ops: the sink as one more
    logit column, a softmax, its column dropped (heads not grouped)."""
    scores = ops.einsum("btnh,bsnh->bnts", q, k) / ops.sqrt(4.0)
    scores = ops.where(mask, scores, -1e30)
    shape = ops.shape(scores)
    sink = ops.broadcast_to(ops.reshape(sinks, (1, -1, 1, 1)), (*shape[:3], 1))
    probabilities = ops.softmax(ops.concatenate([scores, sink], axis=-1), axis=-1)
    return ops.einsum("bnts,bsnh->btnh", probabilities[..., :-1], v)


def test_gradients_equal_the_concatenated_logit_formulation():
    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(2, 6, 3, 4)).astype("float32") for _ in range(3))
    sinks = rng.normal(size=(3,)).astype("float32")
    mask = np.tril(np.ones((6, 6), bool))[None, None] & (rng.random((2, 1, 1, 6)) > 0.3)
    mask[..., 0] = True  # every query sees a key: -1e30 is then exact
    w = rng.normal(size=(2, 6, 3, 4)).astype("float32")

    def ours(q, k, v, sinks):
        return dot_product_attention(q, k, v, mask=mask, sinks=sinks)

    def theirs(q, k, v, sinks):
        return _concatenated_sink(q, k, v, sinks, mask)

    got_output, got = _outputs_and_gradients(ours)(q, k, v, sinks, w)
    want_output, want = _outputs_and_gradients(theirs)(q, k, v, sinks, w)
    np.testing.assert_allclose(got_output, want_output, rtol=1e-5, atol=1e-6)
    for name, g, x in zip(("q", "k", "v", "sinks"), got, want, strict=True):
        np.testing.assert_allclose(g, x, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("extra", [{"flash_attention": False}, {"chunk_size": 2}])
def test_a_query_that_sees_no_key_gives_zeros_and_finite_gradients(extra):
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(1, 4, 2, 4)).astype("float32") for _ in range(3))
    mask = np.ones((1, 1, 4, 4), bool)
    mask[0, 0, 2] = False
    sinks = np.array([0.5, -1.0], "float32")
    w = rng.normal(size=(1, 4, 2, 4)).astype("float32")

    def attend(q, k, v, sinks):
        return dot_product_attention(q, k, v, mask=mask, sinks=sinks, **extra)

    output, grads = _outputs_and_gradients(attend)(q, k, v, sinks, w)
    np.testing.assert_array_equal(output[0, 2], 0.0)
    assert all(np.isfinite(g).all() for g in grads)
    _, _, lse = dot_product_attention(
        q, k, v, mask=mask, sinks=sinks, return_weights=True, return_lse=True
    )
    # The row's whole mass is the sink's: its log-sum-exp is the sink.
    np.testing.assert_allclose(ops.convert_to_numpy(lse)[0, :, 2], sinks, rtol=1e-6)


def test_the_weights_and_the_log_sum_exp_include_the_sink():
    rng = np.random.default_rng(5)
    q, k, v = (rng.normal(size=(2, 5, 2, 4)).astype("float32") for _ in range(3))
    sinks = np.array([1.0, -2.0], "float32")
    _, plain_lse = dot_product_attention(q, k, v, is_causal=True, return_lse=True)
    _, weights, lse = dot_product_attention(
        q, k, v, is_causal=True, sinks=sinks, return_weights=True, return_lse=True
    )
    plain_lse = ops.convert_to_numpy(plain_lse).astype("float64")
    want_lse = np.logaddexp(plain_lse, sinks[None, :, None])
    np.testing.assert_allclose(ops.convert_to_numpy(lse), want_lse, rtol=1e-5)
    sink_share = np.exp(sinks[None, :, None] - want_lse)
    total = ops.convert_to_numpy(weights).sum(axis=-1)
    np.testing.assert_allclose(total, 1.0 - sink_share, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sinks_in_half_precision(dtype):
    rng = np.random.default_rng(6)
    q, k, v = (rng.normal(size=(1, 8, 2, 8)).astype("float32") for _ in range(3))
    sinks = np.array([0.3, -0.7], "float32")
    want = dot_product_attention(q, k, v, is_causal=True, sinks=sinks)
    got = dot_product_attention(
        *(ops.cast(x, dtype) for x in (q, k, v)), is_causal=True, sinks=sinks
    )
    assert keras.backend.standardize_dtype(got.dtype) == dtype
    # Scores, weights and sums are rounded to the dtype: a few units of its
    # roundoff (2**-8 for bfloat16, 2**-11 for float16). On a CPU without
    # AVX-512, bfloat16 was 0.020 off the float32 result (4.6 units).
    roundoff = {"bfloat16": 2.0**-8, "float16": 2.0**-11}[dtype]
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(got, "float32")),
        ops.convert_to_numpy(want),
        atol=8 * roundoff,
    )


def test_sinks_compile_with_xla():
    rng = np.random.default_rng(7)
    q, k, v = (rng.normal(size=(1, 6, 2, 4)).astype("float32") for _ in range(3))
    sinks = np.array([0.3, -0.7], "float32")

    def attend(q, k, v, sinks):
        return dot_product_attention(q, k, v, is_causal=True, sinks=sinks)

    compiled = compile_function(attend, jit_compile=BACKEND != "torch")
    np.testing.assert_allclose(
        ops.convert_to_numpy(compiled(q, k, v, sinks)),
        ops.convert_to_numpy(attend(q, k, v, sinks)),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize(
    ("sinks", "message"),
    [
        (np.zeros((3,), "float32"), r"shape \(2,\); received shape \(3,\)"),
        (np.zeros((2,), "int32"), "float tensor; received dtype int32"),
    ],
)
def test_sinks_of_the_wrong_shape_or_dtype_are_refused(sinks, message):
    q = np.zeros((1, 3, 2, 4), "float32")
    with pytest.raises(ValueError, match=message):
        dot_product_attention(q, q, q, sinks=sinks)


def test_the_plan_routes_sinks_to_paths_that_give_the_log_sum_exp(monkeypatch):
    from keras_attention.ops import plan

    q = keras.KerasTensor((2, 64, 4, 64), "bfloat16")
    sinks = np.zeros((4,), "float32")
    if BACKEND == "jax":
        # A GPU faked: cuDNN takes the plain causal call, but returns no lse.
        monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
        monkeypatch.setattr(plan, "_gpu_capability", lambda: (9, 0))
        assert attention_path(q, q, is_causal=True) == "jax_cudnn"
        assert attention_path(q, q, is_causal=True, sinks=sinks) == "jax_pallas"
    elif BACKEND == "torch":
        assert attention_path(q, q, is_causal=True) == "torch_sdpa"
        assert attention_path(q, q, is_causal=True, sinks=sinks) == "standard"
    else:
        assert attention_path(q, q, is_causal=True, sinks=sinks) == "standard"
