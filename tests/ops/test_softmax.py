import numpy as np
import pytest
from keras import backend, ops

from keras_attention.ops import masked_softmax
from tests import numpy_reference as ref


def test_matches_numpy_softmax():
    scores = np.random.default_rng(0).normal(size=(2, 3, 5)).astype("float32")
    mask = np.random.default_rng(1).random((2, 3, 5)) > 0.3
    mask[..., 0] = True
    got = ops.convert_to_numpy(masked_softmax(scores, mask))
    np.testing.assert_allclose(got, ref.softmax(scores, mask), atol=1e-6)


def test_masked_positions_get_exactly_zero():
    scores = np.array([[1.0, 2.0, 3.0, 100.0]], "float32")
    mask = np.array([[True, True, True, False]])
    got = ops.convert_to_numpy(masked_softmax(scores, mask))
    assert got[0, 3] == 0.0
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fully_masked_rows_give_zeros_not_nan(dtype):
    scores = ops.cast(np.array([[3.0, -2.0, 60000.0], [1.0, 2.0, 3.0]]), dtype)
    mask = np.array([[False, False, False], [True, False, True]])
    got = masked_softmax(scores, mask)
    assert ops.convert_to_numpy(ops.cast(got, "float32")).tolist()[0] == [0, 0, 0]
    assert backend.standardize_dtype(got.dtype) == dtype
    values = ops.convert_to_numpy(ops.cast(got, "float32"))
    assert np.all(np.isfinite(values))
    np.testing.assert_allclose(values[1].sum(), 1.0, atol=1e-2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_large_scores_do_not_overflow(dtype):
    # Scores near the float16 maximum: a naive "scores - 1e9" or "+ mask * -inf"
    # in float16 would overflow to -inf/NaN.
    scores = ops.cast(np.array([[65000.0, 64000.0, -65000.0]]), dtype)
    mask = np.array([[True, False, True]])
    got = ops.convert_to_numpy(ops.cast(masked_softmax(scores, mask), "float32"))
    np.testing.assert_allclose(got, [[1.0, 0.0, 0.0]], atol=1e-3)


def test_mask_of_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match=r"`mask` of shape \(2, 4\).*\(2, 3\)"):
        masked_softmax(np.zeros((2, 3), "float32"), np.ones((2, 4), bool))


def test_without_mask_is_plain_softmax():
    scores = np.array([[14.0, 12.0]], "float32")
    got = ops.convert_to_numpy(masked_softmax(scores))
    np.testing.assert_allclose(got, [[0.8808, 0.1192]], atol=1e-4)
