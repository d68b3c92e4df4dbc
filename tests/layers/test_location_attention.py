import numpy as np
import pytest
from keras import ops

from keras_attention.layers import LocationAttention
from tests import numpy_reference as ref
from tests.layers.attention_cases import run_score_layer_test

rng = np.random.default_rng(5)
Q = rng.normal(size=(2, 3, 4)).astype("float32")
V = rng.normal(size=(2, 5, 6)).astype("float32")


def test_weights_are_softmax_of_projected_query():
    layer = LocationAttention(max_length=8, use_bias=True)
    layer([Q, V])
    layer.bias.assign(np.linspace(-1, 1, 8).astype("float32"))
    out, w = layer([Q, V], return_attention_scores=True)
    logits = Q @ ops.convert_to_numpy(layer.kernel) + ops.convert_to_numpy(layer.bias)
    want_w = ref.softmax(logits[..., :5])
    np.testing.assert_allclose(ops.convert_to_numpy(w), want_w, atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ref.attend(want_w, V), atol=1e-5
    )


def test_keys_are_ignored():
    layer = LocationAttention(max_length=8)
    a = layer([Q, V, V])
    b = layer([Q, V, -3 * V + 1])
    np.testing.assert_allclose(ops.convert_to_numpy(a), ops.convert_to_numpy(b))


def test_source_longer_than_max_length_rejected():
    with pytest.raises(ValueError, match=r"max_length=4.*length 5"):
        LocationAttention(max_length=4)([Q, V])


@pytest.mark.parametrize("max_length", [0, -1, None])
def test_invalid_max_length(max_length):
    with pytest.raises(ValueError, match="`max_length` must be a positive integer"):
        LocationAttention(max_length=max_length)


def test_keeps_the_layer_contract():
    run_score_layer_test(LocationAttention, max_length=9, use_bias=True)
