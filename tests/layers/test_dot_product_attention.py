import numpy as np
import pytest
from keras import ops

from keras_attention.layers import DotProductAttention
from tests import numpy_reference as ref
from tests.layers.attention_cases import run_score_layer_test

rng = np.random.default_rng(1)
Q = rng.normal(size=(2, 3, 64)).astype("float32")
V = rng.normal(size=(2, 4, 64)).astype("float32")


@pytest.mark.parametrize("scale, factor", [(False, 1.0), (True, 1 / 8), (0.25, 0.25)])
def test_matches_numpy(scale, factor):
    out, w = DotProductAttention(scale=scale)([Q, V], return_attention_scores=True)
    want_w = ref.softmax(factor * ref.dot(Q, V))
    np.testing.assert_allclose(ops.convert_to_numpy(w), want_w, atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ref.attend(want_w, V), atol=1e-4
    )


def test_seed_worked_example():
    q = np.ones((1, 1, 64), "float32")
    k = np.stack([np.full(64, 112 / 64), np.full(64, 96 / 64)])[None].astype("float32")
    v = np.array([[[1.0, 0.0], [0.0, 1.0]]], "float32")
    out, w = DotProductAttention(scale=True)([q, v, k], return_attention_scores=True)
    np.testing.assert_allclose(ops.convert_to_numpy(w), [[[0.8808, 0.1192]]], atol=1e-4)
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), [[[0.8808, 0.1192]]], atol=1e-4
    )


def test_query_key_size_mismatch_names_both_sizes():
    with pytest.raises(
        ValueError, match=r"`query` \(64\).*`key` \(3\).*Multiplicative"
    ):
        DotProductAttention()([Q, V[..., :3]])


@pytest.mark.parametrize("scale", [-1.0, 0, "yes"])
def test_invalid_scale(scale):
    with pytest.raises(ValueError, match="`scale` must be a bool or a positive"):
        DotProductAttention(scale=scale)


@pytest.mark.parametrize("scale", [False, True])
def test_keeps_the_layer_contract(scale):
    run_score_layer_test(DotProductAttention, scale=scale)


def test_keras_attention_arguments_and_config_load_unchanged():
    """Code written for `keras.layers.Attention` with its defaults changes the
    class name only, and its saved config loads (it always holds `score_mode`
    and `use_scale`)."""
    import keras

    theirs = keras.layers.Attention(dropout=0.0)
    ours = DotProductAttention.from_config(theirs.get_config())
    assert ours.scale is False and ours.name == theirs.name
    named = DotProductAttention(score_mode="dot", use_scale=False)
    for layer in (ours, named):
        np.testing.assert_allclose(
            ops.convert_to_numpy(layer([Q, V])),
            ops.convert_to_numpy(theirs([Q, V])),
            atol=1e-5,
        )
    assert "score_mode" not in ours.get_config()


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"score_mode": "concat"}, r"received score_mode='concat'.*AdditiveAttention"),
        ({"use_scale": True}, r"received use_scale=True.*scale=<float>"),
    ],
)
def test_keras_attention_arguments_without_a_counterpart_name_the_one_to_use(
    arguments, message
):
    with pytest.raises(ValueError, match=message):
        DotProductAttention(**arguments)
