"""The plan's `"jax_tokamax"`: tokamax's flash attention, on a CPU.

- The arguments: `dot_product_attention` with the plan on a faked H100 and
  tokamax's XLA implementation (its reference, which takes the same
  arguments as its Mosaic GPU kernel) against our standard path in float32,
  outputs and gradients, in bfloat16: the soft cap, the causal mask,
  windows, documents (in order, out of order, a query whose document has
  no key), padding over the keys (right and left), grouped heads. The calls
  tokamax does not serve (documents out of order, left padding) take the
  Pallas kernel, interpreted, inside the same function.
- The lowering: the same calls exported for CUDA (`tests/ops/fake_gpu.py`,
  tokamax in `cross_compile`) call Mosaic GPU once forward and three times
  with the gradient (the forward kernel that saves the residuals, then dQ
  and dK/dV), as `tests/ops/test_lowering.py` checks our kernels; so does
  `MultiHeadAttention` with the soft cap and padding, as users call it.

Nothing here compiles or runs Mosaic GPU (it has no interpreter): its
numbers on a Hopper stay unchecked here.
"""

import keras
import numpy as np
import pytest

if keras.backend.backend() != "jax":
    pytest.skip(
        f"tokamax is a JAX library; the Keras backend is {keras.backend.backend()}",
        allow_module_level=True,
    )
pytest.importorskip(
    "tokamax",
    reason="needs tokamax: `pip install keras-attention[tokamax]` (the extra)",
)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from keras_attention.ops import (  # noqa: E402
    attention_path,
    dot_product_attention,
    fused,
    plan,
    tokamax_attention,
)
from tests.ops.fake_gpu import (  # noqa: E402
    CUDNN,
    MOSAIC_GPU,
    TRITON,
    custom_call_counts,
    exported_text,
    fake_hopper_gpu,
)

B, T, N, H = 2, 64, 4, 32
SOFT_CAP = 5.0
WINDOW = 16
# Documents in order: three per row, of other lengths in each row.
DOCUMENTS = np.stack(
    [np.repeat([0, 1, 2], [20, 30, 14]), np.repeat([3, 4, 5], [8, 40, 16])]
).astype("int32")
OUT_OF_ORDER = np.concatenate([DOCUMENTS[:, 32:], DOCUMENTS[:, :32]], axis=1)
LENGTHS = np.array([T, 40])
RIGHT_PADDING = (np.arange(T)[None, :] < LENGTHS[:, None])[:, None, None, :]
LEFT_PADDING = RIGHT_PADDING[..., ::-1]

# name: (dot_product_attention's keyword arguments, the key/value heads, the
# path inside the graph: tokamax's, or the Pallas kernel's for what it does
# not serve).
CALLS = {
    "soft_cap+causal": ({"attn_logits_soft_cap": SOFT_CAP, "is_causal": True}, N),
    "window": ({"sliding_window": WINDOW}, N),
    "soft_cap+causal+window": (
        {"attn_logits_soft_cap": SOFT_CAP, "is_causal": True, "sliding_window": 8},
        N,
    ),
    "documents+causal+gqa": ({"segment_ids": DOCUMENTS, "is_causal": True}, 2),
    "documents+right_padding+soft_cap": (
        {
            "segment_ids": DOCUMENTS,
            "mask": RIGHT_PADDING,
            "attn_logits_soft_cap": SOFT_CAP,
        },
        N,
    ),
    # Queries of document 9, which no key belongs to: rows of zeros.
    "documents_without_keys": (
        {"segment_ids": (np.maximum(DOCUMENTS, 9 * (DOCUMENTS == 2)), DOCUMENTS)},
        N,
    ),
    # (cuDNN takes right padding with the causal mask, not with a window
    # that is not causal.)
    "right_padding+window+gqa": ({"mask": RIGHT_PADDING, "sliding_window": 8}, 1),
    # Not tokamax's: the Pallas kernel in the same function.
    "documents_out_of_order": ({"segment_ids": OUT_OF_ORDER}, N),
    "left_padding+soft_cap": (
        {"mask": LEFT_PADDING, "attn_logits_soft_cap": SOFT_CAP},
        N,
    ),
}


def inputs(kv_heads, dtype="bfloat16", seed=0):
    rng = np.random.default_rng(seed)
    shapes = ((B, T, N, H), (B, T, kv_heads, H), (B, T, kv_heads, H))
    return [jnp.asarray(rng.normal(size=shape), dtype) for shape in shapes]


def outputs_and_gradients(call, query, key, value, **asked):
    """The attention and the gradients of `sum(attention * weights)` with
    respect to the queries, keys and values, in float32."""
    rng = np.random.default_rng(1)
    weights = jnp.asarray(rng.normal(size=query.shape), "float32")

    def loss(q, k, v):
        output = dot_product_attention(q, k, v, **call, **asked)
        return jnp.sum(output.astype("float32") * weights), output

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))
    grads, output = grad(query, key, value)
    return [np.asarray(x, "float32") for x in (output, *grads)]


@pytest.fixture
def tokamax_on_a_cpu(monkeypatch):
    """The plan on an H100 with tokamax, tokamax's XLA implementation in its
    Mosaic GPU kernel's place, the Pallas kernel interpreted."""
    fake_hopper_gpu(monkeypatch, tokamax=True)
    monkeypatch.setattr(fused, "_pallas_interprets", lambda: True)
    monkeypatch.setattr(tokamax_attention, "IMPLEMENTATION", "xla")


@pytest.mark.parametrize("name", list(CALLS))
def test_tokamax_computes_the_standard_paths_attention(name, tokamax_on_a_cpu):
    call, kv_heads = CALLS[name]
    query, key, value = inputs(kv_heads)
    assert attention_path(query, value, **call) == "jax_tokamax"
    got = outputs_and_gradients(call, query, key, value)
    as_float = [x.astype("float32") for x in (query, key, value)]
    want = outputs_and_gradients(call, *as_float, flash_attention=False)
    for what, g, w in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
        assert np.all(np.isfinite(g)), what
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, w, atol=3e-2 * scale, err_msg=what)
    if name == "documents_without_keys":
        empty = np.asarray(call["segment_ids"][0]) == 9
        assert empty.any()
        assert np.all(got[0][empty] == 0)


def test_the_mapping_is_what_the_comparison_sees(tokamax_on_a_cpu, monkeypatch):
    """A wrong range (the window one key short) is seen by the comparison."""
    call, kv_heads = CALLS["window"]
    query, key, value = inputs(kv_heads)
    want = outputs_and_gradients(call, query, key, value)[0]
    from keras_attention.ops.spec import AttentionSpec

    window = AttentionSpec.window.fget
    monkeypatch.setattr(
        AttentionSpec, "window", property(lambda spec: window(spec) - 1)
    )
    got = outputs_and_gradients(call, query, key, value)[0]
    assert np.max(np.abs(got - want)) > 0.1


# -- lowering for CUDA -------------------------------------------------------

LOWERED = {
    name: CALLS[name]
    for name in (
        "soft_cap+causal",
        "soft_cap+causal+window",
        "documents+causal+gqa",
        "right_padding+window+gqa",
    )
}


def structs(call, kv_heads, head_dim):
    """The exported function's arguments: queries, keys, values, then the
    documents' ids or the padding mask, traced."""
    args = [
        jax.ShapeDtypeStruct((B, T, N, head_dim), jnp.bfloat16),
        jax.ShapeDtypeStruct((B, T, kv_heads, head_dim), jnp.bfloat16),
        jax.ShapeDtypeStruct((B, T, kv_heads, head_dim), jnp.bfloat16),
    ]
    if "segment_ids" in call:
        args.append(jax.ShapeDtypeStruct((B, T), jnp.int32))
    if "mask" in call:
        args.append(jax.ShapeDtypeStruct((B, 1, 1, T), jnp.bool_))
    return args


def attention_function(call, paths):
    def fn(query, key, value, *traced):
        arguments = dict(call)
        for name, tensor in zip(
            [n for n in ("segment_ids", "mask") if n in call], traced, strict=True
        ):
            arguments[name] = tensor
        paths.append(attention_path(query, value, **arguments))
        return dot_product_attention(query, key, value, **arguments)

    return fn


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("head_dim", [64, 256])
@pytest.mark.parametrize("name", list(LOWERED))
def test_tokamax_lowers_to_mosaic_gpu(name, head_dim, grad, monkeypatch):
    import tokamax

    fake_hopper_gpu(monkeypatch, tokamax=True)
    call, kv_heads = LOWERED[name]
    paths = []
    fn = attention_function(call, paths)
    with tokamax.config.cross_compile(True):
        text = exported_text(fn, *structs(call, kv_heads, head_dim), grad=grad)
    assert paths and set(paths) == {"jax_tokamax"}, paths
    counts = custom_call_counts(text)
    # Forward: one kernel; with the gradient, the forward kernel (which
    # saves the residuals) and the two backward kernels (dQ, dK/dV).
    assert sum(counts[name] for name in MOSAIC_GPU) == (3 if grad else 1), counts
    assert not set(counts) & CUDNN, counts
    # Documents and padding: the Pallas kernel, compiled beside it, serves
    # documents out of order and padding that is not right padding.
    fallback = "segment_ids" in call or "mask" in call
    triton = sum(counts[name] for name in TRITON)
    assert triton == ((3 if grad else 1) if fallback else 0), counts


def test_without_tokamax_the_plan_keeps_the_pallas_kernel(monkeypatch):
    fake_hopper_gpu(monkeypatch, tokamax=False)
    call, kv_heads = CALLS["soft_cap+causal"]
    query, _, value = inputs(kv_heads)
    assert attention_path(query, value, **call) == "jax_pallas"
    assert not plan._tokamax_available()


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
def test_a_gemma_like_layer_takes_tokamax(grad, monkeypatch):
    """`MultiHeadAttention` with the soft cap, the causal mask and padding
    from its masks, in mixed bfloat16, as users call it."""
    import tokamax

    from keras_attention.layers import MultiHeadAttention

    fake_hopper_gpu(monkeypatch, tokamax=True)
    width = 128
    layer = MultiHeadAttention(N, 64, soft_cap=SOFT_CAP, dtype="mixed_bfloat16")
    layer.build((B, T, width), (B, T, width))

    def fn(x, mask):
        x = x.astype("bfloat16")
        masks = {"query_mask": mask, "value_mask": mask, "use_causal_mask": True}
        return layer(x, x, **masks)

    x = jax.ShapeDtypeStruct((B, T, width), "float32")
    mask = jax.ShapeDtypeStruct((B, T), jnp.bool_)
    with tokamax.config.cross_compile(True):
        counts = custom_call_counts(exported_text(fn, x, mask, grad=grad))
    assert layer.attention_path == "jax_tokamax"
    kernels = 3 if grad else 1
    assert sum(counts[name] for name in MOSAIC_GPU) == kernels, counts
    # Left padding's branch.
    assert sum(counts[name] for name in TRITON) == kernels, counts


@pytest.mark.parametrize(
    "name", ["documents+right_padding+soft_cap", "right_padding+window+gqa"]
)
def test_keys_no_query_sees_are_never_read_by_tokamax(name, tokamax_on_a_cpu):
    """NaN and inf in the padded keys and values, and in a document no
    query belongs to, reach no output and no gradient through tokamax."""
    call, kv_heads = CALLS[name]
    call = dict(call)
    unseen = np.zeros((B, T), bool)
    unseen[1, LENGTHS[1] :] = True
    if "segment_ids" in call:
        keys = DOCUMENTS.copy()
        keys[0, 20:50] = 7  # a document of keys alone
        unseen[0, 20:50] = True
        call["segment_ids"] = (DOCUMENTS, keys)
    query, key, value = inputs(kv_heads)
    assert attention_path(query, value, **call) == "jax_tokamax"
    clean = outputs_and_gradients(call, query, key, value)
    hidden = jnp.asarray(unseen[:, :, None, None])
    poisoned = outputs_and_gradients(
        call,
        query,
        jnp.where(hidden, jnp.nan, key),
        jnp.where(hidden, jnp.inf, value),
    )
    for got, want in zip(poisoned, clean, strict=True):
        assert np.isfinite(got).all()
        np.testing.assert_array_equal(got, want)


def test_tokamax_that_traces_is_taken(monkeypatch):
    import tokamax

    fake_hopper_gpu(monkeypatch, tokamax=True)  # tokamax sees a Hopper
    with tokamax.config.cross_compile(True):
        assert tokamax_attention.tokamax_traces()


def test_tokamax_that_does_not_trace_is_left_out_with_a_warning(monkeypatch):
    # tokamax 0.0.12 on JAX 0.11.2 (an H100): Pallas' `Mesh` refused an
    # argument while tokamax built its kernel, at trace time.
    def broken(*args, **kwargs):
        raise TypeError("Mesh.__init__() got an unexpected keyword argument")

    monkeypatch.setattr(tokamax_attention, "_attend", broken)
    with pytest.warns(UserWarning, match="tokamax does not trace with JAX.*TypeError"):
        assert not tokamax_attention.tokamax_traces()
    # The plan then leaves it out (its check uncached here), and the Pallas
    # kernel serves.
    checked = plan._tokamax_available.__wrapped__
    fake_hopper_gpu(monkeypatch)
    monkeypatch.setattr(plan, "_tokamax_available", checked)
    call, kv_heads = CALLS["soft_cap+causal"]
    query, _, value = inputs(kv_heads)
    with pytest.warns(UserWarning, match="tokamax does not trace"):
        assert attention_path(query, value, **call) == "jax_pallas"
