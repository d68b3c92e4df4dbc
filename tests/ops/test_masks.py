import numpy as np
import pytest
from keras import ops

from keras_attention.ops import causal_mask, length_mask, merge_masks, padding_mask
from keras_attention.ops.masks import combine_attention_masks, hide_unattended_inputs


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


# -- one mask for one attention call -----------------------------------------


def _np(x):
    return ops.convert_to_numpy(x)


def test_combined_mask_hides_padded_rows_columns_and_the_future():
    query_mask = np.array([[True, True, False]])
    value_mask = np.array([[True, False, True, True]])
    extra = np.ones((3, 4), bool)
    extra[0, 0] = False
    mask = _np(
        combine_attention_masks(
            query_mask,
            value_mask,
            attention_mask=extra,
            use_causal_mask=True,
            query_length=3,
            key_length=4,
            offset=1,
        )
    )
    want = np.tril(np.ones((3, 4), bool), k=1)  # offset 1: one key ahead
    want &= query_mask[0][:, None] & value_mask[0][None, :] & extra
    np.testing.assert_array_equal(mask, want[None])


def test_combined_mask_keeps_a_heads_axis_and_a_window():
    per_head = np.ones((1, 2, 4, 4), bool)
    per_head[0, 1, :, 0] = False
    mask = _np(
        combine_attention_masks(
            key_mask=np.array([[True, True, True, False]]),
            attention_mask=per_head,
            sliding_window=2,
            query_length=4,
            key_length=4,
        )
    )
    assert mask.shape == (1, 2, 4, 4)
    band = np.abs(np.arange(4)[:, None] - np.arange(4)[None, :]) < 2
    np.testing.assert_array_equal(mask[0, 0], band & [True, True, True, False])
    np.testing.assert_array_equal(mask[0, 1], mask[0, 0] & [False, True, True, True])


def test_combined_mask_is_none_without_masks():
    assert combine_attention_masks(query_length=3, key_length=3) is None


def test_combined_mask_rejects_a_mask_of_the_wrong_lengths():
    with pytest.raises(ValueError, match=r"\(query_length, key_length\) = \(3, 4\)"):
        combine_attention_masks(
            attention_mask=np.ones((2, 3, 5), bool), query_length=3, key_length=4
        )


def test_unattended_inputs_are_zeroed_even_when_they_hold_nan():
    key = np.ones((1, 4, 2), "float32")
    key[0, 3] = np.nan  # a padding slot holding garbage
    value = key * 2
    mask = np.array([[[True, True, True, False]] * 2])  # (B, T=2, S=4)
    hidden_key, hidden_value = hide_unattended_inputs(key, value, mask, 2, 4)
    assert np.all(_np(hidden_key)[0, 3] == 0) and np.all(_np(hidden_value)[0, 3] == 0)
    np.testing.assert_array_equal(_np(hidden_value)[0, :3], 2.0)
    # Causal: keys past the last query are seen by no query.
    hidden_key, _ = hide_unattended_inputs(key, key, None, 2, 4, is_causal=True)
    np.testing.assert_array_equal(_np(hidden_key)[0, 2:], 0.0)
