import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import GroupedQueryAttention, MultiHeadAttention
from keras_attention.layers.key_value_cache import (
    cache_length,
    cache_slots,
    cache_spec,
    check_cache,
    check_cache_arguments,
    check_cache_dtype,
    decode_scales,
    dequantize_rows,
    empty_cache,
    is_heads_first_cache,
    is_pair_cache,
    is_quantized_cache,
    quantize_rows,
    read_cache,
    read_keys_values,
    write_cache,
    write_keys_values,
)

rng = np.random.default_rng(0)
numpy = ops.convert_to_numpy


def test_int8_rows_are_within_half_a_step_of_the_values():
    # Rows of three magnitudes: the scale follows each row.
    x = rng.normal(size=(3, 5, 16)) * np.array([1e-3, 1.0, 1e3])[:, None, None]
    x = x.astype("float32")
    x[0, 0] = 0.0  # a row of zeros keeps zeros
    values, codes = quantize_rows(x)
    back = numpy(dequantize_rows(values, codes))
    half_step = np.abs(x).max(-1, keepdims=True) / 254
    assert np.all(np.abs(back - x) <= half_step * 1.001 + 1e-12)
    assert np.all(back[0, 0] == 0.0)
    scales = numpy(decode_scales(codes))
    np.testing.assert_allclose(scales, np.abs(x).max(-1) / 127, rtol=4e-4, atol=1e-30)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_a_write_lands_at_its_index_and_reads_back(dtype):
    cache = empty_cache(2, 6, 3, 4, dtype)
    assert is_quantized_cache(cache) == (dtype == "int8")
    assert cache_slots(cache) == 6 and int(cache_length(cache)) == 6
    check_cache(cache, 3, 4, 4)
    entries = rng.normal(size=(2, 2, 2, 3, 4)).astype("float32")
    read = numpy(read_cache(write_cache(cache, 3, entries), "float32"))
    assert read.shape == (2, 2, 6, 3, 4)
    tolerance = np.abs(entries).max(-1, keepdims=True) / 254 if dtype == "int8" else 0
    assert np.all(np.abs(read[:, :, 3:5] - entries) <= tolerance * 1.001 + 1e-7)
    assert np.all(read[:, :, :3] == 0) and np.all(read[:, :, 5:] == 0)


def test_a_malformed_quantized_cache_is_named():
    values, scales = empty_cache(1, 4, 2, 8, "int8")
    with pytest.raises(
        ValueError, match="pair \\(values, scales\\); received a sequence of 3"
    ):
        check_cache((values, scales, scales), 2, 8, 8)
    with pytest.raises(ValueError, match="received values int8 .* and scales float32"):
        check_cache((values, ops.cast(scales, "float32")), 2, 8, 8)


@pytest.mark.parametrize("cache_dtype", [None, "int8"])
def test_known_cache_dtypes_pass_through(cache_dtype):
    assert check_cache_dtype(cache_dtype) == cache_dtype


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_the_spec_of_a_cache_has_its_parts_shapes_and_dtypes(dtype):
    cache = empty_cache(2, 6, 3, 4, dtype)
    spec = cache_spec(cache)
    parts = cache if isinstance(cache, tuple) else (cache,)
    specs = spec if isinstance(spec, tuple) else (spec,)
    assert len(specs) == len(parts)
    for part, part_spec in zip(parts, specs, strict=True):
        assert tuple(part_spec.shape) == tuple(part.shape)
        assert part_spec.dtype == keras.backend.standardize_dtype(part.dtype)


def test_the_cache_arguments_of_a_call_are_checked():
    query, cache = np.zeros((1, 2, 8)), empty_cache(1, 4, 2, 8, "float32")
    check_cache_arguments(query, cache, 0)
    check_cache_arguments(query, None, None)
    with pytest.raises(ValueError, match="`cache_update_index` needs a `cache`"):
        check_cache_arguments(query, None, 0)
    with pytest.raises(ValueError, match="A cache needs \\(batch, length, dim\\)"):
        check_cache_arguments(np.zeros((1, 2, 2, 8)), cache, 0)


# keras-hub's layout (Gemma 3's): the pair (keys, values) of (B, S, N, H).


def test_a_pair_cache_is_told_from_a_quantized_one_and_reads_back():
    pair = empty_cache(2, 6, 3, 4, "float32", layout="pair")
    assert is_pair_cache(pair) and not is_quantized_cache(pair)
    quantized = empty_cache(2, 6, 3, 4, "int8")
    assert is_quantized_cache(quantized) and not is_pair_cache(quantized)
    assert not is_pair_cache(empty_cache(2, 6, 3, 4, "float32"))
    assert [tuple(part.shape) for part in pair] == [(2, 6, 3, 4)] * 2
    assert cache_slots(pair) == 6 and int(cache_length(pair)) == 6
    check_cache(pair, 3, 4, 4)
    keys = rng.normal(size=(2, 2, 3, 4)).astype("float32")
    values = rng.normal(size=(2, 2, 3, 4)).astype("float32")
    written = write_keys_values(pair, 3, keys, values)
    assert isinstance(written, tuple) and len(written) == 2
    read_keys, read_values = (
        numpy(part) for part in read_keys_values(written, "float32")
    )
    np.testing.assert_array_equal(read_keys[:, 3:5], keys)
    np.testing.assert_array_equal(read_values[:, 3:5], values)
    assert np.all(read_keys[:, :3] == 0) and np.all(read_values[:, 5:] == 0)
    # The stacked view and the stacked write agree with the pair's.
    stacked = numpy(
        read_cache(write_cache(pair, 3, np.stack([keys, values], 1)), "float32")
    )
    np.testing.assert_array_equal(stacked, np.stack([read_keys, read_values], 1))


def test_a_malformed_pair_cache_or_layout_is_named():
    keys, values = empty_cache(1, 4, 2, 8, "float32", layout="pair")
    with pytest.raises(
        ValueError, match="pair cache is \\(keys, values\\); received a sequence of 3"
    ):
        check_cache((keys, values, values), 2, 8, 8)
    with pytest.raises(
        ValueError,
        match="received keys float32 \\(1, 4, 2, 8\\) and values "
        "float32 \\(1, 4, 3, 8\\)",
    ):
        check_cache((keys, ops.zeros((1, 4, 3, 8))), 2, 8, 8)
    with pytest.raises(ValueError, match="received keys int32"):
        check_cache((ops.cast(keys, "int32"), values), 2, 8, 8)
    with pytest.raises(ValueError, match="Unknown cache `layout`: 'split'"):
        empty_cache(1, 4, 2, 8, "float32", layout="split")
    with pytest.raises(
        ValueError, match="pair cache \\(keras-hub's layout\\) is not quantized"
    ):
        empty_cache(1, 4, 2, 8, "int8", layout="pair")


def test_the_spec_of_a_pair_cache_is_a_pair():
    pair = empty_cache(2, 6, 3, 4, "float32", layout="pair")
    spec = cache_spec(pair)
    assert isinstance(spec, tuple) and len(spec) == 2
    assert [tuple(part.shape) for part in spec] == [(2, 6, 3, 4)] * 2


@pytest.mark.parametrize("cls", [MultiHeadAttention, GroupedQueryAttention])
@pytest.mark.parametrize("window", [None, 2])
def test_decoding_over_a_pair_cache_equals_the_stacked_cache(cls, window):
    arguments = {"num_heads": 4, "key_dim": 8, "sliding_window": window}
    if cls is GroupedQueryAttention:
        arguments = {
            "num_query_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "sliding_window": window,
        }
    layer = cls(**arguments, attention_positions="rotary")
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    full = numpy(layer(x, x, use_causal_mask=True))
    stacked = layer.initial_cache(2, 5)
    pair = layer.initial_cache(2, 5, layout="pair")
    assert is_pair_cache(pair) and tuple(pair[0].shape) == (
        2,
        5,
        layer.num_key_value_heads,
        8,
    )
    # A prompt of 2, then one step at a time.
    steps = [(0, 2), (2, 3), (3, 4), (4, 5)]
    for start, stop in steps:
        part = x[:, start:stop]
        out_stacked, stacked = layer(
            part, part, use_causal_mask=True, cache=stacked, cache_update_index=start
        )
        out_pair, pair = layer(
            part, part, use_causal_mask=True, cache=pair, cache_update_index=start
        )
        assert isinstance(pair, tuple) and len(pair) == 2
        np.testing.assert_allclose(numpy(out_pair), numpy(out_stacked), atol=1e-6)
        np.testing.assert_allclose(numpy(out_pair), full[:, start:stop], atol=1e-5)
    np.testing.assert_allclose(numpy(pair[0]), numpy(stacked)[:, 0], atol=1e-6)
    np.testing.assert_allclose(numpy(pair[1]), numpy(stacked)[:, 1], atol=1e-6)


def test_a_pair_cache_under_jit_compile_keeps_its_layout():
    layer = GroupedQueryAttention(num_query_heads=2, num_key_value_heads=1, head_dim=4)
    x = rng.normal(size=(1, 3, 8)).astype("float32")
    layer(x, x)
    pair = layer.initial_cache(1, 4, layout="pair")

    class Step(keras.Model):
        def call(self, inputs):
            return layer(
                inputs, inputs, cache=pair, cache_update_index=1, use_causal_mask=True
            )

    model = Step()
    model.compile(jit_compile=keras.backend.backend() != "torch")
    output, cache = model.predict_on_batch(x[:, :1])
    assert len(cache) == 2 and tuple(cache[0].shape) == (1, 4, 1, 4)
    assert np.abs(np.asarray(cache[0])[:, 1]).max() > 0


# keras-hub's Gemma 3n layout: one tensor (B, 2, N, S, H), heads first.


def test_a_heads_first_cache_writes_and_reads_as_the_stacked_one():
    cache = empty_cache(2, 6, 3, 4, "float32", layout="heads_first")
    assert tuple(cache.shape) == (2, 2, 3, 6, 4)
    assert is_heads_first_cache(cache, "heads_first")
    assert not is_heads_first_cache(cache, "stacked")
    assert cache_slots(cache, "heads_first") == 6
    assert int(cache_length(cache, "heads_first")) == 6
    check_cache(cache, 3, 4, 4, "heads_first")
    keys = rng.normal(size=(2, 2, 3, 4)).astype("float32")
    values = rng.normal(size=(2, 2, 3, 4)).astype("float32")
    written = write_keys_values(cache, 3, keys, values, "heads_first")
    stacked = write_keys_values(empty_cache(2, 6, 3, 4, "float32"), 3, keys, values)
    np.testing.assert_array_equal(
        numpy(written), np.transpose(numpy(stacked), (0, 1, 3, 2, 4))
    )
    read_keys, read_values = read_keys_values(written, "float32", "heads_first")
    np.testing.assert_array_equal(numpy(read_keys)[:, 3:5], keys)
    np.testing.assert_array_equal(numpy(read_values)[:, 3:5], values)
    with pytest.raises(ValueError, match="heads_first cache \\(keras-hub's layout"):
        empty_cache(1, 4, 2, 8, "int8", layout="heads_first")


def test_a_malformed_heads_first_cache_is_named():
    # A stacked cache (B, 2, S, N, H) read as heads first: N=2 is not 6.
    stacked = empty_cache(1, 6, 2, 8, "float32")
    with pytest.raises(
        ValueError, match="heads-first cache is one float tensor .* received "
    ):
        check_cache(stacked, 2, 8, 8, "heads_first")
    with pytest.raises(ValueError, match="received int32"):
        check_cache(ops.zeros((1, 2, 2, 6, 8), "int32"), 2, 8, 8, "heads_first")


@pytest.mark.parametrize("window", [None, 2])
def test_decoding_over_a_heads_first_cache_equals_the_stacked_cache(window):
    arguments = {"num_query_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
    keras.utils.set_random_seed(0)
    layer = GroupedQueryAttention(
        **arguments, sliding_window=window, attention_positions="rotary"
    )
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    full = numpy(layer(x, x, use_causal_mask=True))
    heads_first = GroupedQueryAttention(
        **arguments,
        sliding_window=window,
        attention_positions="rotary",
        cache_layout="heads_first",
    )
    heads_first(x, x)
    heads_first.set_weights(layer.get_weights())
    stacked = layer.initial_cache(2, 5)
    cache = heads_first.initial_cache(2, 5)
    assert tuple(cache.shape) == (2, 2, 2, 5, 8)
    for start, stop in [(0, 2), (2, 3), (3, 4), (4, 5)]:
        part = x[:, start:stop]
        out_stacked, stacked = layer(
            part, part, use_causal_mask=True, cache=stacked, cache_update_index=start
        )
        out, cache = heads_first(
            part, part, use_causal_mask=True, cache=cache, cache_update_index=start
        )
        np.testing.assert_allclose(numpy(out), numpy(out_stacked), atol=1e-6)
        np.testing.assert_allclose(numpy(out), full[:, start:stop], atol=1e-5)
    np.testing.assert_allclose(
        numpy(cache), np.transpose(numpy(stacked), (0, 1, 3, 2, 4)), atol=1e-6
    )
    # The layer still reads a stacked or pair cache given to it.
    pair = heads_first.initial_cache(2, 5, layout="pair")
    out, pair = heads_first(
        x, x, use_causal_mask=True, cache=pair, cache_update_index=0
    )
    np.testing.assert_allclose(numpy(out), full, atol=1e-5)


def test_a_heads_first_cache_under_jit_compile_keeps_its_layout():
    layer = GroupedQueryAttention(
        num_query_heads=2, num_key_value_heads=1, head_dim=4, cache_layout="heads_first"
    )
    x = rng.normal(size=(1, 3, 8)).astype("float32")
    layer(x, x)
    cache = layer.initial_cache(1, 4)

    class Step(keras.Model):
        def call(self, inputs):
            return layer(
                inputs, inputs, cache=cache, cache_update_index=1, use_causal_mask=True
            )

    model = Step()
    model.compile(jit_compile=keras.backend.backend() != "torch")
    output, new_cache = model.predict_on_batch(x[:, :1])
    assert tuple(new_cache.shape) == (1, 2, 1, 4, 4)
    assert np.abs(np.asarray(new_cache)[:, :, :, 1]).max() > 0
    assert np.abs(np.asarray(new_cache)[:, :, :, 0]).max() == 0
