import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import PositionEmbedding, SinusoidalPositionEncoding
from tests import numpy_reference as ref
from tests.layer_test import run_layer_test


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def test_sinusoidal_matches_the_paper_formula():
    x = np.zeros((2, 50, 128), "float32")
    got = np_(SinusoidalPositionEncoding()(x))
    assert got.shape == (2, 50, 128)
    np.testing.assert_allclose(got[0], ref.sinusoidal(50, 128), atol=1e-5)
    np.testing.assert_array_equal(got[0], got[1])


def test_sinusoidal_first_positions_match_the_seed_table():
    # The seeds' table for depth 4: p1 = [0.841, 0.540, 0.010, 1.000].
    got = np_(SinusoidalPositionEncoding()(np.zeros((1, 4, 4), "float32")))[0]
    np.testing.assert_allclose(got[1], [0.841, 0.540, 0.010, 1.000], atol=1e-3)
    np.testing.assert_allclose(got[2, :2], [0.909, -0.416], atol=1e-3)


def test_sinusoidal_offset_is_a_rotation_of_each_frequency_pair():
    depth, length, k = 16, 40, 7
    pe = np_(SinusoidalPositionEncoding()(np.zeros((1, length + k, depth))))[0]
    frequencies = 1.0 / 10000 ** (np.arange(0, depth, 2) / depth)
    for pair, w in enumerate(frequencies):
        rotation = np.array(
            [[np.cos(w * k), np.sin(w * k)], [-np.sin(w * k), np.cos(w * k)]]
        )
        now = pe[:length, 2 * pair : 2 * pair + 2]  # (sin, cos) at pos
        later = pe[k : length + k, 2 * pair : 2 * pair + 2]  # at pos + k
        np.testing.assert_allclose(now @ rotation.T, later, atol=1e-4)


def test_sinusoidal_start_index_continues_the_sequence():
    layer = SinusoidalPositionEncoding()
    full = np_(layer(np.zeros((1, 10, 8), "float32")))
    step = np_(layer(np.zeros((1, 1, 8), "float32"), start_index=6))
    np.testing.assert_allclose(step[0, 0], full[0, 6], atol=1e-6)


def test_sinusoidal_positions_stay_exact_in_half_precision():
    layer = SinusoidalPositionEncoding(dtype="mixed_float16")
    got = layer(np.zeros((1, 1, 8), "float32"), start_index=3000)
    assert keras.backend.standardize_dtype(got.dtype) == "float16"
    want = ref.sinusoidal(1, 8, start=3000)
    np.testing.assert_allclose(np_(got)[0], want, atol=2e-3)


def test_sinusoidal_odd_depth():
    got = np_(SinusoidalPositionEncoding()(np.zeros((1, 5, 7), "float32")))
    np.testing.assert_allclose(got[0], ref.sinusoidal(5, 7), atol=1e-5)


def test_sinusoidal_invalid_config_and_rank():
    with pytest.raises(ValueError, match="max_wavelength"):
        SinusoidalPositionEncoding(max_wavelength=0)
    with pytest.raises(ValueError, match="`inputs` must have rank"):
        SinusoidalPositionEncoding()(np.zeros((4,), "float32"))


def test_position_embedding_returns_the_first_rows():
    layer = PositionEmbedding(sequence_length=10)
    got = np_(layer(np.zeros((3, 6, 4), "float32")))
    table = np_(layer.position_embeddings)
    assert got.shape == (3, 6, 4)
    np.testing.assert_array_equal(got[1], table[:6])
    step = np_(layer(np.zeros((3, 1, 4), "float32"), start_index=4))
    np.testing.assert_array_equal(step[0, 0], table[4])


def test_position_embedding_is_trained():
    inputs = keras.Input((5, 3))
    outputs = inputs + PositionEmbedding(5)(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.SGD(5.0), "mse")
    target = np.tile(np.arange(5, dtype="float32")[:, None], (8, 1, 3)) / 5
    first = model.evaluate(np.zeros((8, 5, 3)), target, verbose=0)
    model.fit(np.zeros((8, 5, 3)), target, epochs=30, verbose=0)
    assert model.evaluate(np.zeros((8, 5, 3)), target, verbose=0) < 0.01 * first


def test_position_embedding_too_long_and_bad_config():
    with pytest.raises(ValueError, match=r"sequence_length=5.*received 7"):
        PositionEmbedding(5)(np.zeros((1, 7, 4), "float32"))
    with pytest.raises(ValueError, match="`sequence_length` must be a positive"):
        PositionEmbedding(0)


@pytest.mark.parametrize(
    "layer_cls, init_kwargs",
    [(SinusoidalPositionEncoding, {}), (PositionEmbedding, {"sequence_length": 12})],
    ids=["sinusoidal", "learned"],
)
def test_keeps_the_layer_contract(layer_cls, init_kwargs):
    x = np.random.default_rng(0).normal(size=(2, 10, 8)).astype("float32")
    run_layer_test(layer_cls, init_kwargs, x, expected_output_shape=(2, 10, 8))


@pytest.mark.parametrize(
    "layer_cls, init_kwargs",
    [(SinusoidalPositionEncoding, {}), (PositionEmbedding, {"sequence_length": 12})],
    ids=["sinusoidal", "learned"],
)
def test_keeps_the_layer_contract_with_positions(layer_cls, init_kwargs):
    x = np.zeros((2, 3, 8), "float32")
    positions = np.array([[0, 1, 2], [5, 0, 11]], "int32")
    run_layer_test(
        layer_cls,
        init_kwargs,
        x,
        {"positions": positions},
        expected_output_shape=(2, 3, 8),
    )


def test_sinusoidal_encodes_given_positions_per_example():
    layer = SinusoidalPositionEncoding()
    x = np.zeros((2, 3, 6), "float32")
    positions = np.array([[0, 1, 2], [5, 0, 7]])
    got = np_(layer(x, positions=positions))
    table = np_(layer(np.zeros((1, 8, 6), "float32")))[0]
    np.testing.assert_allclose(got, table[positions], atol=1e-6)
    # A single row of positions is shared by the batch.
    np.testing.assert_allclose(np_(layer(x, positions=[5, 0, 7]))[0], got[1], atol=1e-6)


def test_sinusoidal_encodes_the_second_last_axis_of_any_rank():
    layer = SinusoidalPositionEncoding()
    x = np.random.default_rng(1).uniform(size=(2, 3, 4, 6)).astype("float32")
    got = np_(layer(x))
    assert got.shape == x.shape
    for grid in got.reshape(6, 4, 6):  # every leading index gets the same table
        np.testing.assert_allclose(grid, ref.sinusoidal(4, 6), atol=1e-6)


@pytest.mark.parametrize(
    "shape", [(100, 32), (None, 32), (None, 100, 32)], ids=["static", "dynamic", "4d"]
)
def test_sinusoidal_symbolic_output_keeps_the_input_shape(shape):
    outputs = SinusoidalPositionEncoding()(keras.Input(shape))
    assert tuple(outputs.shape) == (None, *shape)


def test_sinusoidal_has_no_weights():
    layer = SinusoidalPositionEncoding()
    layer.build((2, 4, 6))
    assert layer.built and not layer.weights and not layer.non_trainable_variables


def test_position_embedding_looks_up_given_positions_per_example():
    layer = PositionEmbedding(sequence_length=8)
    x = np.zeros((2, 3, 4), "float32")
    positions = np.array([[0, 1, 2], [5, 0, 7]])
    got = np_(layer(x, positions=positions))
    np.testing.assert_array_equal(got, np_(layer.position_embeddings)[positions])
    shared = np_(layer(x, positions=np.array([5, 0, 7])))
    np.testing.assert_array_equal(shared[0], got[1])


def test_position_embedding_table_has_keras_hubs_names():
    # keras-hub's own tests read the table as `layer.position_embeddings`
    # (e.g. `.numpy()[position]` for given positions); its weight is named
    # "embeddings". `embeddings`, this package's earlier attribute, is an alias.
    layer = PositionEmbedding(sequence_length=6)
    x = np.zeros((2, 4, 5), "float32")
    positions = np.array([[0, 0, 1, 2], [1, 2, 3, 0]])
    got = np_(layer(x, positions=positions))
    assert layer.trainable_weights == [layer.position_embeddings]
    assert layer.position_embeddings.name == "embeddings"
    assert layer.embeddings is layer.position_embeddings
    table = ops.convert_to_numpy(layer.position_embeddings.numpy())
    for example in range(2):
        for step, position in enumerate(positions[example]):
            np.testing.assert_array_equal(got[example, step], table[position])


def test_position_embedding_matches_keras_hub_with_its_table():
    keras_hub = pytest.importorskip("keras_hub")
    hub = keras_hub.layers.PositionEmbedding(sequence_length=6)
    ours = PositionEmbedding(sequence_length=6)
    x = np.zeros((2, 4, 5), "float32")
    want = np_(hub(x, start_index=1))
    ours.build(x.shape)
    # The same attribute and the same weight path below the layer.
    below_the_layer = [
        table.path.split("/", 1)[1]
        for table in (ours.position_embeddings, hub.position_embeddings)
    ]
    assert below_the_layer == ["embeddings", "embeddings"]
    ours.position_embeddings.assign(np_(hub.position_embeddings))
    np.testing.assert_array_equal(np_(ours(x, start_index=1)), want)


def test_sinusoidal_matches_keras_hub_sine_position_encoding():
    keras_hub = pytest.importorskip("keras_hub")
    x = np.zeros((2, 7, 10), "float32")
    want = np_(keras_hub.layers.SinePositionEncoding(max_wavelength=100)(x))
    got = np_(SinusoidalPositionEncoding(max_wavelength=100)(x))
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize(
    "layer", [lambda: SinusoidalPositionEncoding(), lambda: PositionEmbedding(8)]
)
def test_segment_ids_give_the_positions_inside_each_document(layer):
    layer = layer()
    x = np.zeros((2, 6, 4), "float32")
    ids = np.array([[1, 1, 1, 2, 2, 2], [4, 4, 4, 4, 4, 5]])
    want = np.array([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 4, 0]])
    np.testing.assert_allclose(
        np_(layer(x, segment_ids=ids)), np_(layer(x, positions=want)), atol=1e-6
    )
    with pytest.raises(ValueError, match=r"\(batch, 6\); received shape \(2, 5\)"):
        layer(x, segment_ids=ids[:, :5])
