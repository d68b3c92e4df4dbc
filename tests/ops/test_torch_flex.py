"""The `"torch_flex"` kernel (PyTorch's FlexAttention) against the standard
path, on tiny calls: every mask and score kind alone and together, grouped
heads, T != S, an offset, padding with a row that sees nothing, the
log-sum-exp, gradients; and which calls the plan sends to it on a CUDA
device (faked). On a CPU the plan never chooses it (module docstring of
keras_attention.ops.torch_flex), so these tests call it by name; it runs
uncompiled there, as PyTorch's compiled CPU kernel has no backward and no
log-sum-exp (the compiled test, slow, checks the forward)."""

import shutil
import warnings

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import (
    alibi_slopes,
    attention_path,
    dot_product_attention,
    mods,
    plan,
)
from keras_attention.ops.fused import fused_attention
from keras_attention.ops.plan import KernelUnavailable
from keras_attention.ops.spec import build_spec
from tests.conftest import trainable_gradients
from tests.keras_versions import KERAS_VERSION

pytestmark = [
    pytest.mark.skipif(
        keras.backend.backend() != "torch", reason="PyTorch's FlexAttention"
    ),
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
]

rng = np.random.default_rng(0)
B, T, S, N, N_KV, H = 2, 7, 9, 4, 2, 8
Q = rng.normal(size=(B, T, N, H)).astype("float32")
K = rng.normal(size=(B, S, N_KV, H)).astype("float32")
V = rng.normal(size=(B, S, N_KV, 5)).astype("float32")
PADDING = np.ones((B, 1, 1, S), bool)
PADDING[0, ..., 6:] = False
PADDING[1, ..., :] = False  # the second row attends to nothing: zeros
DENSE_MASK = rng.random((B, N, T, S)) > 0.3
BIAS = rng.normal(size=(1, N, T, S)).astype("float32")
SEGMENTS = (np.array([[0] * 4 + [1] * 3] * B), np.array([[0] * 5 + [1] * 4] * B))
# Functions of the user's, written with keras.ops (the spec's own kinds are
# torch operations in the kernel).
KERAS_ALIBI = mods.alibi_score_mod(alibi_slopes(N) / 2)
KERAS_WINDOW = mods.sliding_window_mask_mod(4, causal=False)

CALLS = {
    "plain": {},
    "causal": {"is_causal": True},
    "causal_at_offset": {"is_causal": True, "query_offset": S - T},
    "window": {"sliding_window": 3},
    "causal_window_at_offset": {
        "is_causal": True,
        "sliding_window": 3,
        "query_offset": S - T,
    },
    "documents": {"segment_ids": SEGMENTS},
    "padding": {"mask": PADDING},
    "dense_mask": {"mask": DENSE_MASK},
    "bias": {"bias": BIAS},
    "alibi": {"alibi_slopes": alibi_slopes(N), "query_offset": 1},
    "soft_cap": {"attn_logits_soft_cap": 2.0},
    "mask_mod": {"mask_mod": mods.prefix_lm_mask_mod([2, 5]), "query_offset": 2},
    "score_mod": {"score_mod": KERAS_ALIBI, "query_offset": 2},
    "everything": {
        "mask": PADDING,
        "bias": BIAS,
        "is_causal": True,
        "sliding_window": 5,
        "segment_ids": SEGMENTS,
        "mask_mod": mods.and_masks(mods.prefix_lm_mask_mod([3, 1]), KERAS_WINDOW),
        "alibi_slopes": alibi_slopes(N),
        "score_mod": KERAS_ALIBI,
        "attn_logits_soft_cap": 3.0,
        "query_offset": S - T,
    },
}


def spec_of(scale=0.3, **call):
    call = dict(call)
    if "attn_logits_soft_cap" in call:
        call["soft_cap"] = call.pop("attn_logits_soft_cap")
    return build_spec(scale=scale, **call)


def flex(query, key, value, spec, return_lse=False):
    """The kernel called by name, on tensors as the dispatch hands them.
    Before Keras 3.12 a mod written with keras.ops does not trace under
    FlexAttention's Dynamo (the op then takes a keras.ops path, tested
    below): those cases skip there, naming the error."""
    tensors = (ops.convert_to_tensor(x) for x in (query, key, value))
    try:
        return fused_attention("torch_flex", *tensors, spec, return_lse)
    except KernelUnavailable as error:
        if KERAS_VERSION >= (3, 12):
            raise
        pytest.skip(f"Keras {keras.__version__}'s torch ops: {error}")


def test_a_mod_flex_cannot_trace_takes_the_keras_ops_path(monkeypatch):
    """Where FlexAttention cannot trace a user's mod even uncompiled (Keras
    3.11's torch ops; the failure faked here), `dot_product_attention` warns
    and computes the call on a keras.ops path."""
    import torch
    from torch.nn.attention import flex_attention as module

    from keras_attention.ops import torch_flex

    def fails(*args, **kwargs):
        raise torch._dynamo.exc.Unsupported("Unexpected type in sourceless builder")

    monkeypatch.setattr(torch_flex, "flex_attention", fails)
    monkeypatch.setattr(torch_flex, "create_block_mask", fails)
    monkeypatch.setattr(plan, "_torch_platform", lambda: "gpu")
    assert module.flex_attention is not fails
    call = CALLS["mask_mod"]
    assert attention_path(Q, V, **call) == "torch_flex"
    with pytest.warns(UserWarning, match="takes the `keras.ops` path") as record:
        got = dot_product_attention(Q, K, V, scale=0.3, **call)
    # The warning names the user's line, not the package's.
    assert [w.filename for w in record] == [__file__]
    np.testing.assert_allclose(numpy(got), numpy(standard(Q, K, V, **call)), atol=2e-6)


def standard(query, key, value, **call):
    return dot_product_attention(
        query, key, value, scale=0.3, flash_attention=False, **call
    )


def numpy(x):
    return ops.convert_to_numpy(x)


@pytest.mark.parametrize("name", list(CALLS))
def test_flex_equals_the_standard_path(name):
    call = CALLS[name]
    got, lse = flex(Q, K, V, spec_of(**call), True)
    want, want_lse = standard(Q, K, V, return_lse=True, **call)
    np.testing.assert_allclose(numpy(got), numpy(want), atol=2e-6)
    np.testing.assert_allclose(numpy(lse), numpy(want_lse), rtol=1e-6, atol=2e-6)
    assert keras.backend.standardize_dtype(lse.dtype) == "float32"
    if call.get("mask") is PADDING:
        # The row that sees no key: zeros and -inf, no NaN.
        assert not np.isnan(numpy(got)).any()
        np.testing.assert_array_equal(numpy(got)[1], 0.0)
        np.testing.assert_array_equal(numpy(lse)[1], -np.inf)


def test_flex_takes_as_many_key_heads_and_fewer_keys_than_queries():
    query = rng.normal(size=(B, S, N, H)).astype("float32")
    key, value = K[:, :T, :1].repeat(N, 2), V[:, :T, :1].repeat(N, 2)
    call = {"is_causal": True, "alibi_slopes": alibi_slopes(N)}
    got = flex(query, key, value, spec_of(**call))
    np.testing.assert_allclose(
        numpy(got), numpy(standard(query, key, value, **call)), atol=2e-6
    )


def test_flex_takes_the_offset_as_a_tensor():
    """A decoding step's position as a tensor: the same result as the int."""
    call = {"is_causal": True, "sliding_window": 4, "alibi_slopes": alibi_slopes(N)}
    got = flex(Q[:, :1], K, V, spec_of(query_offset=ops.array(5), **call))
    want = standard(Q[:, :1], K, V, query_offset=5, **call)
    np.testing.assert_allclose(numpy(got), numpy(want), atol=2e-6)


def test_flex_runs_in_bfloat16():
    half = [ops.cast(x, "bfloat16") for x in (Q, K, V)]
    call = {"is_causal": True, "attn_logits_soft_cap": 2.0}
    got = flex(*half, spec_of(**call))
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    np.testing.assert_allclose(
        numpy(ops.cast(got, "float32")), numpy(standard(Q, K, V, **call)), atol=3e-2
    )


@pytest.fixture
def cpu_backward(monkeypatch):
    """PyTorch refuses FlexAttention's backward on a CPU before it runs
    (`_validate_device`); its uncompiled backward, the math that the GPU's
    compiled kernel fuses, runs once the check is lifted, which tests the
    gradients of what this package hands it (a dense bias among them, a
    tensor its `score_mod` reads)."""
    import torch.nn.attention.flex_attention as flex

    monkeypatch.setattr(flex, "_validate_device", lambda *tensors: None)


@pytest.mark.parametrize("name", ["causal_window_at_offset", "everything"])
def test_flex_gradients_equal_the_standard_paths(cpu_backward, name):
    call = dict(CALLS[name])
    variables = [keras.Variable(x) for x in (Q, K, V)]
    if "bias" in call:
        variables.append(keras.Variable(BIAS))
        call["bias"] = variables[-1]

    def loss(kernel):
        def fn():
            query, key, value = variables[:3]
            if kernel == "standard":
                out = standard(query, key, value, **call)
            else:
                out = flex(query, key, value, spec_of(**call))
            return ops.sum(ops.square(out))

        return fn

    got = trainable_gradients(variables, loss("torch_flex"))
    want = trainable_gradients(variables, loss("standard"))
    for g, w in zip(got, want, strict=True):
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, atol=2e-5)


def test_dot_product_attention_takes_flex_on_a_cuda_device(monkeypatch):
    """The plan, the device faked: the call goes through the dispatch to
    FlexAttention (uncompiled on this CPU)."""
    from keras_attention.ops import plan

    monkeypatch.setattr(plan, "_torch_platform", lambda: "gpu")
    call = {"mask": PADDING, "is_causal": True, "attn_logits_soft_cap": 2.0}
    assert attention_path(Q, V, **call) == "torch_flex"
    got = dot_product_attention(Q, K, V, scale=0.3, **call)
    np.testing.assert_allclose(numpy(got), numpy(standard(Q, K, V, **call)), atol=2e-6)


@pytest.fixture
def compiling(monkeypatch):
    """The kernel compiled on this CPU, as on a GPU, with a fresh record of
    the functions that did not compile."""
    from keras_attention.ops import torch_flex

    monkeypatch.setattr(torch_flex, "_compiles", lambda device: True)
    monkeypatch.setattr(torch_flex, "_UNCOMPILED", type(torch_flex._UNCOMPILED)())
    return torch_flex


@pytest.mark.slow
@pytest.mark.skipif(
    not any(map(shutil.which, ("g++", "clang++", "c++"))),
    reason="Inductor compiles the CPU kernel with a C++ compiler",
)
def test_compiled_flex_equals_the_standard_path(compiling):
    """Forward only: PyTorch's compiled CPU kernel has no backward and no
    log-sum-exp. Slow: 90 s of compilation with Inductor's cache empty on
    two cores (10-20 s with it warm)."""
    names = ["causal_window_at_offset", "alibi", "soft_cap", "mask_mod", "padding"]
    for name in names:
        got = flex(Q, K, V, spec_of(**CALLS[name]))
        want = standard(Q, K, V, **CALLS[name])
        np.testing.assert_allclose(numpy(got), numpy(want), atol=2e-6, err_msg=name)


def test_a_mod_that_does_not_compile_warns_and_runs_uncompiled(compiling, monkeypatch):
    """Where torch.compile fails on a user's function (as Inductor fails to
    lower T5's table written with keras.ops on PyTorch 2.13's CPU kernel;
    the failure faked here), the call warns and runs uncompiled, and later
    calls with that function run uncompiled without another try; a failure
    without a user's function is raised."""
    import torch

    def fails(*args, **kwargs):
        calls.append(kwargs)
        raise torch._dynamo.exc.TorchDynamoException("cannot lower")

    calls = []
    monkeypatch.setattr(compiling, "_compiled_flex_attention", lambda: fails)
    call = CALLS["score_mod"]
    with pytest.warns(UserWarning, match="runs uncompiled"):
        got = flex(Q, K, V, spec_of(**call))
    np.testing.assert_allclose(numpy(got), numpy(standard(Q, K, V, **call)), atol=2e-6)
    assert KERAS_ALIBI in compiling._UNCOMPILED
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        flex(Q, K, V, spec_of(**call))
    assert len(calls) == 1
    with pytest.raises(torch._dynamo.exc.TorchDynamoException, match="lower"):
        flex(Q, K, V, spec_of(**CALLS["soft_cap"]))
