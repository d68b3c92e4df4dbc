import keras
import numpy as np
import pytest
from keras import ops

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
    is_quantized_cache,
    quantize_rows,
    read_cache,
    write_cache,
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
