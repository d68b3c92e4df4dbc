import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import RotaryEmbedding
from tests import numpy_reference as ref
from tests.layer_test import run_layer_test


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.mark.parametrize(
    "shape, init_kwargs",
    [
        ((2, 6, 8), {}),
        ((2, 5, 3, 6), {"max_wavelength": 100}),
        ((1, 7, 2, 4), {"scaling_factor": 2.5}),
    ],
    ids=["3d", "4d", "scaled"],
)
def test_matches_the_numpy_formula(shape, init_kwargs):
    x = normal(*shape)
    got = np_(RotaryEmbedding(**init_kwargs)(x))
    np.testing.assert_allclose(got, ref.rotary(x, **init_kwargs), atol=1e-5)


def test_position_zero_is_the_identity_and_norms_are_kept():
    x = normal(2, 9, 3, 8)
    got = np_(RotaryEmbedding()(x))
    np.testing.assert_allclose(got[:, 0], x[:, 0], atol=1e-6)
    # A rotation of each pair keeps the pair's length.
    pairs = np.hypot(x[..., :4], x[..., 4:])
    np.testing.assert_allclose(np.hypot(got[..., :4], got[..., 4:]), pairs, atol=1e-5)


HUB_CASES = {
    "default": ({}, (2, 7, 3, 16), {}),
    "linear": ({"max_wavelength": 1000, "scaling_factor": 2.0}, (2, 7, 16), {}),
    "dynamic": (
        {"scaling_factor": 4.0, "rope_type": "dynamic"},
        (2, 7, 2, 8),
        {"start_index": 50},
    ),
    "yarn": (
        {
            "scaling_factor": 8.0,
            "rope_type": "yarn",
            "original_max_position_embeddings": 64,
        },
        (2, 9, 2, 32),
        {"start_index": 100},
    ),
    "yarn_untruncated": (
        {
            "scaling_factor": 8.0,
            "rope_type": "yarn",
            "truncate": False,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "original_max_position_embeddings": 256,
        },
        (1, 5, 64),
        {},
    ),
    "denominator_dim": ({"denominator_dim": 32}, (2, 5, 2, 16), {}),
    "permuted_axes": ({"sequence_axis": -1, "feature_axis": -2}, (2, 8, 5), {}),
    "heads_first": ({"sequence_axis": 2, "feature_axis": 1}, (2, 8, 5, 3), {}),
    "batched_positions": (
        {},
        (2, 4, 2, 8),
        {"positions": np.array([[3, 1, 4, 1], [5, 9, 2, 6]])},
    ),
    "shared_positions": ({}, (2, 4, 2, 8), {"positions": np.array([3, 1, 4, 999])}),
}


@pytest.mark.parametrize("case", sorted(HUB_CASES))
def test_matches_keras_hub(case):
    keras_hub = pytest.importorskip("keras_hub")
    init_kwargs, shape, call_kwargs = HUB_CASES[case]
    x = normal(*shape)
    want = np_(keras_hub.layers.RotaryEmbedding(**init_kwargs)(x, **call_kwargs))
    got = np_(RotaryEmbedding(**init_kwargs)(x, **call_kwargs))
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_scores_depend_only_on_the_offset():
    # The same query vector at every position m and the same key vector at
    # every position n: the score of (m, n) must depend on m - n alone.
    length, depth = 12, 16
    query = np.tile(normal(1, 1, 2, depth, seed=1), (1, length, 1, 1))
    key = np.tile(normal(1, 1, 2, depth, seed=2), (1, length, 1, 1))
    layer = RotaryEmbedding()

    def scores(start_index):
        q = np_(layer(query, start_index=start_index))[0]
        k = np_(layer(key, start_index=start_index))[0]
        return np.einsum("tnh,snh->nts", q, k)

    base = scores(0)
    # Shifting both positions by the same amount changes nothing...
    np.testing.assert_allclose(scores(37), base, atol=1e-4)
    np.testing.assert_allclose(base[:, 1:, 1:], base[:, :-1, :-1], atol=1e-4)
    # ...while the offset itself matters.
    assert not np.allclose(base[:, 0, 0], base[:, 0, 3], atol=1e-2)


def test_start_index_equals_slicing_a_longer_sequence():
    layer = RotaryEmbedding()
    x = normal(2, 10, 3, 8)
    full = np_(layer(x))
    for start in (0, 4, 9):
        part = np_(layer(x[:, start : start + 1], start_index=start))
        np.testing.assert_allclose(part, full[:, start : start + 1], atol=1e-6)
    middle = np_(layer(x[:, 3:7], start_index=ops.convert_to_tensor(3)))
    np.testing.assert_allclose(middle, full[:, 3:7], atol=1e-6)


def test_positions_pick_rows_per_example():
    layer = RotaryEmbedding()
    table = normal(1, 10, 2, 8)
    full = np_(layer(np.tile(table, (2, 1, 1, 1))))
    positions = np.array([[0, 5, 9], [7, 7, 2]])
    x = np.stack([table[0, row] for row in positions])
    got = np_(layer(x, positions=positions))
    np.testing.assert_allclose(got, full[[[0], [1]], positions], atol=1e-6)
    # One row of positions is shared by the batch; start_index is ignored.
    shared = np_(layer(x, positions=np.array([7, 7, 2]), start_index=4))
    np.testing.assert_allclose(shared[1], got[1], atol=1e-6)


def test_permuted_axes_rotate_the_same_way():
    x = normal(2, 6, 3, 8)
    want = np_(RotaryEmbedding()(x))
    layer = RotaryEmbedding(sequence_axis=2, feature_axis=1)
    got = np_(layer(np.transpose(x, (0, 3, 1, 2))))
    np.testing.assert_allclose(np.transpose(got, (0, 2, 3, 1)), want, atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_angles_stay_exact_under_mixed_precision(policy):
    # At position 3000 an angle computed in half precision would be off by
    # several radians; computed in float32 only the rounding of the result
    # remains.
    x = normal(1, 2, 1, 8)
    got = RotaryEmbedding(dtype=policy)(x, start_index=3000)
    assert keras.backend.standardize_dtype(got.dtype) == policy.split("_")[1]
    want = ref.rotary(x, positions=[3000, 3001])
    np.testing.assert_allclose(np_(got), want, atol=0.05 * np.abs(x).max())


def test_symbolic_shapes_and_mask_pass_through():
    outputs = RotaryEmbedding()(keras.Input((None, 4, 8)))
    assert tuple(outputs.shape) == (None, None, 4, 8)
    layer = RotaryEmbedding()
    mask = np.array([[True, True, False]])
    assert layer.compute_mask(normal(1, 3, 4), mask) is mask
    layer.build((2, 3, 4))
    assert layer.built and not layer.weights


@pytest.mark.parametrize(
    "init_kwargs",
    [{}, {"max_wavelength": 500, "scaling_factor": 2.0, "rope_type": "dynamic"}],
    ids=["default", "dynamic"],
)
def test_keeps_the_layer_contract(init_kwargs):
    x = normal(2, 5, 3, 8)
    out = run_layer_test(
        RotaryEmbedding, init_kwargs, x, expected_output_shape=(2, 5, 3, 8)
    )
    np.testing.assert_allclose(out[:, 0], x[:, 0], atol=1e-6)


def test_keeps_the_layer_contract_with_positions():
    x = normal(2, 4, 8)
    positions = np.array([[0, 1, 2, 3], [9, 4, 0, 1]], "int32")
    run_layer_test(
        RotaryEmbedding,
        {"rope_type": "yarn", "scaling_factor": 4.0},
        x,
        {"positions": positions},
        expected_output_shape=(2, 4, 8),
    )


@pytest.mark.parametrize(
    "init_kwargs, message",
    [
        ({"max_wavelength": 0}, r"`max_wavelength` must be a positive.*=0"),
        ({"max_wavelength": -5.0}, r"max_wavelength=-5.0"),
        ({"scaling_factor": 0.0}, r"`scaling_factor` must be a positive.*=0.0"),
        ({"rope_type": "ntk"}, r"Unknown `rope_type`: 'ntk'.*dynamic.*linear.*yarn"),
        ({"sequence_axis": 2, "feature_axis": 2}, r"sequence_axis=2 and feature_axis"),
        ({"feature_axis": 1.5}, r"`feature_axis` must be an integer axis.*1.5"),
        ({"truncate": "yes"}, r"`truncate` must be a bool; received 'yes'"),
        ({"denominator_dim": 0}, r"`denominator_dim` must be a positive"),
    ],
)
def test_invalid_config(init_kwargs, message):
    with pytest.raises(ValueError, match=message):
        RotaryEmbedding(**init_kwargs)


def test_invalid_inputs():
    layer = RotaryEmbedding()
    with pytest.raises(ValueError, match=r"known, even size.*\(2, 4, 7\)"):
        layer(normal(2, 4, 7))
    with pytest.raises(ValueError, match=r"`inputs` must have rank 3 or 4.*rank 2"):
        RotaryEmbedding()(normal(4, 8))
    with pytest.raises(ValueError, match=r"`positions` must have rank 1 or 2.*rank 3"):
        layer(normal(2, 4, 8), positions=np.zeros((2, 4, 1)))
    with pytest.raises(ValueError, match=r"batch on axis 0"):
        RotaryEmbedding(sequence_axis=0)(normal(4, 2, 8), positions=np.zeros((2, 4)))
    # keras-hub's symmetric case, axes that coincide only for this rank.
    with pytest.raises(ValueError, match=r"sequence_axis=-1 and feature_axis=1"):
        RotaryEmbedding(sequence_axis=-1, feature_axis=1)(normal(3, 4))


def test_numpy_scalars_in_the_config_become_python_numbers():
    layer = RotaryEmbedding(max_wavelength=np.int64(500), feature_axis=np.int32(-1))
    config = layer.get_config()
    assert config["max_wavelength"] == 500 and type(config["max_wavelength"]) is int
    assert type(config["feature_axis"]) is int


def test_segment_ids_rotate_each_document_from_position_zero():
    x = normal(2, 6, 2, 8)
    ids = np.array([[1, 1, 1, 2, 2, 2], [4, 4, 4, 4, 4, 5]])
    want = np.array([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 4, 0]])
    rope = RotaryEmbedding()
    np.testing.assert_allclose(
        np_(rope(x, segment_ids=ids)), np_(rope(x, positions=want)), atol=1e-6
    )
    with pytest.raises(ValueError, match="either `positions` or `segment_ids`"):
        rope(x, segment_ids=ids, positions=want)
