import numpy as np
import pytest
from keras import ops

from keras_attention.ops import causal_mask, length_mask, merge_masks, padding_mask


def test_padding_mask_marks_real_tokens():
    mask = padding_mask(np.array([[5, 7, 0, 0], [1, 0, 0, 0]]))
    assert ops.convert_to_numpy(mask).tolist() == [
        [True, True, False, False],
        [True, False, False, False],
    ]


def test_padding_mask_custom_id():
    mask = ops.convert_to_numpy(padding_mask(np.array([[3, 9, 9]]), padding_id=9))
    assert mask.tolist() == [[True, False, False]]


def test_length_mask():
    mask = ops.convert_to_numpy(length_mask(np.array([2, 0, 3]), 3))
    assert mask.tolist() == [
        [True, True, False],
        [False, False, False],
        [True, True, True],
    ]


def test_length_mask_rejects_wrong_rank():
    with pytest.raises(ValueError, match="lengths.*rank 1"):
        length_mask(np.array([[2]]), 3)


def test_causal_mask_is_lower_triangular():
    mask = ops.convert_to_numpy(causal_mask(4))
    np.testing.assert_array_equal(mask, np.tril(np.ones((4, 4), bool)))


def test_causal_mask_offset_for_cached_decoding():
    # One query at absolute position 2 against a cache of 5 keys.
    mask = ops.convert_to_numpy(causal_mask(1, 5, offset=2))
    assert mask.tolist() == [[True, True, True, False, False]]


def test_merge_masks_skips_none_and_broadcasts():
    pad = np.array([[True, True, False]])[:, None, :]
    merged = ops.convert_to_numpy(merge_masks(None, pad, causal_mask(3)))
    expected = np.tril(np.ones((3, 3), bool)) & pad
    np.testing.assert_array_equal(merged, expected)
    assert merge_masks(None, None) is None
