import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import SelfAttention2D
from tests import numpy_reference as ref
from tests.layer_test import run_layer_test

rng = np.random.default_rng(5)
X = rng.normal(size=(2, 4, 6, 16)).astype("float32")


def kernel(projection):
    """The (C_in, C_out) matrix of a 1x1 convolution, spectral norm or not."""
    layer = getattr(projection, "layer", projection)
    return ops.convert_to_numpy(layer.kernel)[0, 0]


def numpy_self_attention(layer, x):
    """SAGAN's formula: beta_ji = softmax_i(f(x_i)^T g(x_j)),
    o_j = v(sum_i beta_ji h(x_i)), y = gamma * o + x."""
    b, h, w, c = x.shape
    flat = x.reshape(b, h * w, c)
    queries = flat @ kernel(layer.query_projection)
    keys = flat @ kernel(layer.key_projection)
    values = flat @ kernel(layer.value_projection)
    weights = ref.softmax(queries @ keys.transpose(0, 2, 1))
    outputs = (weights @ values) @ kernel(layer.output_projection)
    gamma = float(ops.convert_to_numpy(layer.gamma))
    return (gamma * outputs).reshape(b, h, w, c) + x, weights


def test_starts_as_the_identity():
    layer = SelfAttention2D()
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(X)), X)


def test_matches_the_sagan_formula():
    layer = SelfAttention2D()
    layer.build(X.shape)
    layer.gamma.assign(0.7)
    outputs, weights = layer(X, return_attention_scores=True)
    want_outputs, want_weights = numpy_self_attention(layer, X)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), want_weights, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), want_outputs, atol=1e-4)


def test_default_channels_follow_the_paper():
    layer = SelfAttention2D()
    layer.build(X.shape)
    assert kernel(layer.query_projection).shape == (16, 2)  # C / 8
    assert kernel(layer.key_projection).shape == (16, 2)
    assert kernel(layer.value_projection).shape == (16, 8)  # C / 2
    assert kernel(layer.output_projection).shape == (8, 16)


def test_each_query_position_attends_with_weights_summing_to_one():
    _, weights = SelfAttention2D(key_channels=4)(X, return_attention_scores=True)
    weights = ops.convert_to_numpy(weights)
    assert weights.shape == (2, 24, 24)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


def test_pooled_keys_divide_the_key_positions():
    layer = SelfAttention2D(pool_size=2)
    outputs, weights = layer(X, return_attention_scores=True)
    assert tuple(outputs.shape) == X.shape
    assert tuple(weights.shape) == (2, 24, 6)
    np.testing.assert_allclose(ops.convert_to_numpy(weights).sum(-1), 1.0, atol=1e-5)
    assert layer.compute_output_shape(X.shape, return_attention_scores=True) == (
        X.shape,
        (2, 24, 6),
    )


def test_spectral_normalization_keeps_the_largest_singular_value_near_one():
    layer = SelfAttention2D(spectral_normalization=True, kernel_initializer="ones")
    layer.build(X.shape)
    before = np.linalg.norm(kernel(layer.query_projection), 2)
    assert before > 3.0  # a matrix of ones is far from norm 1
    for _ in range(10):  # power iterations happen in training calls
        layer(X, training=True)
    for projection in (
        layer.query_projection,
        layer.key_projection,
        layer.value_projection,
        layer.output_projection,
    ):
        assert isinstance(projection, keras.layers.SpectralNormalization)
        np.testing.assert_allclose(
            np.linalg.norm(kernel(projection), 2), 1.0, atol=0.02
        )


def test_bad_inputs_and_configs_are_refused():
    with pytest.raises(ValueError, match="rank 4"):
        SelfAttention2D()(np.zeros((2, 5, 8), "float32"))
    with pytest.raises(ValueError, match="multiple of `pool_size`"):
        SelfAttention2D(pool_size=4)(X)
    with pytest.raises(ValueError, match="key_channels"):
        SelfAttention2D(key_channels=0)
    with pytest.raises(ValueError, match="pool_size"):
        SelfAttention2D(pool_size=1.5)


@pytest.mark.parametrize(
    "options",
    [
        {"spectral_normalization": True},
        {"key_channels": 4, "value_channels": 6, "pool_size": 2},
    ],
    ids=["spectral", "pooled"],
)
def test_keeps_the_layer_contract(options):
    pooled = options.get("pool_size", 1) ** 2
    run_layer_test(
        SelfAttention2D,
        options,
        X,
        {"return_attention_scores": True},
        expected_output_shape=[X.shape, (2, 24, 24 // pooled)],
    )


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_weights_still_sum_to_one(policy):
    # The harness checks dtypes and finiteness; this, that the half-precision
    # softmax is still a distribution.
    layer = SelfAttention2D(spectral_normalization=True, dtype=policy)
    _, weights = layer(X, return_attention_scores=True)
    weights = ops.convert_to_numpy(ops.cast(weights, "float32"))
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=2e-2)
