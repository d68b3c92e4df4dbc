"""The backends' fused kernels behind dot_product_attention (which call takes
which is tests/ops/test_plan.py's table): on PyTorch, whose kernel every CPU
runs, the same outputs and gradients as the standard path; cuDNN's call
checked with XLA in its place."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import alibi_slopes, causal_mask, dot_product_attention, mods
from keras_attention.ops.spec import build_spec
from tests.conftest import trainable_gradients

rng = np.random.default_rng(0)
B, T, S, N, H = 2, 7, 9, 4, 8
Q = rng.normal(size=(B, T, N, H)).astype("float32")
K = rng.normal(size=(B, S, N, H)).astype("float32")
V = rng.normal(size=(B, S, N, 5)).astype("float32")
PADDING = np.ones((B, 1, 1, S), bool)
PADDING[0, ..., 6:] = False
PADDING[1] = False  # the second row attends to nothing: zeros
SEGMENT_KEYS = np.array([[0] * 5 + [1] * 4] * B)


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
        # Beyond a mask and the causal one: dense masks and biases for SDPA.
        {"is_causal": True, "sliding_window": 3, "query_offset": S - T},
        {"sliding_window": 4, "mask": PADDING},
        {"segment_ids": (np.array([[0] * 4 + [1] * 3] * B), SEGMENT_KEYS)},
        {"alibi_slopes": alibi_slopes(N), "is_causal": True, "mask": PADDING},
        {"bias": rng.normal(size=(1, N, T, S)).astype("float32")},
        {"mask_mod": mods.prefix_lm_mask_mod([2, 5]), "query_offset": 2},
    ],
    ids=lambda call: "+".join(sorted(call)) or "plain",
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
@pytest.mark.parametrize(
    ("is_causal", "window"), [(False, None), (True, None), (True, 3), (False, 4)]
)
def test_jax_kernel_is_called_with_the_layout_scale_and_mask(
    monkeypatch, is_causal, window
):
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
    spec = build_spec(scale=0.3, is_causal=is_causal, sliding_window=window)
    got = fused_attention("jax_cudnn", Q, K[:, :, :2], values, spec)
    want = dot_product_attention(
        Q,
        K[:, :, :2],
        values,
        scale=0.3,
        is_causal=is_causal,
        sliding_window=window,
        flash_attention=False,
    )
    assert calls == ["cudnn"]
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=2e-6
    )


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="jax.nn, on JAX")
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    "lengths", [(9, 5), (0, 9), "left"], ids=["right", "empty_row", "left"]
)
def test_jax_kernel_reads_right_padding_as_lengths_and_left_padding_by_pallas(
    monkeypatch, is_causal, lengths
):
    """Padding over the keys: right padding goes to cuDNN as sequence
    lengths (XLA in its place here), a row without keys gives zeros, and any
    other padding takes the Pallas kernel (its interpreter here), chosen in
    the compiled graph."""
    import jax

    from keras_attention.ops.fused import fused_attention

    if lengths == "left":
        padding = np.ones((B, S), bool)
        padding[1, :3] = False
    else:
        padding = np.arange(S)[None, :] < np.array(lengths)[:, None]
    calls = []
    original = jax.nn.dot_product_attention

    def on_cpu(*args, implementation=None, key_value_seq_lengths=None, **kwargs):
        calls.append(key_value_seq_lengths is not None)
        return original(
            *args,
            key_value_seq_lengths=key_value_seq_lengths,
            implementation="xla",
            **kwargs,
        )

    monkeypatch.setattr(jax.nn, "dot_product_attention", on_cpu)
    mask = padding[:, None, None, :]
    spec = build_spec(scale=0.3, is_causal=is_causal, mask=mask)
    got = jax.jit(lambda q, k, v: fused_attention("jax_cudnn", q, k, v, spec))(
        Q, K[:, :, :2], K[:, :, :2]
    )
    want = dot_product_attention(
        Q,
        K[:, :, :2],
        K[:, :, :2],
        scale=0.3,
        is_causal=is_causal,
        mask=mask,
        flash_attention=False,
    )
    assert calls == [True]  # traced once, in the lengths' branch
    got = ops.convert_to_numpy(got)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ops.convert_to_numpy(want), atol=2e-6)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Pallas, on JAX")
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("padding", [True, False], ids=["padding", "any_mask"])
def test_a_dense_mask_that_is_padding_takes_the_kernel_in_the_graph(
    monkeypatch, is_causal, padding
):
    """A `(B, 1, T, S)` mask on a GPU (faked; the Pallas kernel in its
    interpreter): where it is a mask over queries times one over keys, as a
    padded batch builds it, the kernel takes it as padding over the keys,
    the masked rows zeroed; any other mask takes the standard path. Both are
    compiled, the graph picks; both equal the standard path."""
    import jax

    from keras_attention.ops import attention_path, plan

    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    if padding:
        rows = np.arange(T)[None, :] < np.array([T, 4])[:, None]
        cols = np.arange(S)[None, :] < np.array([S, 6])[:, None]
        mask = (rows[:, :, None] & cols[:, None, :])[:, None]
    else:
        mask = rng.random((B, 1, T, S)) > 0.3
    call = {"mask": mask, "is_causal": is_causal}
    assert attention_path(Q, V, **call) == "jax_pallas"
    got = jax.jit(
        lambda q, k, v, m: dot_product_attention(q, k, v, **{**call, "mask": m})
    )(Q, K, V, mask)
    want = dot_product_attention(Q, K, V, flash_attention=False, **call)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=2e-6
    )
    # Eagerly the graph's choice is a value: the kernel for padding only.
    chosen, cond = [], jax.lax.cond
    monkeypatch.setattr(
        jax.lax, "cond", lambda p, *a: chosen.append(bool(p)) or cond(p, *a)
    )
    dot_product_attention(Q, K, V, **call)
    assert chosen == [padding]


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Pallas, on JAX")
@pytest.mark.parametrize("padding", [True, False])
def test_a_dense_mask_that_may_be_padding_gives_the_log_sum_exp_too(
    monkeypatch, padding
):
    """Both branches of the graph's check give the log-sum-exp (-inf for a
    masked row), which sinks read."""
    import jax

    from keras_attention.ops import plan

    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    rows = np.arange(T)[None, :] < np.array([T, 4])[:, None]
    cols = np.arange(S)[None, :] < np.array([S, 6])[:, None]
    mask = (rows[:, :, None] & cols[:, None, :])[:, None]
    if not padding:
        mask = mask & (rng.random((B, 1, T, S)) > 0.3)

    def attend(q, k, v, m, **extra):
        return dot_product_attention(q, k, v, mask=m, return_lse=True, **extra)

    got = jax.jit(attend)(Q, K, V, mask)
    want = attend(Q, K, V, mask, flash_attention=False)
    for found, expected in zip(got, want, strict=True):
        np.testing.assert_allclose(
            ops.convert_to_numpy(found), ops.convert_to_numpy(expected), atol=2e-6
        )


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Pallas, on JAX")
@pytest.mark.parametrize(
    "call",
    [
        {"is_causal": True, "attn_logits_soft_cap": 2.0},
        {"is_causal": True, "sliding_window": 3, "query_offset": S - T},
        {"segment_ids": (np.array([[0] * 4 + [1] * 3] * B), SEGMENT_KEYS)},
        {"alibi_slopes": alibi_slopes(N), "is_causal": True, "mask": PADDING},
    ],
    ids=lambda call: "+".join(sorted(call)),
)
def test_pallas_dispatch_equals_the_standard_path(monkeypatch, call):
    """The device faked as a GPU: the call goes to the Pallas kernel (run in
    Pallas' interpreter here), the documents' ids, ALiBi's slopes and the
    padding read as its tiles."""
    from keras_attention.ops import attention_path, plan

    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    assert attention_path(Q, V, flash_attention=True, **call) == "jax_pallas"
    fused = dot_product_attention(
        Q, K[:, :, :2], V[:, :, :2], flash_attention=True, **call
    )
    want = dot_product_attention(
        Q, K[:, :, :2], V[:, :, :2], flash_attention=False, **call
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(fused), ops.convert_to_numpy(want), atol=2e-6
    )
