"""What the package's MultiHeadAttention adds to Keras' layer: positions
inside attention, packed sequences (`segment_ids`) and the int8 cache.
(tests/layers/test_multi_head_attention.py: the Keras layer's contract,
which CI also runs on every Keras release between the floor and the newest.)"""

import keras
import numpy as np
import pytest
from keras import backend, ops

from keras_attention.layers import (
    GroupedQueryAttention,
    MultiHeadAttention,
    RotaryEmbedding,
)
from keras_attention.ops import alibi_slopes
from tests import numpy_reference as ref
from tests.layer_test import decode_token_by_token, each_document_alone, run_layer_test

rng = np.random.default_rng(0)
B, T, S, D = 2, 5, 7, 16
QUERY = rng.normal(size=(B, T, D)).astype("float32")
VALUE = rng.normal(size=(B, S, 12)).astype("float32")


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


# -- positions inside attention ----------------------------------------------


def _projections(layer, x):
    q, k, v, o = (np_(w) for w in layer.weights)
    return (
        np.einsum("btd,dnh->btnh", x, q),
        np.einsum("btd,dnh->btnh", x, k),
        np.einsum("btd,dnh->btnh", x, v),
        o,
    )


def test_rotary_rotates_the_projected_queries_and_keys():
    layer = MultiHeadAttention(
        num_heads=2, key_dim=8, use_bias=False, attention_positions="rotary"
    )
    x = rng.normal(size=(B, T, D)).astype("float32")
    got = np_(layer(x, x, use_causal_mask=True))
    q, k, v, o = _projections(layer, x)
    rotary = RotaryEmbedding()
    heads = keras.ops.dot_product_attention(rotary(q), rotary(k), v, is_causal=True)
    want = np.einsum("btnh,nhd->btd", np_(heads), o)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_alibi_subtracts_slope_times_distance():
    layer = MultiHeadAttention(
        num_heads=4, key_dim=4, use_bias=False, attention_positions="alibi"
    )
    x = rng.normal(size=(B, T, D)).astype("float32")
    got = np_(layer(x, x, use_causal_mask=True))
    q, k, v, o = _projections(layer, x)
    heads = ref.grouped_attention(q, k, v, bias=ref.alibi(4, T, T), causal=True)
    np.testing.assert_allclose(got, np.einsum("btnh,nhd->btd", heads, o), atol=1e-5)
    np.testing.assert_allclose(layer._alibi_slopes, alibi_slopes(4))


def test_attention_bias_is_added_to_the_scores():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, use_bias=False)
    x = rng.normal(size=(B, T, D)).astype("float32")
    bias = rng.normal(size=(1, 2, T, T)).astype("float32")
    got, weights = layer(x, x, attention_bias=bias, return_attention_scores=True)
    q, k, v, o = _projections(layer, x)
    heads = ref.grouped_attention(q, k, v, bias=bias)
    np.testing.assert_allclose(
        np_(got), np.einsum("btnh,nhd->btd", heads, o), atol=1e-5
    )
    # The bias keeps the automatic choice on the standard path at any length.
    np.testing.assert_allclose(
        np_(layer(x, x, attention_bias=bias)), np_(got), atol=1e-6
    )
    assert np_(weights).shape == (B, 2, T, T)


@pytest.mark.parametrize("attention_positions", ["rotary", "alibi", "relative"])
@pytest.mark.parametrize(
    "num_key_value_heads, chunk_size", [(None, None), (1, None), (2, 4)]
)
def test_positions_decode_with_the_cache_like_one_causal_pass(
    attention_positions, num_key_value_heads, chunk_size
):
    # With a chunk size, the full pass takes the chunked path (ALiBi in the
    # op), the cached steps the standard one (ALiBi as a dense bias).
    layer = MultiHeadAttention(
        num_heads=4,
        key_dim=4,
        attention_positions=attention_positions,
        num_key_value_heads=num_key_value_heads,
        chunk_size=chunk_size,
    )
    x = rng.normal(size=(B, 9, D)).astype("float32")
    full = np_(layer(x, x, use_causal_mask=True))
    cache = layer.initial_cache(B, 9)
    decoded, cache = decode_token_by_token(layer, x, cache)
    np.testing.assert_allclose(decoded, full, atol=1e-5)


@pytest.mark.parametrize("attention_positions", ["rotary", "alibi"])
@pytest.mark.parametrize("use_causal_mask", [False, True])
def test_positions_on_the_chunked_path_and_with_weights(
    attention_positions, use_causal_mask
):
    layer = MultiHeadAttention(
        num_heads=4, key_dim=4, attention_positions=attention_positions
    )
    x = rng.normal(size=(B, 13, D)).astype("float32")
    want, _ = layer(x, x, use_causal_mask=use_causal_mask, return_attention_scores=True)
    chunked = MultiHeadAttention.from_config({**layer.get_config(), "chunk_size": 4})
    chunked(x, x)
    chunked.set_weights(layer.get_weights())
    got = chunked(x, x, use_causal_mask=use_causal_mask)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)


def test_rotary_scores_depend_only_on_the_offset():
    # The same tokens written into the cache at positions 0.. or 5.. give the
    # same outputs: the rotated scores see only the offsets between them.
    layer = MultiHeadAttention(num_heads=2, key_dim=8, attention_positions="rotary")
    x = rng.normal(size=(B, T, D)).astype("float32")
    outputs = []
    for start in (0, 5):
        cache = layer.initial_cache(B, start + T)
        mask = np.zeros((B, start + T), bool)
        mask[:, start:] = True
        out, _ = layer(
            x,
            x,
            attention_mask=mask[:, None, :]
            & np.tril(np.ones((T, start + T), bool), k=start),
            cache=cache,
            cache_update_index=start,
        )
        outputs.append(np_(out))
    np.testing.assert_allclose(outputs[1], outputs[0], atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        {"attention_positions": "rotary"},
        {"attention_positions": "alibi", "chunk_size": 4},
        {"attention_positions": "alibi", "num_key_value_heads": 1},
        {"attention_positions": "relative", "num_key_value_heads": 1},
    ],
    ids=["rotary", "alibi-chunked", "alibi-multi-query", "relative-multi-query"],
)
def test_positions_keep_the_layer_contract(options):
    x = rng.normal(size=(B, T, D)).astype("float32")
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 8, **options},
        {"query": x, "value": x},
        {"use_causal_mask": True},
        expected_output_shape=(B, T, D),
    )


def test_positions_need_one_attention_axis():
    layer = MultiHeadAttention(
        num_heads=2, key_dim=4, attention_axes=(1, 2), attention_positions="rotary"
    )
    images = rng.normal(size=(B, 3, 3, D)).astype("float32")
    with pytest.raises(ValueError, match="needs one attention axis.*\\(1, 2\\)"):
        layer(images, images)


def test_a_user_layer_wrapping_it_builds_on_a_variable_length_input():
    # A user layer without `compute_output_shape`: Keras infers its output by
    # tracing `call` with symbolic lengths (on JAX, jax.export dimensions,
    # which cannot be compared with an int while building).
    class Block(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.attention = MultiHeadAttention(num_heads=2, key_dim=8)

        def call(self, x):
            return self.attention(x, x, use_causal_mask=True) + x

    inputs = keras.Input((None, D))
    outputs = Block()(inputs)
    assert tuple(outputs.shape) == (None, None, D)
    model = keras.Model(inputs, outputs)
    assert tuple(model(QUERY).shape) == QUERY.shape


# -- packed sequences (segment_ids) ------------------------------------------

PACKED = rng.normal(size=(2, 9, D)).astype("float32")
SEGMENTS = np.array([[1, 1, 1, 1, 2, 2, 2, 3, 3], [4, 4, 4, 4, 4, 4, 5, 5, 5]])


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("positions", [None, "rotary", "alibi", "relative"])
def test_packed_rows_match_each_document_alone(chunk_size, causal, positions):
    layer = MultiHeadAttention(
        num_heads=2, key_dim=4, chunk_size=chunk_size, attention_positions=positions
    )
    packed = layer(PACKED, PACKED, use_causal_mask=causal, segment_ids=SEGMENTS)
    alone = each_document_alone(
        lambda x: layer(x, x, use_causal_mask=causal), PACKED, SEGMENTS
    )
    np.testing.assert_allclose(np_(packed), alone, atol=2e-6)


def test_packed_rows_take_the_chunked_path_without_a_dense_mask(monkeypatch):
    from keras_attention.layers import _attention_paths as module

    real, seen = module.dot_product_attention, {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "dot_product_attention", spy)
    layer = MultiHeadAttention(num_heads=2, key_dim=4, chunk_size=2)
    layer(PACKED, PACKED, use_causal_mask=True, segment_ids=SEGMENTS)
    assert seen["chunk_size"] == 2 and seen["mask"] is None
    np.testing.assert_array_equal(np_(seen["segment_ids"]), SEGMENTS)


def test_packed_weights_see_only_their_document():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    output, weights = layer(
        PACKED, PACKED, segment_ids=SEGMENTS, return_attention_scores=True
    )
    other = SEGMENTS[:, None, :, None] != SEGMENTS[:, None, None, :]
    assert np.all(np_(weights)[np.broadcast_to(other, weights.shape)] == 0)
    np.testing.assert_allclose(
        np_(output), np_(layer(PACKED, PACKED, segment_ids=SEGMENTS)), atol=1e-6
    )


def test_packed_rows_in_training_with_attention_dropout():
    # Attention dropout runs inside the op, on the documents' mask: two
    # layers of the same seed and weights draw the same mask, and a change
    # in one document leaves the other's rows as they were.
    # PyTorch's SDPA draws its own mask, not the seed's: the standard path.
    options = {"dropout": 0.5, "seed": 3}
    if backend.backend() == "torch":
        options["flash_attention"] = False
    layers = [MultiHeadAttention(num_heads=2, key_dim=4, **options) for _ in "ab"]
    for layer in layers:
        layer(PACKED, PACKED, segment_ids=SEGMENTS)
    layers[1].set_weights(layers[0].get_weights())
    changed = np.array(PACKED)
    other = SEGMENTS != SEGMENTS[:, :1]
    changed[other] += 1.0
    first = np_(layers[0](PACKED, PACKED, segment_ids=SEGMENTS, training=True))
    second = np_(layers[1](changed, changed, segment_ids=SEGMENTS, training=True))
    np.testing.assert_allclose(first[~other], second[~other], atol=2e-6)
    assert np.abs(first[other] - second[other]).max() > 1e-3
    inference = np_(layers[0](PACKED, PACKED, segment_ids=SEGMENTS))
    assert np.abs(first - inference).max() > 1e-3


def test_a_pair_of_ids_masks_cross_attention_like_the_dense_mask():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    query_ids = np.array([[1, 1, 2, 2, 2], [3, 3, 3, 4, 4]])
    key_ids = np.array([[1, 2, 2, 2, 2, 1, 1], [4, 4, 3, 3, 3, 3, 4]])
    dense = query_ids[:, :, None] == key_ids[:, None, :]
    for chunk_size in (None, 2):
        layer._chunk_size = chunk_size
        np.testing.assert_allclose(
            np_(layer(QUERY, VALUE, segment_ids=(query_ids, key_ids))),
            np_(layer(QUERY, VALUE, attention_mask=dense)),
            atol=2e-6,
        )


def test_cached_decoding_of_a_packed_row_takes_the_pair():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, attention_positions="alibi")
    full = np_(layer(PACKED, PACKED, use_causal_mask=True, segment_ids=SEGMENTS))
    cache = layer.initial_cache(2, PACKED.shape[1])
    for t in range(PACKED.shape[1]):
        step = PACKED[:, t : t + 1]
        output, cache = layer(
            step,
            step,
            use_causal_mask=True,
            cache=cache,
            cache_update_index=t,
            segment_ids=(SEGMENTS[:, t : t + 1], SEGMENTS),
        )
        np.testing.assert_allclose(np_(output)[:, 0], full[:, t], atol=2e-6)
    with pytest.raises(
        ValueError, match="With a `cache`.*pass `segment_ids` as a pair"
    ):
        layer(
            step, step, cache=cache, cache_update_index=0, segment_ids=SEGMENTS[:, :1]
        )


@pytest.mark.parametrize(
    "segment_ids, message",
    [
        (SEGMENTS[0], r"integer ids of shape \(batch, 9\).*shape \(9,\)"),
        (SEGMENTS[:, :5], r"shape \(batch, 9\); received shape \(2, 5\)"),
        (SEGMENTS.astype("float32"), r"received dtype float32"),
        ((SEGMENTS, SEGMENTS, SEGMENTS), r"a pair .* received a sequence of 3"),
    ],
)
def test_bad_segment_ids_are_named(segment_ids, message):
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    with pytest.raises(ValueError, match=message):
        layer(PACKED, PACKED, segment_ids=segment_ids)


def test_one_segment_ids_tensor_needs_as_many_keys_as_queries():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    with pytest.raises(ValueError, match="5 queries and 7 keys: pass"):
        layer(QUERY, VALUE, segment_ids=np.ones((B, T), "int32"))


@pytest.mark.parametrize("causal", [False, True])
def test_packed_gradients_agree_on_both_paths(causal):
    from tests.conftest import trainable_gradients

    layer = MultiHeadAttention(num_heads=2, key_dim=4, attention_positions="rotary")
    layer(PACKED, PACKED)
    target = ops.convert_to_tensor(rng.normal(size=PACKED.shape).astype("float32"))

    def loss(chunk_size):
        def compute():
            layer._chunk_size = chunk_size
            out = layer(PACKED, PACKED, use_causal_mask=causal, segment_ids=SEGMENTS)
            return ops.sum(out * target)

        return compute

    standard = trainable_gradients(layer.trainable_variables, loss(None))
    chunked = trainable_gradients(layer.trainable_variables, loss(2))
    for a, b in zip(standard, chunked, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)


# -- the int8 cache ------------------------------------------------------------


def cache_bytes_per_token(cache):
    """Bytes a cache (a tensor or the quantized pair) holds per position."""
    parts = keras.tree.flatten(cache)
    slots = parts[0].shape[2]
    return sum(
        int(np.prod(part.shape)) * np.dtype(ops.convert_to_numpy(part).dtype).itemsize
        for part in parts
    ) / (slots * parts[0].shape[0])


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: MultiHeadAttention(num_heads=2, key_dim=16, **kw),
        lambda **kw: GroupedQueryAttention(16, 4, 2, **kw),
    ],
    ids=["multi_head", "grouped_query"],
)
def test_an_int8_cache_decodes_close_to_the_float_cache(make):
    layer = make(cache_dtype="int8")
    x = rng.normal(size=(B, T, 32)).astype("float32")
    full = np_(layer(x, x, use_causal_mask=True))
    cache = layer.initial_cache(B, T)
    values, scales = cache
    assert ops.convert_to_numpy(values).dtype == np.int8
    assert ops.convert_to_numpy(scales).dtype == np.int16
    assert tuple(values.shape) == (B, 2, T, 2, 16)
    assert tuple(scales.shape) == (B, 2, T, 2)  # one scale per row of key_dim
    decoded, cache = decode_token_by_token(layer, x, cache)
    # Each key and value is within half a step (max|row| / 254) of its own.
    np.testing.assert_allclose(decoded, full, atol=3e-2)
    # 2 * 2 heads * (16 + 2) bytes, against 2 * 2 * 16 * 4 in float32.
    float_cache = make().initial_cache(B, T)
    assert cache_bytes_per_token(cache) == 2 * 2 * (16 + 2)
    assert cache_bytes_per_token(float_cache) == 2 * 2 * 16 * 4
    assert cache_bytes_per_token(cache) <= 0.3 * cache_bytes_per_token(float_cache)
    config = layer.get_config()
    assert config["cache_dtype"] == "int8"
    assert type(layer).from_config(config).cache_dtype == "int8"


@pytest.mark.parametrize("cache_dtype", ["int4", "float32", 8, "INT8"])
def test_a_bad_cache_dtype_is_refused_by_name(cache_dtype):
    with pytest.raises(
        ValueError, match=f"Unknown `cache_dtype`: {cache_dtype!r}.*'int8'"
    ):
        MultiHeadAttention(num_heads=2, key_dim=8, cache_dtype=cache_dtype)
