import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import AttentionPooling
from tests import numpy_reference as ref
from tests.layer_test import run_layer_test

rng = np.random.default_rng(3)
H = rng.normal(size=(2, 5, 6)).astype("float32")
MASK = np.array([[True] * 5, [True, True, True, False, False]])


def numpy_pooling(layer, inputs, mask=None):
    kernel, bias, context = (
        ops.convert_to_numpy(w)
        for w in (layer.kernel, layer.bias, layer.context_vector)
    )
    scores = np.tanh(inputs @ kernel + bias) @ context
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = ref.softmax(scores)
    return (weights[..., None] * inputs).sum(1), weights


def test_matches_the_han_formula():
    layer = AttentionPooling(units=4)
    layer.build(H.shape)
    layer.bias.assign(np.linspace(-1, 1, 4).astype("float32"))
    pooled, weights = layer(H, mask=MASK, return_attention_scores=True)
    want_pooled, want_weights = numpy_pooling(layer, H, MASK)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), want_weights, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(pooled), want_pooled, atol=1e-5)
    assert ops.convert_to_numpy(weights)[1, 3:].tolist() == [0.0, 0.0]


def test_padding_values_do_not_matter():
    layer = AttentionPooling()
    noisy = H.copy()
    noisy[1, 3:] = 100.0
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(H, mask=MASK)),
        ops.convert_to_numpy(layer(noisy, mask=MASK)),
        atol=1e-5,
    )


def test_fully_masked_sequence_pools_to_zeros():
    layer = AttentionPooling()
    mask = np.zeros((2, 5), bool)
    pooled, weights = layer(H, mask=mask, return_attention_scores=True)
    assert np.all(ops.convert_to_numpy(pooled) == 0)
    assert np.all(ops.convert_to_numpy(weights) == 0)


def test_consumes_the_keras_mask():
    inputs = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, 6, mask_zero=True)(inputs)
    pooled, weights = AttentionPooling(units=3)(x, return_attention_scores=True)
    model = keras.Model(inputs, [pooled, weights])
    _, w = model.predict(np.array([[4, 5, 0, 0]]), verbose=0)
    assert w[0, 2:].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(w.sum(), 1.0, atol=1e-6)


def test_output_shapes_with_unknown_sizes_and_no_bias():
    layer = AttentionPooling(units=4, use_bias=False, kernel_regularizer="l2")
    assert layer.compute_output_shape((None, 7, 6)) == (None, 6)
    assert layer.compute_output_shape((None, 7, 6), return_attention_scores=True) == (
        (None, 6),
        (None, 7),
    )
    layer.build((None, 7, 6))
    assert layer.bias is None


@pytest.mark.parametrize("use_bias", [True, False])
def test_keeps_the_layer_contract(use_bias):
    # The second example is fully masked: it pools to zeros with zero weights.
    run_layer_test(
        AttentionPooling,
        {"units": 4, "use_bias": use_bias, "kernel_regularizer": "l2"},
        H,
        {"return_attention_scores": True},
        expected_output_shape=[(2, 6), (2, 5)],
        masks={"mask": np.array([[True, True, True, False, False], [False] * 5])},
        masked_zeros=lambda out: (out[0][1], out[1][1]),
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: AttentionPooling()(H[0]), r"rank 3.*\(5, 6\)"),
        (lambda: AttentionPooling()(H, mask=np.ones((2, 4), bool)), "mask"),
        (lambda: AttentionPooling(units=0), "`units` must be a positive integer"),
    ],
)
def test_bad_input_is_rejected(call, message):
    with pytest.raises(ValueError, match=message):
        call()
