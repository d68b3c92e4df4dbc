"""ALiBi and relative-position buckets, and the attention op with fewer key
heads than query heads (grouped-query attention) and additive biases."""

import keras
import numpy as np
import pytest
from keras import backend, ops

from keras_attention.ops import (
    alibi_bias,
    alibi_slopes,
    attention_weights,
    dot_product_attention,
    relative_position_buckets,
    segment_positions,
)
from tests import numpy_reference as ref
from tests.conftest import trainable_gradients
from tests.keras_versions import skip_on_torch_before

rng = np.random.default_rng(0)
B, T, N, H = 2, 21, 8, 4


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def qkv(key_heads, length=T):
    q = rng.normal(size=(B, length, N, H)).astype("float32")
    k = rng.normal(size=(B, length, key_heads, H)).astype("float32")
    v = rng.normal(size=(B, length, key_heads, H)).astype("float32")
    return q, k, v


@pytest.mark.parametrize("num_heads", [1, 2, 8, 16])
def test_alibi_slopes_follow_the_paper(num_heads):
    want = 2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)
    np.testing.assert_allclose(alibi_slopes(num_heads), want, rtol=1e-6)


@pytest.mark.parametrize("num_heads", [3, 6, 12])
def test_alibi_slopes_match_keras_hub(num_heads):
    keras_hub = pytest.importorskip("keras_hub")
    theirs = keras_hub.layers.AlibiBias()._get_slopes(num_heads)
    np.testing.assert_allclose(alibi_slopes(num_heads), theirs, rtol=1e-6)


def test_alibi_bias_is_minus_slope_times_distance():
    got = np_(alibi_bias(alibi_slopes(4), 5, 7, offset=2))
    np.testing.assert_allclose(got, ref.alibi(4, 5, 7, offset=2), rtol=1e-6)


def test_causal_alibi_weights_equal_keras_hubs():
    # keras-hub biases key j by slope * (j - S + 1), the paper's -slope * (i - j)
    # shifted by a constant per query row: the softmax over the keys a causal
    # query sees is the same.
    keras_hub = pytest.importorskip("keras_hub")
    q, k, _ = qkv(N)
    scores = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(H)
    theirs = np_(keras_hub.layers.AlibiBias()(scores))
    want = ref.softmax(theirs, np.tril(np.ones((T, T), bool)))
    ours = attention_weights(q, k, is_causal=True, alibi_slopes=alibi_slopes(N))
    np.testing.assert_allclose(np_(ours), want, atol=1e-6)


@pytest.mark.parametrize("key_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 8])
@pytest.mark.parametrize("alibi", [False, True])
def test_grouped_and_alibi_attention_match_numpy(
    key_heads, is_causal, chunk_size, alibi
):
    q, k, v = qkv(key_heads)
    bias = ref.alibi(N, T, T) if alibi else None
    got = dot_product_attention(
        q,
        k,
        v,
        is_causal=is_causal,
        chunk_size=chunk_size,
        alibi_slopes=alibi_slopes(N) if alibi else None,
    )
    want = ref.grouped_attention(q, k, v, bias=bias, causal=is_causal)
    np.testing.assert_allclose(np_(got), want, atol=2e-6)


@pytest.mark.parametrize("key_heads", [1, 4])
def test_one_query_step_of_grouped_attention_matches_numpy(key_heads):
    # A single query takes the multiply-and-sum path of cached decoding.
    q, k, v = qkv(key_heads)
    got = dot_product_attention(q[:, -1:], k, v, alibi_slopes=alibi_slopes(N))
    bias = ref.alibi(N, 1, T, offset=0)
    want = ref.grouped_attention(q[:, -1:], k, v, bias=bias)
    np.testing.assert_allclose(np_(got), want, atol=2e-6)


def test_grouped_weights_and_head_masks():
    q, k, v = qkv(2)
    mask = rng.random((B, N, T, T)) > 0.3
    mask[:, 0] = False  # the first head sees nothing; its group-mate does
    out, weights = dot_product_attention(q, k, v, mask=mask, return_weights=True)
    repeated = np.repeat(k, 4, axis=2)
    scores = np.einsum("btnh,bsnh->bnts", q, repeated) / np.sqrt(H)
    np.testing.assert_allclose(np_(weights), ref.softmax(scores, mask), atol=1e-6)
    assert np.all(np_(out)[:, :, 0] == 0.0) and np.all(np.isfinite(np_(out)))


@pytest.mark.parametrize("chunk_size", [None, 8])
def test_grouped_alibi_gradients_match_repeated_heads(chunk_size):
    q, k, v = (keras.Variable(x) for x in qkv(2))
    weights = rng.normal(size=(H,)).astype("float32")

    def loss(grouped):
        def fn():
            key, value = k, v
            if not grouped:
                key, value = ops.repeat(k, 4, axis=2), ops.repeat(v, 4, axis=2)
            out = dot_product_attention(
                q,
                key,
                value,
                is_causal=True,
                chunk_size=chunk_size if grouped else None,
                alibi_slopes=alibi_slopes(N),
            )
            return ops.sum(ops.multiply(out, weights))

        return fn

    want = trainable_gradients([q, k, v], loss(False))
    got = trainable_gradients([q, k, v], loss(True))
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_a_dense_bias_is_added_to_the_scaled_scores():
    q, k, v = qkv(N)
    bias = rng.normal(size=(1, N, T, T)).astype("float32")
    got = dot_product_attention(q, k, v, bias=bias, is_causal=True)
    want = ref.grouped_attention(q, k, v, bias=bias, causal=True)
    np.testing.assert_allclose(np_(got), want, atol=2e-6)
    skip_on_torch_before((3, 14), "keras.ops.dot_product_attention refuses `bias`")
    theirs = keras.ops.dot_product_attention(q, k, v, bias=bias, is_causal=True)
    np.testing.assert_allclose(np_(got), np_(theirs), atol=1e-5)


def test_alibi_scores_depend_only_on_the_offset():
    # The same query and key placed at any pair of positions with the same
    # offset score alike: a key 3 positions back costs 3 slopes everywhere.
    bias = np_(alibi_bias(alibi_slopes(N), 40))
    for i, j in [(10, 7), (25, 22), (39, 36)]:
        np.testing.assert_allclose(bias[:, i, j], -3 * alibi_slopes(N), rtol=1e-6)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20)])
def test_buckets_match_t5s_rule(bidirectional, num_buckets, max_distance):
    got = ops.convert_to_numpy(
        relative_position_buckets(
            9, 300, num_buckets, max_distance, bidirectional, offset=150
        )
    )
    for i in range(9):
        for j in range(300):
            want = ref.t5_bucket(
                j - (i + 150), num_buckets, max_distance, bidirectional
            )
            assert got[i, j] == want, (i, j)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"alibi_slopes": np.ones(3)},
            r"one slope per query head, shape \(8,\).*\(3,\)",
        ),
        (
            {"bias": np.zeros((1, 8, T, T)), "chunk_size": 8},
            "`bias` cannot be combined",
        ),
    ],
)
def test_bad_position_arguments_are_refused(kwargs, message):
    q, k, v = qkv(N)
    with pytest.raises(ValueError, match=message):
        dot_product_attention(q, k, v, **kwargs)


def test_key_heads_must_divide_query_heads():
    q, k, v = qkv(3)
    with pytest.raises(ValueError, match="must divide.*query heads 8 and key heads 3"):
        dot_product_attention(q, k, v)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_buckets": 7}, "must be even; received num_buckets=7"),
        ({"num_buckets": 2}, "at least 2 buckets per direction"),
        ({"max_distance": 0}, "max_distance"),
    ],
)
def test_bad_bucket_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        relative_position_buckets(4, **kwargs)


# -- segment_positions: positions inside the documents of packed rows ----------


def segment_positions_by_loop(ids):
    positions = np.zeros_like(ids)
    for b, row in enumerate(ids):
        for t in range(1, len(row)):
            positions[b, t] = 0 if row[t] != row[t - 1] else positions[b, t - 1] + 1
    return positions


@pytest.mark.parametrize(
    "ids, want",
    [
        ([[7, 7, 7, 3, 3, 0]], [[0, 1, 2, 0, 1, 0]]),
        ([[1, 1, 1, 1]], [[0, 1, 2, 3]]),
        ([[4, 3, 2, 1]], [[0, 0, 0, 0]]),
        # A document id seen again after another one starts a new document.
        ([[1, 1, 2, 1, 1]], [[0, 1, 0, 0, 1]]),
        ([[5]], [[0]]),
    ],
)
def test_segment_positions_restart_where_the_id_changes(ids, want):
    got = segment_positions(np.array(ids, "int32"))
    assert backend.standardize_dtype(got.dtype) == "int32"
    np.testing.assert_array_equal(np_(got), want)


@pytest.mark.parametrize("length", [1, 37, 4096])
def test_segment_positions_match_a_loop_at_any_length(length):
    ids = np.cumsum(rng.random((3, length)) < 0.05, axis=1).astype("int64")
    np.testing.assert_array_equal(
        np_(segment_positions(ids)), segment_positions_by_loop(ids)
    )


@pytest.mark.parametrize(
    "ids, received",
    [
        (np.zeros((4,), "int32"), "shape (4,)"),
        (np.zeros((2, 3, 4), "int32"), "shape (2, 3, 4)"),
        (np.zeros((2, 3), "float32"), "dtype float32"),
        (np.zeros((2, 3), "bool"), "dtype bool"),
    ],
)
def test_segment_positions_name_bad_ids(ids, received):
    with pytest.raises(ValueError, match=r"`segment_ids` must be integer ids") as e:
        segment_positions(ids)
    assert received in str(e.value) and "(batch, length)" in str(e.value)
