import keras
import numpy as np
import pytest

from keras_attention.layers import (
    AdditiveAttention,
    AttentionRNNCell,
    DotProductAttention,
    MultiplicativeAttention,
)
from tests.layer_test import run_layer_test


def as_numpy(x):
    # Detaches torch tensors that require grad, which np.asarray cannot.
    return keras.tree.map_structure(keras.ops.convert_to_numpy, x)


def make_cell(style="bahdanau", attention=None, cell=None, gate=False, dtype=None):
    return AttentionRNNCell(
        cell or keras.layers.GRUCell(8, dtype=dtype),
        attention or AdditiveAttention(units=6, dtype=dtype),
        memory_dim=8,
        style=style,
        gate=gate,
        dtype=dtype,
    )


def run(cell, memory, mask=None, steps=3):
    rnn = keras.layers.RNN(cell, return_sequences=True)
    inputs = np.random.default_rng(0).normal(size=(2, steps, 5)).astype("float32")
    initial = cell.get_initial_state_from_memory(
        memory, [np.zeros((2, 8), "float32")] * cell.num_cell_states, mask
    )
    outputs = rnn(inputs, initial_state=initial)
    return as_numpy(outputs), inputs, as_numpy(initial)


MEMORY = np.random.default_rng(1).normal(size=(2, 4, 8)).astype("float32")


@pytest.mark.parametrize("style, size", [("bahdanau", 8 + 8), ("luong", 8)])
def test_output_size_per_style(style, size):
    outputs, _, _ = run(make_cell(style), MEMORY)
    assert outputs.shape == (2, 3, size)


def test_bahdanau_step_follows_the_paper():
    # c_t from the previous state, the cell reads [y; c_t], output [s_t; c_t].
    cell = make_cell("bahdanau")
    _, inputs, initial = run(cell, MEMORY, steps=1)
    output, _, weights = as_numpy(cell.step(inputs[:, 0], initial))
    context, expected_weights = as_numpy(
        cell.attention([initial[0], MEMORY], return_attention_scores=True)
    )
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    hidden, _ = as_numpy(
        cell.cell(np.concatenate([inputs[:, 0], context], -1), [initial[0]])
    )
    np.testing.assert_allclose(output, np.concatenate([hidden, context], -1), atol=1e-5)


@pytest.mark.parametrize("style", ["bahdanau", "luong"])
def test_gate_scales_the_context_by_a_sigmoid_of_the_attending_state(style):
    # Xu et al. (2015): c_t = beta_t * attend(s, H), beta_t = sigmoid(w^T s + b).
    gated = make_cell(style, gate=True)
    _, inputs, initial = run(gated, MEMORY, steps=1)
    state = initial[0]
    query = state
    if style == "luong":
        query, _ = as_numpy(
            gated.cell(np.concatenate([inputs[:, 0], initial[1]], -1), [state])
        )
    context, _ = as_numpy(gated._attend(query, *initial[-3:-1], np.ones((2, 4), bool)))
    plain = gated.attention([query, MEMORY])
    beta = 1 / (1 + np.exp(-(as_numpy(query) @ as_numpy(gated.gate_dense.kernel))))
    np.testing.assert_allclose(context, beta * as_numpy(plain), atol=1e-5)


def test_luong_step_feeds_the_attentional_vector():
    cell = make_cell("luong", MultiplicativeAttention())
    _, inputs, initial = run(cell, MEMORY, steps=1)
    output, states, _ = as_numpy(cell.step(inputs[:, 0], initial))
    np.testing.assert_allclose(states[1], output)  # h~_t becomes next step's feed
    hidden, _ = as_numpy(
        cell.cell(np.concatenate([inputs[:, 0], initial[1]], -1), [initial[0]])
    )
    context = as_numpy(cell.attention([hidden, MEMORY]))
    expected = np.tanh(
        np.concatenate([context, hidden], -1) @ as_numpy(cell.combine.kernel)
    )
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_masked_memory_gets_no_weight_and_empty_memory_gives_zero_context():
    mask = np.array([[True, True, False, False], [False, False, False, False]])
    cell = make_cell("luong", DotProductAttention())
    _, inputs, initial = run(cell, MEMORY, mask, steps=1)
    _, _, weights = as_numpy(cell.step(inputs[:, 0], initial))
    assert np.all(weights[0, 2:] == 0) and np.isclose(weights[0].sum(), 1)
    assert np.all(weights[1] == 0)


def test_lstm_cell_and_config_round_trip():
    cell = make_cell("luong", cell=keras.layers.LSTMCell(8))
    outputs, _, _ = run(cell, MEMORY)
    clone = AttentionRNNCell.from_config(cell.get_config())
    assert clone.style == "luong" and clone.num_cell_states == 2
    assert isinstance(clone.attention, AdditiveAttention)
    assert np.all(np.isfinite(outputs))


def test_bad_arguments():
    with pytest.raises(ValueError, match="style"):
        make_cell("monotonic")
    with pytest.raises(ValueError, match="score-attention"):
        AttentionRNNCell(keras.layers.GRUCell(4), keras.layers.Dense(3), memory_dim=4)
    with pytest.raises(ValueError, match="memory"):
        make_cell().get_initial_state_from_memory(
            np.zeros((2, 4, 5)), [np.zeros((2, 8))]
        )
    with pytest.raises(ValueError, match="state"):
        make_cell().get_initial_state_from_memory(MEMORY, [])


def contract_states(style):
    """A step's states over MEMORY, whose second example is fully masked."""
    mask = np.array([[True, True, True, False], [False] * 4])
    helper = make_cell(style)
    return as_numpy(
        helper.get_initial_state_from_memory(
            MEMORY, [np.zeros((2, 8), "float32")] * helper.num_cell_states, mask
        )
    )


@pytest.mark.parametrize("style", ["bahdanau", "luong"])
def test_keeps_the_layer_contract(style):
    # One step on states made by another cell of the same config (the harness
    # makes fresh cells); the fully masked memory must give finite outputs.
    inputs = np.random.default_rng(2).normal(size=(2, 5)).astype("float32")
    run_layer_test(
        make_cell,
        {"style": style, "gate": True},
        inputs,
        {"states": contract_states(style)},
        expected_output_shape=[(2, 16 if style == "bahdanau" else 8)]
        + [tuple(s.shape) for s in contract_states(style)],
    )


def test_a_built_cell_survives_keras_serialization():
    cell = make_cell(gate=True)
    cell(np.zeros((2, 5), "float32"), contract_states("bahdanau"))
    revived = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(cell)
    )
    assert revived.get_config() == cell.get_config()


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's symbolic sizes")
def test_symbolic_step_with_an_unknown_batch_size_on_jax():
    states = [keras.Input(s.shape[1:]) for s in contract_states("bahdanau")]
    output, _ = make_cell()(keras.Input((5,)), states)
    assert tuple(output.shape) == (None, 16)
