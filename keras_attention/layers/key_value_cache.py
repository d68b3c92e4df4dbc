"""The decoding cache of the attention layers: keys and values stacked in one
tensor `(B, 2, S, num_key_value_heads, key_dim)`, in the compute dtype or
quantized to int8 with one scale per row (`cache_dtype="int8"`).

A float cache is one tensor; a quantized one is the pair `(values, scales)`:
int8 values of the same shape and the int16 code of each row's scale
`(B, 2, S, num_key_value_heads)`. The functions here make, check, write and
read either kind, so that the layers (`MultiHeadAttention` and its family,
`TransformerDecoder`, the models' `generate`) treat both alike; and check
the cache arguments of a layer's call.

References:
    - Dettmers et al., "LLM.int8(): 8-bit Matrix Multiplication for
      Transformers at Scale", NeurIPS 2022 (absmax quantization per row).
"""

import math

import keras
from keras import ops, tree

from keras_attention._checks import check_cache_shape, static_shape

# The storage a `cache_dtype` may name besides None (the compute dtype).
QUANTIZED_CACHE_DTYPES = ("int8",)
# One scale per row of key_dim values, in 2 bytes: an int16 code of
# log2(scale) in steps of 1/1024 octave, every scale from 2^-32 to 2^32
# within 0.034% (float16 keeps 0.05%). A float32 scale would take 4 bytes
# (0.31x of a float32 cache at key_dim=16 instead of 0.28x); a float16 one
# would be cast by Keras with the other float inputs of a layer call, to
# bfloat16 (0.4%) under a mixed_bfloat16 policy. Integers are left alone.
QUANTIZED_CACHE_SCALE_DTYPE = "int16"
_SCALE_STEPS_PER_OCTAVE = 1024.0
_ZERO_SCALE = -32768  # the code of a row of zeros (scale 0)
_LARGEST_CODE = 32767
_INT8_MAX = 127.0


def check_cache_dtype(cache_dtype):
    """Returns `cache_dtype`; raises a ValueError unless it is None or one
    of `QUANTIZED_CACHE_DTYPES`."""
    if cache_dtype is None or (
        isinstance(cache_dtype, str) and cache_dtype in QUANTIZED_CACHE_DTYPES
    ):
        return cache_dtype
    choices = ", ".join(map(repr, QUANTIZED_CACHE_DTYPES))
    raise ValueError(
        f"Unknown `cache_dtype`: {cache_dtype!r}. Expected None (a cache in "
        f"the compute dtype) or {choices} (keys and values quantized per row)."
    )


def is_quantized_cache(cache):
    """Whether `cache` is a quantized cache `(values, scales)`."""
    return isinstance(cache, (tuple, list))


def stored_keys_values(cache):
    """The tensor holding a cache's keys and values (the int8 values of a
    quantized one)."""
    return cache[0] if is_quantized_cache(cache) else cache


def cache_slots(cache):
    """The number of positions `S` a cache `(B, 2, S, ...)` holds (static,
    or None)."""
    return stored_keys_values(cache).shape[2]


def cache_length(cache):
    """The number of positions `S` a cache `(B, 2, S, ...)` holds, as a
    tensor where it is not known when tracing."""
    return ops.shape(stored_keys_values(cache))[2]


def cache_spec(cache):
    """`keras.KerasTensor`s of the shapes and dtypes of a cache's parts."""
    return tree.map_structure(
        lambda part: keras.KerasTensor(part.shape, dtype=part.dtype), cache
    )


def empty_cache(batch_size, max_length, num_key_value_heads, key_dim, dtype):
    """An empty cache `(B, 2, max_length, num_key_value_heads, key_dim)` in
    `dtype`; for a quantized dtype the pair `(values, scales)`."""
    shape = (batch_size, 2, max_length, num_key_value_heads, key_dim)
    if dtype in QUANTIZED_CACHE_DTYPES:
        return (
            ops.zeros(shape, dtype=dtype),
            ops.zeros(shape[:-1], dtype=QUANTIZED_CACHE_SCALE_DTYPE),
        )
    return ops.zeros(shape, dtype=dtype)


def check_cache(cache, num_key_value_heads, key_dim, value_dim):
    """Raises a ValueError naming what it got unless `cache` is a cache of a
    layer of these sizes (float, or a well-formed quantized pair)."""
    check_cache_shape(
        static_shape(stored_keys_values(cache)), num_key_value_heads, key_dim, value_dim
    )
    if not is_quantized_cache(cache):
        return
    if len(cache) != 2:
        raise ValueError(
            "A quantized cache is the pair (values, scales); received a "
            f"sequence of {len(cache)}."
        )
    values, scales = cache
    values_dtype = keras.backend.standardize_dtype(values.dtype)
    scales_dtype = keras.backend.standardize_dtype(scales.dtype)
    values_shape, scales_shape = static_shape(values), static_shape(scales)
    if (
        values_dtype not in QUANTIZED_CACHE_DTYPES
        or scales_dtype != QUANTIZED_CACHE_SCALE_DTYPE
        or len(scales_shape) != 4
        or any(
            a is not None and b is not None and a != b
            for a, b in zip(values_shape[:-1], scales_shape, strict=True)
        )
    ):
        raise ValueError(
            "A quantized cache is (values, scales): int8 values (batch, 2, "
            "max_length, num_key_value_heads, key_dim) and int16 scale codes "
            "(batch, 2, max_length, num_key_value_heads); received values "
            f"{values_dtype} {values_shape} and scales {scales_dtype} "
            f"{scales_shape}."
        )


def check_cache_arguments(query, cache, cache_update_index):
    """Raises a ValueError for a `cache_update_index` without a `cache`, or
    for a cache with inputs of several attention axes."""
    if cache_update_index is not None and cache is None:
        raise ValueError(
            "`cache_update_index` needs a `cache` to update; received "
            f"cache=None, cache_update_index={cache_update_index}."
        )
    if cache is not None and len(query.shape) != 3:
        raise ValueError(
            "A cache needs (batch, length, dim) inputs attending over one "
            f"sequence axis; received query shape {static_shape(query)}."
        )


def write_cache(cache, index, keys_values):
    """`cache` with `keys_values` `(B, 2, T, N_kv, key_dim)` written at
    position `index`, quantized first for a quantized cache. One in-place
    write of the stacked keys and values: writing the two halves apart and
    stacking them again would copy the whole buffer at every decoding
    step."""
    if is_quantized_cache(cache):
        values, scales = cache
        new_values, new_scales = quantize_rows(keys_values)
        return (
            ops.slice_update(values, (0, 0, index, 0, 0), new_values),
            ops.slice_update(scales, (0, 0, index, 0), new_scales),
        )
    return ops.slice_update(
        cache, (0, 0, index, 0, 0), ops.cast(keys_values, cache.dtype)
    )


def read_cache(cache, dtype):
    """The keys and values `(B, 2, S, N_kv, key_dim)` of a cache, a
    quantized one dequantized to `dtype`."""
    if is_quantized_cache(cache):
        return dequantize_rows(*cache, dtype)
    return cache


def quantize_rows(x):
    """Symmetric int8 quantization of the last axis of `x`: `(values,
    scales)`, int8 `round(x / scale)` and the int16 code of `scale =
    max|x| / 127` per row (`QUANTIZED_CACHE_SCALE_DTYPE`; a row of zeros
    gets the code of scale 0)."""
    x = ops.cast(x, "float32")
    scale = ops.max(ops.abs(x), axis=-1) / _INT8_MAX
    nonzero = scale > 0
    log_scale = ops.log2(ops.where(nonzero, scale, ops.ones_like(scale)))
    codes = ops.clip(
        ops.round(log_scale * _SCALE_STEPS_PER_OCTAVE), -_LARGEST_CODE, _LARGEST_CODE
    )
    codes = ops.where(nonzero, codes, float(_ZERO_SCALE))
    codes = ops.cast(codes, QUANTIZED_CACHE_SCALE_DTYPE)
    # Rounded with the scale as it is read back, so each value is the
    # nearest step of that scale.
    stored = decode_scales(codes)
    safe = ops.where(stored > 0, stored, ops.ones_like(stored))
    values = ops.clip(ops.round(x / safe[..., None]), -_INT8_MAX, _INT8_MAX)
    return ops.cast(values, "int8"), codes


def decode_scales(codes):
    """The float32 scales of int16 `codes` (`quantize_rows`)."""
    codes = ops.cast(codes, "float32")
    scales = ops.exp(codes * (math.log(2.0) / _SCALE_STEPS_PER_OCTAVE))
    return ops.where(codes == _ZERO_SCALE, 0.0, scales)


def dequantize_rows(values, codes, dtype="float32"):
    """`values * scale` per row (`quantize_rows` undone), in `dtype`."""
    scales = decode_scales(codes)[..., None]
    return ops.cast(ops.cast(values, "float32") * scales, dtype)
