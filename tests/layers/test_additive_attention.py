import numpy as np
import pytest
from keras import ops

from keras_attention.layers import AdditiveAttention
from tests import numpy_reference as ref
from tests.layers.attention_cases import run_score_layer_test

rng = np.random.default_rng(3)
Q = rng.normal(size=(2, 3, 4)).astype("float32")
V = rng.normal(size=(2, 5, 6)).astype("float32")


@pytest.mark.parametrize("use_bias", [False, True])
def test_matches_numpy_bahdanau_score(use_bias):
    layer = AdditiveAttention(units=8, use_bias=use_bias)
    out, w = layer([Q, V], return_attention_scores=True)
    weights = [ops.convert_to_numpy(x) for x in (layer.query_kernel, layer.key_kernel)]
    v = ops.convert_to_numpy(layer.score_vector)
    b = ops.convert_to_numpy(layer.bias) + 0.5 if use_bias else None
    if use_bias:
        layer.bias.assign(b)
        out, w = layer([Q, V], return_attention_scores=True)
    want_w = ref.softmax(ref.additive(Q, V, *weights, v, b))
    np.testing.assert_allclose(ops.convert_to_numpy(w), want_w, atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ref.attend(want_w, V), atol=1e-5
    )


def test_units_default_to_key_size():
    layer = AdditiveAttention()
    layer([Q, V])
    assert tuple(layer.score_vector.shape) == (6,)


@pytest.mark.parametrize("units", [0, -3, 2.5])
def test_non_positive_units_rejected(units):
    with pytest.raises(ValueError, match=r"`units` must be a positive integer"):
        AdditiveAttention(units=units)


def test_keeps_the_layer_contract():
    run_score_layer_test(AdditiveAttention, units=6, use_bias=True)
