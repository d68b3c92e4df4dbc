"""MultiHeadAttention's options for pretrained models' attention (scale, soft
cap, query/key/value norms, a rotary layer, output dropout, output bias, kernel
layout, the head size settled in build), each against what it stands for."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import (
    GroupedQueryAttention,
    MultiHeadAttention,
    RotaryEmbedding,
)
from keras_attention.ops.attention import dot_product_attention
from tests.layer_test import decode_token_by_token


def numpy(t):
    return ops.convert_to_numpy(t)


def close(actual, expected, atol):
    np.testing.assert_allclose(numpy(actual), numpy(expected), atol=atol, rtol=0)


def x(batch=2, length=7, dim=16, seed=0):
    return (
        np.random.default_rng(seed).normal(size=(batch, length, dim)).astype("float32")
    )


def layer(**kwargs):
    keras.utils.set_random_seed(0)
    return GroupedQueryAttention(
        **{"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2, **kwargs}
    )


def projections(attention, inputs):
    """The projected queries, keys and values of `attention`."""
    return (
        attention._query_dense(inputs),
        attention._key_dense(inputs),
        attention._value_dense(inputs),
    )


@pytest.mark.parametrize("weights", [False, True], ids=["op", "weights"])
def test_scale_and_soft_cap_reach_the_attention(weights):
    attention = layer(scale=0.7, soft_cap=2.0)
    inputs = x()
    output = attention(
        inputs, inputs, use_causal_mask=True, return_attention_scores=weights
    )
    output = output[0] if weights else output
    q, k, v = projections(attention, inputs)
    expected = dot_product_attention(
        q, k, v, scale=0.7, is_causal=True, attn_logits_soft_cap=2.0
    )
    expected = attention._output_dense(expected)
    close(output, expected, 1e-5)
    plain = dot_product_attention(q, k, v, is_causal=True)
    assert np.abs(numpy(attention._output_dense(plain) - output)).max() > 1e-3


def test_soft_cap_on_the_chunked_path_equals_the_standard_path():
    inputs = x(length=40)
    chunked = layer(soft_cap=1.5, chunk_size=8)
    standard = layer(soft_cap=1.5, flash_attention=False)
    out = chunked(inputs, inputs, use_causal_mask=True)
    standard(inputs, inputs)
    standard.set_weights(chunked.get_weights())
    close(out, standard(inputs, inputs, use_causal_mask=True), 1e-5)
    assert chunked.attention_path == "chunked"


def test_query_and_key_norms_apply_before_attention_in_weight_order():
    attention = layer(
        query_norm=keras.layers.LayerNormalization(name="q_norm"),
        key_norm=keras.layers.LayerNormalization(name="k_norm"),
    )
    inputs = x()
    output = attention(inputs, inputs)
    names = [w.path.split("/", 1)[1] for w in attention.weights]
    assert names[:6] == [
        "query/kernel",
        "query/bias",
        "q_norm/gamma",
        "q_norm/beta",
        "key/kernel",
        "key/bias",
    ]
    q, k, v = projections(attention, inputs)
    expected = dot_product_attention(attention.query_norm(q), attention.key_norm(k), v)
    close(output, attention._output_dense(expected), 1e-5)


def test_value_norm_applies_to_the_values_after_their_projection():
    attention = layer(
        value_norm=keras.layers.RMSNormalization(name="v_norm"),
        query_norm=keras.layers.LayerNormalization(name="q_norm"),
    )
    inputs = x()
    output = attention(inputs, inputs)
    names = [w.path.split("/", 1)[1] for w in attention.weights]
    assert names.index("v_norm/scale") == names.index("value/bias") + 1
    assert names[-2:] == ["attention_output/kernel", "attention_output/bias"]
    attention.value_norm.scale.assign(np.linspace(0.5, 2.0, 4).astype("float32"))
    output = attention(inputs, inputs)
    q, k, v = projections(attention, inputs)
    expected = dot_product_attention(
        attention.query_norm(q), k, attention.value_norm(v)
    )
    close(output, attention._output_dense(expected), 1e-5)
    # Without it the output differs: the comparison above sees the norm.
    plain = attention._output_dense(
        dot_product_attention(attention.query_norm(q), k, v)
    )
    assert np.abs(numpy(output) - numpy(plain)).max() > 1e-2


def test_value_norm_applies_before_the_values_are_cached():
    attention = layer(value_norm=keras.layers.RMSNormalization())
    inputs = x(length=5)
    expected = attention(inputs, inputs, use_causal_mask=True)
    outputs, cache = decode_token_by_token(
        attention, inputs, ops.zeros((2, 2, 5, 2, 4))
    )
    close(outputs, expected, 1e-5)
    values = attention.value_norm(attention._value_dense(inputs))
    close(cache[:, 1], values, 1e-6)


def test_a_rotary_layer_equals_the_built_in_rotary_encoding():
    inputs = x()
    built_in = layer(attention_positions="rotary", max_wavelength=100)
    given = layer(rotary_embedding=RotaryEmbedding(max_wavelength=100))
    expected = built_in(inputs, inputs, use_causal_mask=True)
    given(inputs, inputs)
    given.set_weights(built_in.get_weights())
    close(given(inputs, inputs, use_causal_mask=True), expected, 1e-6)
    plain = layer()
    plain(inputs, inputs)
    plain.set_weights(built_in.get_weights())
    assert np.abs(numpy(plain(inputs, inputs) - expected)).max() > 1e-3


def test_output_dropout_drops_only_in_training():
    attention = layer(output_dropout=0.5, seed=1)
    inputs = x()
    inference = attention(inputs, inputs)
    again = attention(inputs, inputs, training=False)
    close(inference, again, 0)
    trained = attention(inputs, inputs, training=True)
    assert np.abs(numpy(trained - inference)).max() > 1e-3
    # Neither dropout needs the weights: training keeps the chunked path
    # (dropout on the weights is applied inside it).
    for rates in ({"output_dropout": 0.5}, {"dropout": 0.5}):
        chunked = layer(chunk_size=4, **rates)
        chunked(inputs, inputs, training=True)
        assert chunked.attention_path == "chunked"


def test_separate_output_bias():
    attention = layer(use_bias=True, use_output_bias=False)
    attention(x(), x())
    names = [w.path.split("/", 1)[1] for w in attention.weights]
    assert "query/bias" in names and "value/bias" in names
    assert "attention_output/bias" not in names


def test_heads_first_kernel_layout_equals_input_first_transposed():
    inputs = x()
    input_first = layer()
    heads_first = layer(kernel_layout="heads_first")
    expected = input_first(inputs, inputs)
    heads_first(inputs, inputs)
    assert tuple(heads_first._query_dense.kernel.shape) == (4, 16, 4)
    weights = [
        np.transpose(w, (1, 0, 2)) if w.ndim == 3 and w.shape[0] == 16 else w
        for w in input_first.get_weights()
    ]
    heads_first.set_weights(weights)
    close(heads_first(inputs, inputs), expected, 1e-6)


def test_head_size_settled_in_build():
    attention = MultiHeadAttention(num_heads=4, key_dim=None)
    attention(x(), x())
    assert attention.key_dim == 4 and attention.value_dim == 4
    assert attention.get_config()["key_dim"] == 4
    with pytest.raises(ValueError, match="last axis of 15 and num_heads=4"):
        MultiHeadAttention(num_heads=4, key_dim=None)(x(dim=15), x(dim=15))


def test_config_round_trip_keeps_the_options(tmp_path):
    attention = layer(
        scale=0.5,
        soft_cap=3.0,
        query_norm=keras.layers.LayerNormalization(name="q_norm"),
        value_norm=keras.layers.RMSNormalization(name="v_norm"),
        rotary_embedding=RotaryEmbedding(max_wavelength=50),
        output_dropout=0.1,
        use_output_bias=False,
        kernel_layout="heads_first",
    )
    inputs = x()
    expected = attention(inputs, inputs, use_causal_mask=True)
    config = attention.get_config()
    assert config["scale"] == 0.5 and config["kernel_layout"] == "heads_first"
    assert "key_norm" not in config  # defaults are left out, as Keras' own
    inputs_layer = keras.Input((7, 16))
    model = keras.Model(
        inputs_layer, attention(inputs_layer, inputs_layer, use_causal_mask=True)
    )
    path = str(tmp_path / "options.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    close(loaded(inputs), expected, 0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scale": -1.0}, "scale"),
        ({"soft_cap": 0}, "soft_cap"),
        ({"output_dropout": 1.5}, "output_dropout"),
        ({"kernel_layout": "nhd"}, "`kernel_layout` must be one of"),
        ({"use_output_bias": "yes"}, "`use_output_bias` must be None"),
        ({"query_norm": "rms"}, "`query_norm` must be a Keras layer"),
        ({"value_norm": 1.0}, "`value_norm` must be a Keras layer"),
        (
            {"rotary_embedding": RotaryEmbedding(), "attention_positions": "rotary"},
            "replaces `attention_positions`",
        ),
    ],
)
def test_bad_options_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        layer(**kwargs)


def test_options_under_jit_compile_and_mixed_precision():
    inputs = x()
    attention = layer(
        soft_cap=2.0,
        scale=1 / math.sqrt(8),
        query_norm=keras.layers.LayerNormalization(),
        dtype="mixed_bfloat16",
    )
    eager = attention(inputs, inputs, use_causal_mask=True)
    assert keras.backend.standardize_dtype(eager.dtype) == "bfloat16"
    model = keras.Model(
        inputs_layer := keras.Input((7, 16)),
        attention(inputs_layer, inputs_layer, use_causal_mask=True),
    )
    # On PyTorch jit_compile is torch.compile: minutes, and not XLA's check.
    model.compile(jit_compile=keras.config.backend() != "torch")
    compiled = model.predict(inputs, verbose=0)
    close(ops.cast(eager, "float32"), compiled, 3e-2)


def test_options_under_a_16_bit_floatx(floatx):
    """`keras.config.set_floatx("bfloat16")` (or float16): the options keep
    the layer's dtype and its outputs finite, causal rows included."""
    inputs = ops.cast(x(), floatx)
    attention = layer(
        soft_cap=2.0,
        scale=0.3,
        query_norm=keras.layers.LayerNormalization(),
        key_norm=keras.layers.LayerNormalization(),
        rotary_embedding=RotaryEmbedding(max_wavelength=100),
        use_output_bias=False,
        chunk_size=4,
    )
    output = attention(inputs, inputs, use_causal_mask=True)
    assert keras.backend.standardize_dtype(output.dtype) == floatx
    assert np.isfinite(numpy(ops.cast(output, "float32"))).all()
    assert attention.attention_path == "chunked"


def _as_flat(weights):
    """Weights of the input-first layer `layer()` for its `kernel_layout=
    "flat"` twin: the kernels `(dim, heads, size)` -> `(dim, heads * size)`
    and `(heads, size, dim)` -> `(heads * size, dim)`, the biases `(heads,
    size)` -> `(heads * size,)`."""
    flat = []
    for w in weights:
        if w.ndim == 3 and w.shape[0] == 16:
            w = w.reshape(16, -1)
        elif w.ndim == 3:
            w = w.reshape(-1, w.shape[-1])
        elif w.ndim == 2:
            w = w.reshape(-1)
        flat.append(w)
    return flat


def test_flat_kernel_layout_equals_input_first_reshaped():
    inputs = x()
    input_first = layer()
    flat = layer(kernel_layout="flat")
    expected = input_first(inputs, inputs, use_causal_mask=True)
    flat(inputs, inputs)
    # keras-hub's Gemma 3n's `Dense` kernels: (dim, heads * size) and
    # (heads * size, dim), the biases flat too.
    assert isinstance(flat._query_dense, keras.layers.Dense)
    assert tuple(flat._query_dense.kernel.shape) == (16, 16)
    assert tuple(flat._key_dense.kernel.shape) == (16, 8)
    assert tuple(flat._output_dense.kernel.shape) == (16, 16)
    assert tuple(flat._value_dense.bias.shape) == (8,)
    names = [w.path.split("/", 1)[1] for w in flat.weights]
    assert names == [w.path.split("/", 1)[1] for w in input_first.weights]
    flat.set_weights(_as_flat(input_first.get_weights()))
    close(flat(inputs, inputs, use_causal_mask=True), expected, 1e-5)
    # The projections split the heads: (B, T, heads, size) as the others'.
    assert tuple(flat._key_dense(inputs).shape) == (2, 7, 2, 4)


def test_flat_kernel_layout_takes_lora_and_int8_as_dense():
    inputs = x()
    attention = layer(kernel_layout="flat", use_bias=False)
    query = keras.Input((7, 16))
    model = keras.Model(query, attention(query, query, use_causal_mask=True))
    expected = numpy(model(inputs))
    attention._query_dense.enable_lora(2)
    assert tuple(attention._query_dense.lora_kernel_a.shape) == (16, 2)
    # LoRA starts at zero: the outputs are the layer's own.
    close(model(inputs), expected, 1e-6)
    attention._query_dense.lora_kernel_b.assign(np.full((2, 16), 0.3, "float32"))
    assert np.abs(numpy(model(inputs)) - expected).max() > 1e-3
    plain = layer(kernel_layout="flat", use_bias=False)
    model = keras.Model(query, plain(query, query, use_causal_mask=True))
    expected = numpy(model(inputs))
    model.quantize("int8")
    for dense in (plain._query_dense, plain._output_dense):
        assert dense.quantization_mode == "int8"
    got = numpy(model(inputs))
    assert np.abs(got - expected).max() < 0.05
    assert np.abs(got - expected).max() > 0


def test_flat_kernel_layout_and_heads_first_cache_round_trip(tmp_path):
    attention = layer(kernel_layout="flat", cache_layout="heads_first")
    inputs = x()
    query = keras.Input((7, 16))
    model = keras.Model(query, attention(query, query, use_causal_mask=True))
    expected = model(inputs)
    config = attention.get_config()
    assert config["kernel_layout"] == "flat"
    assert config["cache_layout"] == "heads_first"
    path = str(tmp_path / "flat.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    close(loaded(inputs), expected, 0)
    reloaded = loaded.layers[-1]
    assert isinstance(reloaded._query_dense, keras.layers.Dense)
    assert tuple(reloaded.initial_cache(1, 5).shape) == (1, 2, 2, 5, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cache_layout": "bnsh"}, "`cache_layout` must be one of"),
        (
            {"kernel_layout": "flat", "output_shape": (4, 4)},
            "onto one axis; received output_shape=\\(4, 4\\)",
        ),
    ],
)
def test_bad_layouts_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attention = MultiHeadAttention(num_heads=2, key_dim=4, **kwargs)
        attention(x(), x())
