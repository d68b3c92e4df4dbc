"""MultiHeadAttention's `packed_gate` (the output gate packed in the query
projection, Qwen 3.5's) and its `positions` call argument (rotary positions
handed to the rotary layer as given, e.g. Qwen 3.5's `(B, 4, T)`), each
against what it stands for."""

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
from tests.layers.test_attention_options import close, layer, numpy, x


def test_packed_gate_equals_kerass_gate_of_the_same_weights():
    # The packed kernel's first `head_dim` columns of each head are the
    # query's, the rest the gate's: Keras' gate (its own projection) with
    # those weights gives the same outputs.
    inputs = x()
    packed = layer(packed_gate=True)
    output = packed(inputs, inputs, use_causal_mask=True)
    kernel = numpy(packed._query_dense.kernel)
    bias = numpy(packed._query_dense.bias)
    assert kernel.shape == (16, 4, 8) and packed._use_gate is False
    assert not hasattr(packed, "_gate_dense")
    keras_gate = layer(use_gate=True)
    keras_gate(inputs, inputs)
    keras_gate._query_dense.kernel.assign(kernel[..., :4])
    keras_gate._query_dense.bias.assign(bias[..., :4])
    keras_gate._gate_dense.kernel.assign(kernel[..., 4:])
    keras_gate._gate_dense.bias.assign(bias[..., 4:])
    for name in ("_key_dense", "_value_dense", "_output_dense"):
        source, target = getattr(packed, name), getattr(keras_gate, name)
        for ours, theirs in zip(target.weights, source.weights, strict=True):
            ours.assign(theirs)
    close(keras_gate(inputs, inputs, use_causal_mask=True), output, 1e-6)


def test_packed_gate_multiplies_the_attention_output_by_the_sigmoid():
    inputs = x()
    attention = layer(packed_gate=True, use_bias=False)
    output = attention(inputs, inputs, use_causal_mask=True)
    packed = attention._query_dense(inputs)
    q, g = packed[..., :4], packed[..., 4:]
    k, v = attention._key_dense(inputs), attention._value_dense(inputs)
    attended = dot_product_attention(q, k, v, is_causal=True)
    expected = attention._output_dense(attended * ops.sigmoid(g))
    close(output, expected, 1e-5)
    # Without the gate the output differs: the comparison sees it.
    ungated = attention._output_dense(attended)
    assert np.abs(numpy(output) - numpy(ungated)).max() > 1e-2


def test_packed_gate_takes_the_value_size():
    # The gate multiplies the attention output, whose heads are value_dim
    # wide: the packed kernel is (dim, heads, key_dim + value_dim).
    keras.utils.set_random_seed(0)
    attention = MultiHeadAttention(
        num_heads=2, key_dim=4, value_dim=6, packed_gate=True, use_bias=False
    )
    inputs = x()
    output = attention(inputs, inputs)
    assert tuple(attention._query_dense.kernel.shape) == (16, 2, 10)
    packed = attention._query_dense(inputs)
    q, g = packed[..., :4], packed[..., 4:]
    k, v = attention._key_dense(inputs), attention._value_dense(inputs)
    expected = attention._output_dense(dot_product_attention(q, k, v) * ops.sigmoid(g))
    close(output, expected, 1e-5)


def test_packed_gate_with_a_query_norm_and_rotary_normalizes_the_query_only():
    # The norm and the rotation take the query's part alone (Qwen 3.5's).
    inputs = x()
    attention = layer(
        packed_gate=True,
        use_bias=False,
        query_norm=keras.layers.RMSNormalization(),
        rotary_embedding=RotaryEmbedding(),
    )
    output = attention(inputs, inputs, use_causal_mask=True)
    assert tuple(attention.query_norm.scale.shape) == (4,)
    packed = attention._query_dense(inputs)
    rotary = attention.rotary_embedding
    q = rotary(attention.query_norm(packed[..., :4]))
    k = rotary(attention._key_dense(inputs))
    v = attention._value_dense(inputs)
    gate = ops.sigmoid(packed[..., 4:])
    attended = dot_product_attention(q, k, v, is_causal=True)
    close(output, attention._output_dense(attended * gate), 1e-5)


def test_packed_gate_decodes_step_by_step_as_in_one_call():
    attention = layer(packed_gate=True, attention_positions="rotary")
    inputs = x(length=5)
    expected = attention(inputs, inputs, use_causal_mask=True)
    for dtype in (None, "int8"):
        cache = attention.initial_cache(2, 5, dtype=dtype)
        decoded, _ = decode_token_by_token(attention, inputs, cache)
        close(decoded, expected, 1e-5 if dtype is None else 0.1)


def test_packed_gate_config_round_trip(tmp_path):
    attention = layer(packed_gate=True)
    inputs = x()
    expected = attention(inputs, inputs)
    config = attention.get_config()
    assert config["packed_gate"] is True and config["use_gate"] is False
    assert "packed_gate" not in layer().get_config()
    restored = GroupedQueryAttention.from_config(config)
    restored(inputs, inputs)
    restored.set_weights(attention.get_weights())
    close(restored(inputs, inputs), expected, 1e-6)
    tokens = keras.Input((7, 16))
    model = keras.Model(tokens, attention(tokens, tokens))
    path = str(tmp_path / "gated.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    close(loaded(inputs), expected, 1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"packed_gate": True, "use_gate": True}, "exclude each other"),
        ({"packed_gate": "yes"}, "`packed_gate` must be True or False"),
    ],
)
def test_bad_gates_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        layer(**kwargs)


class SecondAxisRotary(keras.layers.Layer):
    """A rotary layer taking `(B, 4, T)` positions, as keras-hub's Qwen 3.5
    multi-axis rotary does: it rotates by the second axis's positions."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rotary = RotaryEmbedding()
        self.seen = []

    def call(self, inputs, start_index=0, positions=None):
        if positions is not None:
            self.seen.append(tuple(positions.shape))
            positions = positions[:, 1, :]
        return self.rotary(inputs, start_index=start_index, positions=positions)


def multi_axis_positions(batch=2, length=7, seed=2):
    """`(B, 4, T)` positions whose second axis is not `arange(T)` (nor a
    shift of it): a rotation by them differs from the default."""
    rng = np.random.default_rng(seed)
    positions = np.tile(np.arange(length)[None, None], (batch, 4, 1))
    positions[:, 1] = rng.integers(0, 3 * length, (batch, length))
    return positions.astype("int32")


def test_positions_reach_the_rotary_layer_as_given():
    inputs = x()
    positions = multi_axis_positions()
    attention = layer(rotary_embedding=SecondAxisRotary())
    output = attention(inputs, inputs, use_causal_mask=True, positions=positions)
    # Both the queries and the keys were rotated at the (B, 4, T) positions.
    assert attention.rotary_embedding.seen[-2:] == [(2, 4, 7)] * 2
    built_in = layer(attention_positions="rotary")
    built_in(inputs, inputs)
    built_in.set_weights(attention.get_weights())
    second = positions[:, 1]
    close(
        built_in(inputs, inputs, use_causal_mask=True, positions=second), output, 1e-5
    )
    q = RotaryEmbedding()(built_in._query_dense(inputs), positions=second)
    k = RotaryEmbedding()(built_in._key_dense(inputs), positions=second)
    attended = dot_product_attention(
        q, k, built_in._value_dense(inputs), is_causal=True
    )
    close(output, built_in._output_dense(attended), 1e-5)
    default = attention(inputs, inputs, use_causal_mask=True)
    assert np.abs(numpy(default) - numpy(output)).max() > 1e-3


def test_positions_with_a_cache_rotate_the_new_keys_at_them():
    inputs = x(length=5)
    positions = multi_axis_positions(length=5)
    attention = layer(rotary_embedding=SecondAxisRotary())
    expected = attention(inputs, inputs, use_causal_mask=True, positions=positions)
    cache = attention.initial_cache(2, 5)
    # A prompt of 3 tokens, then 2 steps.
    prompt, cache = attention(
        inputs[:, :3],
        inputs[:, :3],
        cache=cache,
        cache_update_index=0,
        use_causal_mask=True,
        positions=positions[..., :3],
    )
    steps = [numpy(prompt)]
    for t in (3, 4):
        step, cache = attention(
            inputs[:, t : t + 1],
            inputs[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
            use_causal_mask=True,
            positions=positions[..., t : t + 1],
        )
        steps.append(numpy(step))
    close(np.concatenate(steps, axis=1), expected, 1e-5)


def test_positions_take_precedence_over_the_segments_restart():
    inputs = x()
    segment_ids = np.array([[1, 1, 1, 2, 2, 2, 2]] * 2, "int32")
    attention = layer(attention_positions="rotary")
    restarted = attention(inputs, inputs, segment_ids=segment_ids)
    positions = np.array([[0, 1, 2, 0, 1, 2, 3]] * 2, "int32")
    given = attention(inputs, inputs, segment_ids=segment_ids, positions=positions)
    close(given, restarted, 1e-5)
    absolute = np.tile(np.arange(7)[None], (2, 1)).astype("int32")
    # Within a document, shifted positions keep the scores: absolute ones
    # give the restart's outputs, and only positions moved within a
    # document change them.
    given = attention(inputs, inputs, segment_ids=segment_ids, positions=absolute)
    close(given, restarted, 1e-5)
    jumbled = absolute.copy()
    jumbled[:, 4] = 20
    moved = attention(inputs, inputs, segment_ids=segment_ids, positions=jumbled)
    assert np.abs(numpy(moved) - numpy(restarted)).max() > 1e-3


def test_positions_without_a_rotary_encoding_are_refused():
    inputs = x()
    with pytest.raises(ValueError, match="`positions` are the rotary encoding's"):
        layer()(inputs, inputs, positions=np.zeros((2, 7), "int32"))
