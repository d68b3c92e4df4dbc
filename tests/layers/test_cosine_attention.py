import numpy as np
import pytest
from keras import ops

from keras_attention.layers import CosineAttention
from tests import numpy_reference as ref
from tests.layers.attention_cases import run_score_layer_test

rng = np.random.default_rng(4)
Q = rng.normal(size=(2, 3, 4)).astype("float32")
V = rng.normal(size=(2, 5, 4)).astype("float32")


def test_matches_numpy_with_sharpness():
    out, w = CosineAttention(sharpness=3.0)([Q, V], return_attention_scores=True)
    want_w = ref.softmax(ref.cosine(Q, V, 3.0))
    np.testing.assert_allclose(ops.convert_to_numpy(w), want_w, atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ref.attend(want_w, V), atol=1e-5
    )


def test_sharpness_trainable_flag():
    learned = CosineAttention()
    learned([Q, V])
    assert len(learned.trainable_weights) == 1
    fixed = CosineAttention(trainable_sharpness=False)
    fixed([Q, V])
    assert not fixed.trainable_weights


def test_scaling_the_inputs_does_not_change_the_weights():
    layer = CosineAttention()
    _, w = layer([Q, V], return_attention_scores=True)
    _, w2 = layer([5 * Q, V / 3], return_attention_scores=True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(w2), ops.convert_to_numpy(w), atol=1e-5
    )


def test_size_mismatch_and_bad_config_rejected():
    with pytest.raises(ValueError, match=r"`query` \(4\).*`key` \(3\)"):
        CosineAttention()([Q, V[..., :3]])
    with pytest.raises(ValueError, match="`epsilon` must be positive"):
        CosineAttention(epsilon=0)
    with pytest.raises(ValueError, match="`sharpness` must be a float"):
        CosineAttention(sharpness="high")


def test_keeps_the_layer_contract():
    run_score_layer_test(CosineAttention, sharpness=4.0)
