import warnings

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.layers import RelativePositionBias
from keras_attention.utils.backend import compile_function
from tests import numpy_reference as ref
from tests.conftest import trainable_gradients
from tests.layer_test import run_layer_test


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def reference_buckets(query_length, key_length, offset=0, **config):
    """`(T, S)` buckets of `j - (i + offset)` from the scalar rule of
    `numpy_reference.t5_bucket`."""
    num_buckets = config.get("num_buckets", 32)
    max_distance = config.get("max_distance", 128)
    bidirectional = config.get("bidirectional", True)
    return np.array(
        [
            [
                ref.t5_bucket(
                    j - (i + offset), num_buckets, max_distance, bidirectional
                )
                for j in range(key_length)
            ]
            for i in range(query_length)
        ]
    )


def reference_bias(table, query_length, key_length, offset=0, **config):
    """bias[0, h, i, j] = table[t5_bucket(j - (i + offset)), h]."""
    buckets = reference_buckets(query_length, key_length, offset, **config)
    return np.transpose(table[buckets], (2, 0, 1))[None]


def built_layer(num_heads=3, **config):
    """A built layer whose table holds distinct values."""
    layer = RelativePositionBias(num_heads, **config)
    layer.build((1, 1, 1))
    layer.embeddings.assign(normal(layer.num_buckets, num_heads, seed=7))
    return layer


def table_of(layer):
    return ops.convert_to_numpy(layer.embeddings)


@pytest.mark.parametrize(
    "query_length, key_length, offset, config",
    [
        (6, 6, 0, {}),
        (5, 9, 0, {"num_buckets": 8, "max_distance": 10}),
        (4, 40, 3, {"num_buckets": 12, "max_distance": 20}),
        (7, 30, 0, {"num_buckets": 10, "max_distance": 16, "bidirectional": False}),
        (1, 300, 200, {}),
        (1, 300, 260, {"bidirectional": False}),
    ],
    ids=["self", "cross", "offset", "causal", "decode_step", "causal_decode_step"],
)
def test_matches_the_numpy_reference(query_length, key_length, offset, config):
    layer = built_layer(**config)
    query, key = np.zeros((2, query_length, 5)), np.zeros((2, key_length, 1))
    got = np_(layer(query, key, query_offset=offset))
    want = reference_bias(table_of(layer), query_length, key_length, offset, **config)
    assert got.shape == (1, 3, query_length, key_length)
    np.testing.assert_array_equal(got, want)


def test_key_defaults_to_the_query():
    layer = built_layer()
    x = np.zeros((2, 9, 4), "float32")
    np.testing.assert_array_equal(np_(layer(x)), np_(layer(x, x)))
    np.testing.assert_array_equal(np_(layer(x)), reference_bias(table_of(layer), 9, 9))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_bias_depends_only_on_the_offset(bidirectional):
    # Offsets up to max_distance and beyond it, in both directions.
    max_distance, length = 24, 60
    layer = built_layer(
        num_buckets=16, max_distance=max_distance, bidirectional=bidirectional
    )
    bias = np_(layer(np.zeros((1, length, 1))))[0]  # (heads, T, S)
    by_offset = {}
    for offset in range(-(length - 1), length):
        diagonal = np.diagonal(bias, offset=offset, axis1=1, axis2=2)
        # Equal along each diagonal: bias[h, i, i + offset] is one value.
        np.testing.assert_array_equal(diagonal, diagonal[:, :1] + 0 * diagonal)
        by_offset[offset] = diagonal[:, 0]
    # Beyond max_distance, every offset shares the last bucket of its side.
    for offset in range(max_distance, length):
        np.testing.assert_array_equal(by_offset[-offset], by_offset[-max_distance])
        if bidirectional:
            np.testing.assert_array_equal(by_offset[offset], by_offset[max_distance])
    # The nearest offsets have a bucket each (4 exact ones per direction).
    near = [by_offset[d] for d in range(-3, 4 if bidirectional else 1)]
    assert len({tuple(v) for v in near}) == len(near)
    if not bidirectional:
        # Keys ahead of the query all fall in bucket 0, with offset 0.
        for offset in range(1, length):
            np.testing.assert_array_equal(by_offset[offset], by_offset[0])


def test_query_offset_equals_slicing_a_longer_bias():
    layer = built_layer(num_buckets=16, max_distance=20)
    x = np.zeros((2, 50, 8), "float32")
    full = np_(layer(x))
    for t in (0, 7, 25, 49):
        step = np_(layer(x[:, t : t + 1], x, query_offset=t))
        np.testing.assert_array_equal(step, full[:, :, t : t + 1])
    block = np_(layer(x[:, 10:14], x, query_offset=ops.convert_to_tensor(10)))
    np.testing.assert_array_equal(block, full[:, :, 10:14])


def test_query_offset_as_a_tensor_under_xla():
    # Cached decoding: one compiled step serves every position.
    layer = built_layer(num_buckets=16, max_distance=20)
    x = np.zeros((2, 30, 8), "float32")
    full = np_(layer(x))
    step = compile_function(
        lambda t: layer(x[:, :1], x, query_offset=t), layer.variables
    )
    for t in (0, 13, 29):
        got = np_(step(ops.convert_to_tensor(t, "int32")))
        np.testing.assert_array_equal(got, full[:, :, t : t + 1])


def test_gradients_reach_only_the_used_buckets():
    layer = built_layer(num_heads=2, num_buckets=32, max_distance=128)
    query, key = np.zeros((1, 4, 1)), np.zeros((1, 6, 1))
    weights = normal(1, 2, 4, 6, seed=3)

    def loss():
        bias = ops.cast(layer(query, key), "float32")
        return ops.sum(bias * ops.convert_to_tensor(weights))

    (grad,) = trainable_gradients(layer.trainable_variables, loss)
    buckets = reference_buckets(4, 6)
    want = np.zeros((32, 2), "float32")
    np.add.at(want, buckets, np.transpose(weights[0], (1, 2, 0)))
    np.testing.assert_allclose(grad, want, atol=1e-6)
    used = np.unique(buckets)
    assert set(used) == {0, 1, 2, 3, 17, 18, 19, 20, 21}
    unused = np.setdiff1d(np.arange(32), used)
    assert np.all(grad[used] != 0) and np.all(grad[unused] == 0)


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_with_the_bias_matches_numpy(is_causal):
    batch, length, heads, depth = 2, 7, 3, 8
    layer = built_layer(
        num_heads=heads, num_buckets=8, max_distance=12, bidirectional=not is_causal
    )
    q, k, v = (normal(batch, length, heads, depth, seed=s) for s in (1, 2, 3))
    x = normal(batch, length, 16, seed=4)
    got = keras_attention.ops.dot_product_attention(
        q, k, v, bias=layer(x), is_causal=is_causal
    )

    bias = reference_bias(
        table_of(layer).astype("float64"),
        length,
        length,
        num_buckets=8,
        max_distance=12,
        bidirectional=not is_causal,
    )
    scores = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(depth) + bias
    if is_causal:
        scores = np.where(np.tri(length, dtype=bool), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    weights = scores / scores.sum(-1, keepdims=True)
    want = np.einsum("bnts,bsnh->btnh", weights, v)
    np.testing.assert_allclose(np_(got), want, atol=1e-5)


def test_matches_keras_hub_t5_attention():
    pytest.importorskip("keras_hub")
    from keras_hub.src.models.t5.t5_multi_head_attention import (
        T5MultiHeadAttention,
    )

    for is_decoder in (False, True):
        hub = T5MultiHeadAttention(
            is_decoder=is_decoder,
            hidden_dim=8,
            key_value_dim=4,
            num_heads=2,
            dropout=0.0,
            use_relative_attention_bias=True,
        )
        layer = built_layer(num_heads=2, bidirectional=not is_decoder)
        hub.relative_attention_bias.assign(table_of(layer))
        want = np_(hub.compute_bias(5, 200, query_start_index=150))
        got = np_(layer(np.zeros((1, 5, 1)), np.zeros((1, 200, 1)), query_offset=150))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_casts_the_table(policy):
    layer = RelativePositionBias(2, dtype=policy)
    bias = layer(np.zeros((1, 5, 3)))
    dtype = policy.split("_")[1]
    assert keras.backend.standardize_dtype(bias.dtype) == dtype
    assert keras.backend.standardize_dtype(layer.embeddings.dtype) == "float32"
    table = ops.cast(ops.cast(layer.embeddings, dtype), "float32")
    want = reference_bias(ops.convert_to_numpy(table), 5, 5)
    np.testing.assert_array_equal(np_(bias), want)


def test_symbolic_shapes_and_masks():
    query, key = keras.Input((None, 8)), keras.Input((12, 8))
    layer = RelativePositionBias(4)
    assert tuple(layer(query).shape) == (1, 4, None, None)
    assert tuple(layer(query, key).shape) == (1, 4, None, 12)
    assert layer.compute_output_shape((2, 5, 8), (2, 9, 3)) == (1, 4, 5, 9)
    assert layer.compute_output_shape((2, 5, 8)) == (1, 4, 5, 5)
    # A padding mask on the input is the attention's business: no warning,
    # and the bias carries no mask.
    tokens = np.array([[3, 4, 0, 0]])
    embedded = keras.layers.Embedding(10, 8, mask_zero=True)(tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bias = layer(embedded)
    assert getattr(bias, "_keras_mask", None) is None
    assert layer.compute_mask(embedded, np.ones((1, 4), bool)) is None


def test_keeps_the_layer_contract_for_self_attention():
    out = run_layer_test(
        RelativePositionBias,
        {"num_heads": 3, "num_buckets": 8, "max_distance": 16},
        normal(2, 6, 4),
        expected_output_shape=(1, 3, 6, 6),
    )
    np.testing.assert_array_equal(out[0, :, 1:, 1:], out[0, :, :-1, :-1])


def test_keeps_the_layer_contract_for_cross_attention_with_an_offset():
    run_layer_test(
        RelativePositionBias,
        {
            "num_heads": 2,
            "bidirectional": False,
            "embeddings_initializer": keras.initializers.RandomNormal(stddev=0.1),
        },
        {"query": normal(2, 3, 4), "key": normal(2, 9, 5)},
        {"query_offset": 4},
        expected_output_shape=(1, 2, 3, 9),
    )


@pytest.mark.parametrize(
    "init_kwargs, message",
    [
        ({"num_heads": 0}, r"`num_heads` must be a positive integer.*num_heads=0"),
        ({"num_heads": 2.5}, r"num_heads=2.5"),
        ({"num_heads": 2, "num_buckets": 0}, r"`num_buckets` must be a positive"),
        ({"num_heads": 2, "max_distance": -1}, r"max_distance=-1"),
        ({"num_heads": 2, "num_buckets": 7}, r"must be even; received num_buckets=7"),
        ({"num_heads": 2, "num_buckets": 2}, r"at least 2 buckets per direction"),
        (
            {"num_heads": 2, "num_buckets": 1, "bidirectional": False},
            r"num_buckets=1, bidirectional=False",
        ),
        (
            {"num_heads": 2, "bidirectional": "yes"},
            r"`bidirectional` must be a bool; received 'yes'",
        ),
    ],
)
def test_invalid_config(init_kwargs, message):
    with pytest.raises(ValueError, match=message):
        RelativePositionBias(**init_kwargs)


def test_invalid_inputs():
    layer = RelativePositionBias(2)
    with pytest.raises(ValueError, match=r"`query` must have rank 2 or more.*\(5,\)"):
        layer(np.zeros((5,)))
    with pytest.raises(ValueError, match=r"`key` must have rank 2 or more.*\(7,\)"):
        layer(np.zeros((1, 5)), np.zeros((7,)))
    with pytest.raises(ValueError, match=r"`query_offset` must be >= 0.*=-1"):
        layer(np.zeros((1, 5)), query_offset=-1)
    with pytest.raises(TypeError, match=r"`query_offset` must be an integer.*1.5"):
        layer(np.zeros((1, 5)), query_offset=1.5)
    with pytest.raises(ValueError, match=r"`query_offset` must be a scalar.*\(2,\)"):
        layer(np.zeros((1, 5)), query_offset=ops.convert_to_tensor([1, 2]))
    with pytest.raises(ValueError, match=r"`query` must have rank 2 or more"):
        RelativePositionBias(2).build((4,))


def test_numpy_integers_in_the_config_become_python_integers():
    layer = RelativePositionBias(np.int64(4), num_buckets=np.int32(16))
    config = layer.get_config()
    assert type(config["num_heads"]) is int and config["num_heads"] == 4
    assert type(config["num_buckets"]) is int
    bias = layer(np.zeros((1, 3, 2)), query_offset=np.int64(2))
    assert tuple(bias.shape) == (1, 4, 3, 3)
