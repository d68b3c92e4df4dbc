"""Keys and values that no query may attend to are never read, on every path:
NaN or inf put exactly there (found by NumPy from the call's arguments)
changes no output and no gradient, and their own gradient is 0.

Seeded random calls mix grouped heads, T != S, dense masks of every shape
(with empty rows), the causal mask at an offset, a sliding window, documents
(pairs too), mask functions (head-dependent ones too), ALiBi and a soft cap;
each runs on the standard path, the chunked path, the Pallas kernel (JAX,
Pallas' interpreter, the device faked as a GPU), PyTorch's SDPA and
FlexAttention (tests/ops/random_calls.py)."""

import numpy as np
import pytest

from keras_attention.ops import attention_path, dot_product_attention
from tests.ops.random_calls import (
    BACKEND,
    EXPECTED_PATH,
    outputs_and_gradients,
    path_call,
    random_case,
)

NUM_CASES = 12


def _inputs(seed, sizes, unseen):
    """Clean `q, k, v`, the same with NaN or inf at the unseen keys and values,
    and the weights of the loss."""
    rng = np.random.default_rng(seed)
    batch, q_len, k_len, heads, kv_heads = sizes
    q = rng.normal(size=(batch, q_len, heads, 4)).astype("float32")
    k = rng.normal(size=(batch, k_len, kv_heads, 4)).astype("float32")
    v = rng.normal(size=(batch, k_len, kv_heads, 3)).astype("float32")
    poison = rng.choice(np.array([np.nan, np.inf, -np.inf], "float32"), k.shape)
    bad_k = np.where(unseen[..., None], poison, k)
    bad_v = np.where(unseen[..., None], poison[..., :3][..., ::-1], v)
    weights = rng.normal(size=(batch, q_len, heads, 3)).astype("float32")
    return (q, k, v), (q, bad_k, bad_v), weights


@pytest.mark.parametrize("path", ["standard", "chunked", "pallas", "sdpa", "flex"])
@pytest.mark.parametrize("case", range(NUM_CASES))
def test_unseen_keys_reach_no_output_and_no_gradient(case, path, monkeypatch):
    extra = path_call(path, monkeypatch)
    if extra is None:
        pytest.skip(f"no {path} path on {BACKEND}")
    call, sizes, unseen = random_case(np.random.default_rng([7, case]))
    clean, poisoned, weights = _inputs(case, sizes, unseen)
    chosen = attention_path(clean[0], clean[2], **{**call, **extra})
    if path == "sdpa" and chosen != "torch_sdpa":
        pytest.skip("SDPA takes no soft cap")
    if path == "flex" and chosen != "torch_flex":
        pytest.skip(f"SDPA takes this call as its own arguments ({chosen})")
    assert chosen == EXPECTED_PATH[path]

    def attend(q, k, v):
        return dot_product_attention(q, k, v, **call, **extra)

    run = outputs_and_gradients(attend)
    want, want_grads = run(clean, weights)
    found, found_grads = run(poisoned, weights)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(found, want, rtol=1e-5, atol=1e-6)
    for name, grad, clean_grad in zip("qkv", found_grads, want_grads, strict=True):
        assert np.isfinite(grad).all(), f"d{name} is not finite"
        np.testing.assert_allclose(grad, clean_grad, rtol=1e-5, atol=1e-5)
        if name != "q":
            np.testing.assert_array_equal(
                grad[np.broadcast_to(unseen[..., None], grad.shape)], 0.0
            )


def test_the_random_calls_cover_every_argument():
    """The draw above is seeded: check that it exercises what it should."""
    calls = [random_case(np.random.default_rng([7, c]))[0] for c in range(NUM_CASES)]
    masks = {call["mask"].shape[1:3] != (1, 1) for call in calls if "mask" in call}
    shapes = {
        (call["mask"].shape[1] > 1, call["mask"].shape[2] > 1)
        for call in calls
        if "mask" in call
    }
    assert masks == {True, False} and len(shapes) == 3
    for argument in (
        "is_causal",
        "sliding_window",
        "query_offset",
        "mask_mod",
        "alibi_slopes",
        "attn_logits_soft_cap",
    ):
        assert any(argument in call for call in calls), argument
    ids = [call["segment_ids"] for call in calls if "segment_ids" in call]
    assert {isinstance(x, tuple) for x in ids} == {True, False}
    sizes = [random_case(np.random.default_rng([7, c]))[1] for c in range(NUM_CASES)]
    assert any(s[3] > s[4] for s in sizes) and any(s[1] != s[2] for s in sizes)
