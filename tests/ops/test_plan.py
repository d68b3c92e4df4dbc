"""plan_kernel: which computation serves a call, as a table of cases (the
backend and the device faked, the tensors symbolic: nothing runs)."""

import keras
import numpy as np
import pytest

from keras_attention.ops import alibi_slopes, mods
from keras_attention.ops import plan as plan_module
from keras_attention.ops.plan import (
    CUDNN_MAX_HEAD_DIM,
    HOPPER,
    PALLAS_MAX_HEAD_DIM,
    PATHS,
    plan_kernel,
)
from keras_attention.ops.spec import build_spec

B, T, N = 2, 7, 4
PADDING = np.ones((B, 1, 1, T), bool)
SEGMENTS = (np.zeros((B, T), "int32"),) * 2


def plan(
    backend_name,
    platform="gpu",
    dtype="bfloat16",
    head_dim=64,
    capability=(8, 0),
    **call,
):
    query = keras.KerasTensor((B, T, N, head_dim), dtype)
    asked = {
        name: call.pop(name)
        for name in ("flash_attention", "chunk_size", "return_weights", "return_lse")
        if name in call
    }
    if call.pop("segments", False):
        call["segment_ids"] = SEGMENTS
    spec = build_spec(scale=0.125, **call)
    return plan_kernel(
        spec,
        query,
        query,
        backend_name=backend_name,
        platform=platform,
        gpu_capability=capability,
        **asked,
    )


ALIBI = {"alibi_slopes": alibi_slopes(N)}
CAP = {"soft_cap": 30.0}
CUSTOM_SCORE = {"score_mod": mods.soft_cap_score_mod(5.0)}
CUSTOM_MASK = {"mask_mod": mods.causal_mask_mod}
FLASH = {"flash_attention": True}
# tokamax installed (the `tokamax` extra), on Hopper and on a B200.
TOKAMAX = {"tokamax": True, "capability": HOPPER}
BLACKWELL = (10, 0)
T5 = {
    "score_mod": mods.relative_position_score_mod(),
    "score_mod_inputs": (np.zeros((32, N), "float32"),),
}

CASES = [
    # What the caller asks decides first, on every backend and device.
    ("torch", "gpu", {"chunk_size": 64}, "chunked"),
    ("jax", "gpu", {"flash_attention": False}, "standard"),
    ("torch", "cpu", {"return_weights": True}, "standard"),
    # PyTorch: SDPA for everything it can take as a mask and a bias, on every
    # device; the soft cap and a custom score function stay in keras.ops.
    ("torch", "cpu", {}, "torch_sdpa"),
    ("torch", "cpu", {"is_causal": True, "query_offset": 3}, "torch_sdpa"),
    ("torch", "cpu", {"mask": PADDING, "is_causal": True}, "torch_sdpa"),
    ("torch", "cpu", {"is_causal": True, "sliding_window": 4}, "torch_sdpa"),
    ("torch", "cpu", {"segments": True}, "torch_sdpa"),
    ("torch", "cpu", {**ALIBI, "is_causal": True}, "torch_sdpa"),
    ("torch", "cpu", {"bias": np.zeros((1, N, T, T), "float32")}, "torch_sdpa"),
    ("torch", "cpu", CUSTOM_MASK, "torch_sdpa"),
    ("torch", "cpu", CAP, "standard"),
    ("torch", "cpu", CUSTOM_SCORE, "standard"),
    ("torch", "cpu", {"return_lse": True}, "standard"),
    # Memory asked to stay O(T): SDPA only without dense parts.
    ("torch", "cpu", {**FLASH, "mask": PADDING, "is_causal": True}, "torch_sdpa"),
    ("torch", "cpu", {**FLASH, "is_causal": True, "sliding_window": 4}, "chunked"),
    ("torch", "cpu", {**FLASH, **ALIBI}, "chunked"),
    ("torch", "cpu", {**FLASH, "segments": True}, "chunked"),
    # PyTorch on a CUDA device: SDPA for what it takes as its own arguments,
    # FlexAttention for the rest and for the log-sum-exp.
    ("torch", "gpu", {}, "torch_sdpa"),
    ("torch", "gpu", {"is_causal": True}, "torch_sdpa"),
    ("torch", "gpu", {"mask": PADDING, "is_causal": True}, "torch_flex"),
    ("torch", "gpu", {**FLASH, "mask": PADDING}, "torch_sdpa"),
    ("torch", "gpu", {"mask": np.ones((B, N, T, T), bool)}, "torch_sdpa"),
    ("torch", "gpu", {"bias": np.zeros((1, N, T, T), "float32")}, "torch_sdpa"),
    ("torch", "gpu", {"is_causal": True, "query_offset": 3}, "torch_flex"),
    ("torch", "gpu", {"sliding_window": 4}, "torch_flex"),
    ("torch", "gpu", {**FLASH, "is_causal": True, "sliding_window": 4}, "torch_flex"),
    ("torch", "gpu", {"segments": True, "mask": PADDING}, "torch_flex"),
    ("torch", "gpu", {**FLASH, **ALIBI}, "torch_flex"),
    ("torch", "gpu", {**CAP, "dtype": "float32"}, "torch_flex"),
    ("torch", "gpu", CUSTOM_SCORE, "torch_flex"),
    ("torch", "gpu", {**FLASH, **CUSTOM_MASK}, "torch_flex"),
    ("torch", "gpu", {"return_lse": True}, "torch_flex"),
    ("torch", "gpu", {**CUSTOM_SCORE, "score_mod_inputs": (PADDING,)}, "standard"),
    ("torch", "gpu", {**FLASH, **T5, "is_causal": True}, "chunked"),
    ("torch", "gpu", {"return_lse": True, "mask": PADDING}, "torch_flex"),
    ("torch", "gpu", {**CAP, "flash_attention": False}, "standard"),
    ("torch", "gpu", {**CAP, "return_weights": True}, "standard"),
    ("torch", "gpu", {**CAP, "chunk_size": 64}, "chunked"),
    # JAX on a GPU: cuDNN for what it takes whole (padding over the keys as
    # lengths; fused.py sends left padding to the Pallas kernel) ...
    ("jax", "gpu", {}, "jax_cudnn"),
    ("jax", "gpu", {"is_causal": True}, "jax_cudnn"),
    ("jax", "gpu", {"is_causal": True, "sliding_window": 64}, "jax_cudnn"),
    ("jax", "gpu", {"dtype": "float16", **FLASH}, "jax_cudnn"),
    ("jax", "gpu", {"mask": PADDING}, "jax_cudnn"),
    ("jax", "gpu", {"mask": PADDING, "is_causal": True}, "jax_cudnn"),
    ("jax", "gpu", {"head_dim": 256, "capability": HOPPER}, "jax_cudnn"),
    # ... by default too, the Pallas kernel for the rest it computes without
    # a gather (which Triton does not lower) ...
    ("jax", "gpu", {"dtype": "float32"}, "jax_pallas"),
    ("jax", "gpu", {"sliding_window": 64}, "jax_pallas"),
    ("jax", "gpu", {"head_dim": CUDNN_MAX_HEAD_DIM + 64}, "jax_pallas"),
    ("jax", "gpu", {"head_dim": 256, "capability": (8, 9)}, "jax_pallas"),
    ("jax", "gpu", {"head_dim": 100}, "jax_pallas"),
    ("jax", "gpu", {"is_causal": True, "query_offset": 3}, "jax_pallas"),
    ("jax", "gpu", {"return_lse": True}, "jax_pallas"),
    ("jax", "gpu", {**CAP, "is_causal": True}, "jax_pallas"),
    ("jax", "gpu", {**CAP, "mask": PADDING}, "jax_pallas"),
    ("jax", "gpu", {**ALIBI, "is_causal": True}, "jax_pallas"),
    ("jax", "gpu", {"segments": True, "is_causal": True}, "jax_pallas"),
    ("jax", "gpu", {**FLASH, "dtype": "float32"}, "jax_pallas"),
    ("jax", "gpu", {**FLASH, "mask": PADDING}, "jax_cudnn"),
    ("jax", "gpu", {**FLASH, **CAP, "is_causal": True}, "jax_pallas"),
    ("jax", "gpu", {**FLASH, **ALIBI}, "jax_pallas"),
    ("jax", "gpu", {**FLASH, "segments": True}, "jax_pallas"),
    ("jax", "gpu", {**FLASH, "return_lse": True}, "jax_pallas"),
    ("jax", "gpu", {**FLASH, "is_causal": True, "query_offset": 3}, "jax_pallas"),
    # ... the rest on the keras.ops paths there: a custom function or T5's
    # table gathers, a dense mask or bias is (T, S), heads past 256 do not
    # fit the kernel's tiles.
    ("jax", "gpu", CUSTOM_SCORE, "standard"),
    ("jax", "gpu", {**FLASH, **CUSTOM_SCORE}, "chunked"),
    ("jax", "gpu", {**FLASH, **CUSTOM_MASK}, "chunked"),
    ("jax", "gpu", {"mask": np.ones((B, N, T, T), bool)}, "standard"),
    # A (B, 1, T, S) mask may be padding: the kernel serves where the graph
    # finds it is (rows times columns), the chunked path where not.
    ("jax", "gpu", {"mask": np.ones((B, 1, T, T), bool)}, "jax_cudnn"),
    ("jax", "gpu", {"mask": np.ones((B, 1, T, T), bool), **CAP}, "jax_pallas"),
    (
        "jax",
        "gpu",
        {"mask": np.ones((B, 1, T, T), bool), "dtype": "float32"},
        "jax_pallas",
    ),
    # Both branches of the graph's check give the log-sum-exp (sinks).
    (
        "jax",
        "gpu",
        {"mask": np.ones((B, 1, T, T), bool), "return_lse": True},
        "jax_pallas",
    ),
    ("jax", "gpu", {**FLASH, "mask": np.ones((B, N, T, T), bool)}, "chunked"),
    ("jax", "gpu", {"bias": np.zeros((1, N, T, T), "float32")}, "standard"),
    ("jax", "gpu", {"head_dim": PALLAS_MAX_HEAD_DIM + 64}, "standard"),
    # With tokamax, on Hopper and Blackwell: its Mosaic GPU kernel for the
    # half-precision calls cuDNN does not take and it computes whole ...
    ("jax", "gpu", {**TOKAMAX, **CAP, "is_causal": True}, "jax_tokamax"),
    ("jax", "gpu", {**TOKAMAX, **CAP, "capability": BLACKWELL}, "jax_tokamax"),
    ("jax", "gpu", {**TOKAMAX, **CAP, **FLASH, "mask": PADDING}, "jax_tokamax"),
    ("jax", "gpu", {**TOKAMAX, "segments": True, "is_causal": True}, "jax_tokamax"),
    ("jax", "gpu", {**TOKAMAX, "segments": True, "mask": PADDING}, "jax_tokamax"),
    ("jax", "gpu", {**TOKAMAX, "sliding_window": 64}, "jax_tokamax"),
    ("jax", "gpu", {**TOKAMAX, "head_dim": 100, "dtype": "float16"}, "jax_tokamax"),
    # ... cuDNN first where it takes the call ...
    ("jax", "gpu", {**TOKAMAX, "is_causal": True}, "jax_cudnn"),
    ("jax", "gpu", {**TOKAMAX, "head_dim": 256, "mask": PADDING}, "jax_cudnn"),
    # ... and ours for what tokamax does not compute, or not on that GPU.
    ("jax", "gpu", {**TOKAMAX, **CAP, "capability": (8, 9)}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, **CAP, "capability": (12, 0)}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, **CAP, "tokamax": False}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, **CAP, "dtype": "float32"}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, **CAP, "return_lse": True}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, **CAP, "dropout_rate": 0.1}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, **ALIBI, "is_causal": True}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, "is_causal": True, "query_offset": 3}, "jax_pallas"),
    ("jax", "gpu", {**TOKAMAX, **CAP, **CUSTOM_MASK, **FLASH}, "chunked"),
    ("jax", "gpu", {**TOKAMAX, **CAP, "head_dim": 320}, "standard"),
    # Off a GPU, and on TensorFlow: the keras.ops paths, which XLA compiles.
    ("jax", "cpu", {}, "standard"),
    ("jax", "cpu", FLASH, "chunked"),
    ("jax", "tpu", FLASH, "chunked"),
    ("tensorflow", "gpu", {}, "standard"),
    ("tensorflow", "cpu", {**FLASH, "is_causal": True}, "chunked"),
]


def case_id(case):
    backend_name, platform, call, expected = case
    return f"{backend_name}-{platform}-{'+'.join(sorted(call)) or 'plain'}"


@pytest.mark.parametrize(
    ("backend_name", "platform", "call", "expected"),
    CASES,
    ids=[case_id(case) for case in CASES],
)
def test_the_kernel_follows_the_call_the_backend_and_the_device(
    backend_name, platform, call, expected, monkeypatch
):
    call = dict(call)
    tokamax = call.pop("tokamax", False)
    monkeypatch.setattr(plan_module, "_tokamax_available", lambda: tokamax)
    assert expected in PATHS
    assert plan(backend_name, platform, **call) == expected


SHORT = 64
LONG = plan_module.AUTO_CHUNK_MIN_LENGTH
LONG_CAUSAL = plan_module.AUTO_CHUNK_MIN_LENGTH_CAUSAL

# Where no kernel serves: the `keras.ops` path by the number of scores.
LENGTH_CASES = {
    "short": (dict(queries=SHORT, keys=SHORT), "standard"),
    "long": (dict(queries=LONG, keys=LONG), "chunked"),
    "just below the crossover": (dict(queries=LONG, keys=LONG - 1), "standard"),
    "causal lowers the crossover": (
        dict(queries=LONG_CAUSAL, keys=LONG_CAUSAL, is_causal=True),
        "chunked",
    ),
    "a window lowers it too": (
        dict(queries=LONG_CAUSAL, keys=LONG_CAUSAL, sliding_window=16),
        "chunked",
    ),
    "not below the causal crossover without them": (
        dict(queries=LONG_CAUSAL, keys=LONG_CAUSAL),
        "standard",
    ),
    "keys of a length known only when running": (
        dict(queries=LONG, keys=None, is_causal=True),
        "standard",
    ),
    "queries of a length known only when running: the keys decide": (
        dict(queries=None, keys=LONG),
        "chunked",
    ),
    "flash_attention=True forces tiles": (
        dict(queries=SHORT, keys=SHORT, flash_attention=True),
        "chunked",
    ),
    "flash_attention=False forbids the switch": (
        dict(queries=LONG, keys=LONG, flash_attention=False),
        "standard",
    ),
    "weights returned": (
        dict(queries=LONG, keys=LONG, return_weights=True),
        "standard",
    ),
    "a dense bias keeps the standard path": (
        dict(queries=LONG, keys=LONG, bias=True),
        "standard",
    ),
    # One decoding step (or a few beams) over a long cache: its scores are
    # no bigger than the keys.
    "a few queries over a long cache": (
        dict(queries=4, keys=4 * LONG, is_causal=True),
        "standard",
    ),
    "a few queries over a longer cache": (
        dict(queries=4, keys=LONG * LONG // 4),
        "chunked",
    ),
}


@pytest.mark.parametrize("backend_name", ["tensorflow", "jax"])
@pytest.mark.parametrize("case", sorted(LENGTH_CASES))
def test_long_calls_take_the_chunked_path_where_no_kernel_serves(backend_name, case):
    call, expected = dict(LENGTH_CASES[case][0]), LENGTH_CASES[case][1]
    queries, keys = call.pop("queries"), call.pop("keys")
    asked = {
        name: call.pop(name)
        for name in ("flash_attention", "return_weights")
        if name in call
    }
    if call.pop("bias", False):
        call["bias"] = keras.KerasTensor((1, 1, queries or 1, keys or 1))
    spec = build_spec(scale=0.125, **call)
    query = keras.KerasTensor((B, queries, N, 16))
    value = keras.KerasTensor((B, keys, N, 16))
    path = plan_kernel(
        spec, query, value, backend_name=backend_name, platform="cpu", **asked
    )
    assert path == expected
