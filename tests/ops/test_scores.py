import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from tests import numpy_reference as ref

rng = np.random.default_rng(0)
Q = rng.normal(size=(2, 3, 4)).astype("float32")
K = rng.normal(size=(2, 5, 4)).astype("float32")
K6 = rng.normal(size=(2, 5, 6)).astype("float32")


def to_numpy(x):
    return ops.convert_to_numpy(x)


def test_seed_worked_example_scaled_dot_product():
    # The seeds' "Thinking Machines" example: q.k1 = 112, q.k2 = 96, d_k = 64,
    # scaled by sqrt(64) = 8 to 14 and 12, softmax 0.88 and 0.12.
    q = np.ones((1, 1, 64), "float32")
    k = np.stack([np.full(64, 112 / 64), np.full(64, 96 / 64)])[None].astype("float32")
    raw = to_numpy(ka_ops.dot_score(q, k))
    np.testing.assert_allclose(raw, [[[112.0, 96.0]]], rtol=1e-6)
    scaled = to_numpy(ka_ops.scaled_dot_score(q, k))
    np.testing.assert_allclose(scaled, [[[14.0, 12.0]]], rtol=1e-6)
    weights = to_numpy(ka_ops.masked_softmax(scaled))
    np.testing.assert_allclose(np.round(weights, 2), [[[0.88, 0.12]]])


def test_dot_score():
    np.testing.assert_allclose(
        to_numpy(ka_ops.dot_score(Q, K)), ref.dot(Q, K), rtol=1e-5, atol=1e-6
    )


def test_scaled_dot_score_custom_scale():
    got = to_numpy(ka_ops.scaled_dot_score(Q, K, scale=0.3))
    np.testing.assert_allclose(got, 0.3 * ref.dot(Q, K), rtol=1e-5, atol=1e-6)


def test_general_score_compares_different_sizes():
    w = rng.normal(size=(4, 6)).astype("float32")
    got = to_numpy(ka_ops.general_score(Q, K6, w))
    np.testing.assert_allclose(got, ref.general(Q, K6, w), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_bias", [False, True])
def test_additive_score_is_the_concat_form(with_bias):
    w1 = rng.normal(size=(4, 3)).astype("float32")
    w2 = rng.normal(size=(6, 3)).astype("float32")
    v = rng.normal(size=(3,)).astype("float32")
    b = rng.normal(size=(3,)).astype("float32") if with_bias else None
    got = to_numpy(ka_ops.additive_score(Q, K6, w1, w2, v, bias=b))
    np.testing.assert_allclose(got, ref.additive(Q, K6, w1, w2, v, b), atol=1e-5)


def test_cosine_score_ignores_norms():
    got = to_numpy(ka_ops.cosine_score(Q, K, sharpness=3.0))
    np.testing.assert_allclose(got, ref.cosine(Q, K, 3.0), atol=1e-5)
    scaled = to_numpy(ka_ops.cosine_score(10 * Q, 0.1 * K, sharpness=3.0))
    np.testing.assert_allclose(scaled, got, atol=1e-5)


def test_cosine_score_of_zero_vector_is_zero_not_nan():
    q = np.zeros((1, 1, 4), "float32")
    got = to_numpy(ka_ops.cosine_score(q, K[:1]))
    assert np.all(got == 0.0)


def test_location_score_uses_only_the_query():
    w = rng.normal(size=(4, 8)).astype("float32")
    got = to_numpy(ka_ops.location_score(Q, w, key_length=5))
    np.testing.assert_allclose(got, (Q @ w)[..., :5], rtol=1e-5, atol=1e-6)


def test_location_score_rejects_longer_sources():
    w = np.zeros((4, 3), "float32")
    with pytest.raises(ValueError, match=r"key length \(5\).*max_length=3"):
        ka_ops.location_score(Q, w, key_length=5)


def test_get_score_function_and_unknown_name():
    assert ka_ops.get_score_function("dot") is ka_ops.dot_score
    with pytest.raises(ValueError, match=r"Unknown `score`: 'bilinear'.*'additive'"):
        ka_ops.get_score_function("bilinear")


def test_mismatched_depth_is_rejected_with_shapes():
    with pytest.raises(ValueError, match=r"`query` \(4\).*`key` \(6\)"):
        ka_ops.dot_score(Q, K6)


def test_rank_one_query_is_rejected():
    with pytest.raises(ValueError, match="`query` must have rank"):
        ka_ops.dot_score(np.zeros(4, "float32"), K)


def test_kernel_of_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match=r"`kernel` must have shape \(4, 6\)"):
        ka_ops.general_score(Q, K6, np.zeros((6, 4), "float32"))
