import numpy as np
from keras import ops

from keras_attention.layers import MultiplicativeAttention
from tests import numpy_reference as ref
from tests.layers.attention_cases import run_score_layer_test

rng = np.random.default_rng(2)
Q = rng.normal(size=(2, 3, 4)).astype("float32")
V = rng.normal(size=(2, 5, 7)).astype("float32")


def test_matches_numpy_general_score_across_sizes():
    layer = MultiplicativeAttention()
    out, w = layer([Q, V], return_attention_scores=True)
    kernel = ops.convert_to_numpy(layer.kernel)
    assert kernel.shape == (4, 7)
    want_w = ref.softmax(ref.general(Q, V, kernel))
    np.testing.assert_allclose(ops.convert_to_numpy(w), want_w, atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ref.attend(want_w, V), atol=1e-5
    )


def test_regularizer_adds_a_loss():
    layer = MultiplicativeAttention(kernel_regularizer="l2")
    layer([Q, V])
    assert len(layer.losses) == 1


def test_keeps_the_layer_contract():
    run_score_layer_test(MultiplicativeAttention, kernel_regularizer="l2")
