"""`ops.merge_attention`: attention over two sets of keys, merged through
their log-sum-exps, is one softmax over the keys concatenated (outputs,
log-sum-exps and gradients), and a query that sees no key gives zeros and
finite gradients."""

import numpy as np
import pytest
from keras import ops

from keras_attention.ops import dot_product_attention, merge_attention
from keras_attention.utils.backend import value_and_grad


def _inputs(seed, first=5, second=3):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(2, 4, 4, 8)).astype("float32")
    k1, v1 = (rng.normal(size=(2, first, 2, 8)).astype("float32") for _ in "kv")
    k2, v2 = (rng.normal(size=(2, second, 2, 8)).astype("float32") for _ in "kv")
    weights = rng.normal(size=(2, 4, 4, 8)).astype("float32")
    return q, k1, v1, k2, v2, weights


def _masks(first, second):
    """Per part a `(B, 1, T, S)` mask: the first part causal over its keys;
    row 1 of the batch sees no key of the second part, and its query 0 no
    key of either."""
    causal = np.tril(np.ones((4, first), bool))[None, None].repeat(2, 0)
    causal[1, 0, 0] = False
    padding = np.ones((2, 1, 4, second), bool)
    padding[1] = False
    return causal, padding


def _merged(q, k1, v1, k2, v2, mask1, mask2, **options):
    o1, l1 = dot_product_attention(q, k1, v1, mask=mask1, return_lse=True, **options)
    o2, l2 = dot_product_attention(q, k2, v2, mask=mask2, return_lse=True, **options)
    return merge_attention((o1, o2), (l1, l2))


def _concatenated(q, k1, v1, k2, v2, mask1, mask2):
    key, value = ops.concatenate([k1, k2], 1), ops.concatenate([v1, v2], 1)
    mask = ops.concatenate([mask1, mask2], -1)
    return dot_product_attention(
        q, key, value, mask=mask, flash_attention=False, return_lse=True
    )


@pytest.mark.parametrize(
    "options", [{}, {"chunk_size": 2}], ids=["standard", "chunked"]
)
def test_merge_is_the_softmax_over_the_concatenated_keys(options):
    q, k1, v1, k2, v2, w = _inputs(0)
    mask1, mask2 = _masks(5, 3)
    output, lse = _merged(q, k1, v1, k2, v2, mask1, mask2, **options)
    expected, expected_lse = _concatenated(q, k1, v1, k2, v2, mask1, mask2)
    output, lse = ops.convert_to_numpy(output), ops.convert_to_numpy(lse)
    np.testing.assert_allclose(output, ops.convert_to_numpy(expected), atol=1e-5)
    finite = np.isfinite(ops.convert_to_numpy(expected_lse))
    assert not finite.all()  # the row that sees nothing is in the test
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(
        lse[finite], ops.convert_to_numpy(expected_lse)[finite], atol=1e-5
    )
    # The query that sees no key: zeros, not NaN.
    np.testing.assert_array_equal(output[1, 0], 0.0)


def test_merge_gradients_are_the_concatenated_softmaxs():
    q, k1, v1, k2, v2, w = _inputs(1)
    mask1, mask2 = (ops.convert_to_tensor(m) for m in _masks(5, 3))
    w = ops.convert_to_tensor(w)

    def loss(attend):
        def fn(q, k1, v1, k2, v2):
            output, lse = attend(q, k1, v1, k2, v2, mask1, mask2)
            finite_lse = ops.where(ops.isfinite(lse), lse, 0.0)
            return ops.sum(output * w) + ops.sum(finite_lse)

        return fn

    tensors = [ops.convert_to_tensor(x) for x in (q, k1, v1, k2, v2)]
    _, ours = value_and_grad(loss(_merged))(*tensors)
    _, expected = value_and_grad(loss(_concatenated))(*tensors)
    for got, want in zip(ours, expected, strict=True):
        got = ops.convert_to_numpy(got)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, ops.convert_to_numpy(want), atol=1e-4)


def test_one_part_is_itself_and_counts_must_match():
    q, k1, v1, *_ = _inputs(2)
    output, lse = dot_product_attention(q, k1, v1, return_lse=True)
    assert merge_attention([output], [lse])[0] is output
    with pytest.raises(ValueError, match="one log-sum-exp per output"):
        merge_attention([output, output], [lse])
