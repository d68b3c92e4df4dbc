"""The layers as users call them take a fused kernel on a GPU by default,
proved on a CPU: `MultiHeadAttention` and `GroupedQueryAttention` with Keras
masks, the causal mask, `attention_mask` and a model with
`Embedding(mask_zero=True)`, exported for CUDA with the device faked
(`tests/ops/fake_gpu.py`), forward and forward plus backward. The padding
reaches the op as a mask over the keys (cuDNN's lengths, the Pallas kernel
beside it for left padding), never as a `(B, T, S)` tensor."""

import keras
import numpy as np
import pytest

if keras.backend.backend() != "jax":
    pytest.skip(
        "lowers JAX functions for CUDA with jax.export; the Keras backend is "
        f"{keras.backend.backend()}",
        allow_module_level=True,
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from keras_attention.layers import (  # noqa: E402
    GroupedQueryAttention,
    MultiHeadAttention,
)
from tests.ops.fake_gpu import (  # noqa: E402
    CUDNN,
    CUDNN_FORWARD,
    TRITON,
    custom_call_counts,
    exported_text,
    fake_hopper_gpu,
)

B, T, D = 2, 128, 256
HEADS, HEAD_DIM = 4, 64


@pytest.fixture(autouse=True)
def _hopper(monkeypatch):
    fake_hopper_gpu(monkeypatch)


def padding(batch=B, length=T):
    """Right padding: row 0 whole, row 1 its first 100 tokens."""
    lengths = np.array([length, 100])[:batch]
    return jnp.asarray(np.arange(length)[None, :] < lengths[:, None])


# (layer call's keyword arguments, as functions of the padding mask; the
# kernel expected by default in bfloat16 and in float32).
CALLS = {
    "plain": (lambda m: {}, "jax_cudnn", "jax_pallas"),
    "causal": (lambda m: {"use_causal_mask": True}, "jax_cudnn", "jax_pallas"),
    "causal+value_mask": (
        lambda m: {"use_causal_mask": True, "value_mask": m},
        "jax_cudnn",
        "jax_pallas",
    ),
    "query_mask+value_mask": (
        lambda m: {"query_mask": m, "value_mask": m},
        "jax_cudnn",
        "jax_pallas",
    ),
    "attention_mask (B, 1, S) padding": (
        lambda m: {"attention_mask": m[:, None, :]},
        "jax_cudnn",
        "jax_pallas",
    ),
    # A (B, T, S) mask built from padding: the graph finds it is padding
    # and the kernel takes it (the standard path is compiled beside it for
    # any other mask).
    "attention_mask (B, T, S)": (
        lambda m: {"attention_mask": m[:, None, :] & m[:, :, None]},
        "jax_cudnn",
        "jax_pallas",
    ),
}


def layer_function(layer, call, dtype):
    """`fn(x, mask)`: the layer over `x` with the call's masks, in the
    layer's compute dtype; records the path of each trace."""

    def fn(x, mask):
        return layer(x.astype(dtype), x.astype(dtype), **call(mask))

    return fn


def check_calls(path, text, grad):
    calls = custom_call_counts(text)
    if path == "jax_cudnn":
        assert set(calls) & CUDNN_FORWARD, calls
    elif path == "jax_pallas":
        assert sum(calls[name] for name in TRITON) == (3 if grad else 1), calls
        assert not set(calls) & CUDNN, calls
    else:
        assert not set(calls) & (TRITON | CUDNN), calls


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_multi_head_attention_takes_a_fused_kernel_by_default(name, dtype, grad):
    call, bf16_path, f32_path = CALLS[name]
    policy = "float32" if dtype == "float32" else f"mixed_{dtype}"
    layer = MultiHeadAttention(HEADS, HEAD_DIM, dtype=policy)
    layer.build((B, T, D), (B, T, D))
    mask = padding()
    x = jax.ShapeDtypeStruct((B, T, D), "float32")
    fn = layer_function(layer, call, dtype)
    text = exported_text(fn, x, jax.ShapeDtypeStruct(mask.shape, mask.dtype), grad=grad)
    expected = bf16_path if dtype == "bfloat16" else f32_path
    assert layer.attention_path == expected
    check_calls(expected, text, grad)


def test_grouped_query_attention_with_padding_takes_cudnn():
    layer = GroupedQueryAttention(
        HEAD_DIM, HEADS, 2, dtype="mixed_bfloat16", flash_attention=None
    )
    layer.build((B, T, D), (B, T, D))
    mask = padding()

    def fn(x, mask):
        x = x.astype("bfloat16")
        return layer(x, x, query_mask=mask, value_mask=mask, use_causal_mask=True)

    x = jax.ShapeDtypeStruct((B, T, D), "float32")
    text = exported_text(fn, x, jax.ShapeDtypeStruct(mask.shape, mask.dtype))
    assert layer.attention_path == "jax_cudnn"
    check_calls("jax_cudnn", text, grad=False)


def test_an_embedding_with_mask_zero_reaches_cudnn():
    """What an encoder sends: `Embedding(mask_zero=True)` gives the layer a
    query and a value mask, which reach the op as padding over the keys."""
    tokens = keras.Input((T,), dtype="int32")
    x = keras.layers.Embedding(100, D, mask_zero=True, dtype="mixed_bfloat16")(tokens)
    attention = MultiHeadAttention(HEADS, HEAD_DIM, dtype="mixed_bfloat16")
    model = keras.Model(tokens, attention(x, x))
    ids = jax.ShapeDtypeStruct((B, T), "int32")
    text = exported_text(lambda ids: model(ids), ids)
    assert attention.attention_path == "jax_cudnn"
    check_calls("jax_cudnn", text, grad=False)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
def test_attention_dropout_in_training_takes_the_pallas_kernel(grad):
    """Dropout in training stays fused: the Pallas kernel drops the weights
    inside its tiles (jax.nn's cuDNN takes no dropout)."""
    layer = MultiHeadAttention(HEADS, HEAD_DIM, dropout=0.1, dtype="mixed_bfloat16")
    layer.build((B, T, D), (B, T, D))
    mask = padding()

    def fn(x, mask):
        x = x.astype("bfloat16")
        masks = {"query_mask": mask, "value_mask": mask, "use_causal_mask": True}
        return layer(x, x, training=True, **masks)

    x = jax.ShapeDtypeStruct((B, T, D), "float32")
    text = exported_text(fn, x, jax.ShapeDtypeStruct(mask.shape, mask.dtype), grad=grad)
    assert layer.attention_path == "jax_pallas"
    check_calls("jax_pallas", text, grad)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
def test_a_gpt_oss_layer_with_sinks_takes_the_pallas_kernel(grad):
    """GPT-OSS's attention (grouped heads, a window, learned sinks) stays
    fused: the sinks are applied from the Pallas kernel's log-sum-exp."""
    layer = GroupedQueryAttention(
        HEAD_DIM, HEADS, 2, sliding_window=128, use_sinks=True, dtype="mixed_bfloat16"
    )
    layer.build((B, T, D), (B, T, D))
    mask = padding()

    def fn(x, mask):
        x = x.astype("bfloat16")
        return layer(x, x, value_mask=mask, use_causal_mask=True)

    x = jax.ShapeDtypeStruct((B, T, D), "float32")
    text = exported_text(fn, x, jax.ShapeDtypeStruct(mask.shape, mask.dtype), grad=grad)
    assert layer.attention_path == "jax_pallas"
    check_calls("jax_pallas", text, grad)
