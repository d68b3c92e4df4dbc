"""The decoding cache of the attention layers: keys and values stacked in one
tensor `(B, 2, S, num_key_value_heads, key_dim)`, in the compute dtype or
quantized to int8 with one scale per row (`cache_dtype="int8"`); or, in
keras-hub's layouts, the pair `(keys, values)` of two tensors
`(B, S, num_key_value_heads, key_dim)` (Gemma 3's) or one tensor with the
heads before the positions, `(B, 2, num_key_value_heads, S, key_dim)`
(Gemma 3n's, `layout="heads_first"`).

A float cache is one tensor; a quantized one is the pair `(values, scales)`:
int8 values of the same shape and the int16 code of each row's scale
`(B, 2, S, num_key_value_heads)`; a pair cache is `(keys, values)`, two
float tensors of rank 4 (told from a quantized pair by the rank of its first
part: 5 there). The functions here make, check, write and read each kind,
so that the layers (`MultiHeadAttention` and its family,
`TransformerDecoder`, the models' `generate`) treat them alike; and check
the cache arguments of a layer's call. A heads-first tensor has the rank of
a stacked one: the functions take it as such where `layout="heads_first"`
(the layer's `cache_layout`), which only a single float tensor can have.

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


# The layouts of a cache (`empty_cache`, `MultiHeadAttention.initial_cache`):
# ours, keys and values stacked in one tensor (or its quantized pair),
# keras-hub's pair of a keys and a values tensor, and keras-hub's Gemma 3n
# tensor `(B, 2, N_kv, S, key_dim)`, heads first.
CACHE_LAYOUTS = ("stacked", "pair", "heads_first")


def is_pair_cache(cache):
    """Whether `cache` is keras-hub's layout, the pair `(keys, values)` of
    `(B, S, N_kv, key_dim)` tensors (rank 4, where a quantized cache's values
    have rank 5)."""
    return isinstance(cache, (tuple, list)) and len(cache[0].shape) == 4


def is_quantized_cache(cache):
    """Whether `cache` is a quantized cache `(values, scales)`."""
    return isinstance(cache, (tuple, list)) and not is_pair_cache(cache)


def stored_keys_values(cache):
    """The tensor holding a cache's keys and values (the int8 values of a
    quantized one, the keys of a pair)."""
    return cache[0] if isinstance(cache, (tuple, list)) else cache


def is_heads_first_cache(cache, layout):
    """Whether `cache` is a heads-first tensor `(B, 2, N_kv, S, key_dim)`:
    one tensor, of a layer whose `layout` is `"heads_first"`."""
    return layout == "heads_first" and not isinstance(cache, (tuple, list))


def _slot_axis(cache, layout=None):
    """The axis of the positions in the tensors of `cache`."""
    if is_pair_cache(cache):
        return 1
    return 3 if is_heads_first_cache(cache, layout) else 2


def cache_slots(cache, layout=None):
    """The number of positions `S` a cache `(B, 2, S, ...)` (or a pair of
    `(B, S, ...)`, or `(B, 2, N_kv, S, key_dim)` heads first) holds (static,
    or None)."""
    return stored_keys_values(cache).shape[_slot_axis(cache, layout)]


def cache_length(cache, layout=None):
    """The number of positions `S` a cache holds (`cache_slots`), as a
    tensor where it is not known when tracing."""
    return ops.shape(stored_keys_values(cache))[_slot_axis(cache, layout)]


def cache_spec(cache):
    """`keras.KerasTensor`s of the shapes and dtypes of a cache's parts."""
    return tree.map_structure(
        lambda part: keras.KerasTensor(part.shape, dtype=part.dtype), cache
    )


def check_cache_layout(layout, dtype=None):
    """Returns `layout`; raises a ValueError unless it is one of
    `CACHE_LAYOUTS` (and, for a pair, `dtype` is not quantized)."""
    if layout not in CACHE_LAYOUTS:
        raise ValueError(
            f"Unknown cache `layout`: {layout!r}. Expected one of "
            f"{CACHE_LAYOUTS}: keys and values stacked in one tensor "
            "(B, 2, S, N_kv, key_dim), the pair (keys, values) of "
            "(B, S, N_kv, key_dim) tensors (keras-hub's Gemma 3 layout), or "
            "one tensor (B, 2, N_kv, S, key_dim) (keras-hub's Gemma 3n "
            "layout, 'heads_first')."
        )
    if layout != "stacked" and dtype in QUANTIZED_CACHE_DTYPES:
        raise ValueError(
            f"A {layout} cache (keras-hub's layout) is not quantized; received "
            f"layout={layout!r} with dtype={dtype!r}. A quantized cache is "
            "stacked."
        )
    return layout


def empty_cache(
    batch_size, max_length, num_key_value_heads, key_dim, dtype, layout="stacked"
):
    """An empty cache `(B, 2, max_length, num_key_value_heads, key_dim)` in
    `dtype`; for a quantized dtype the pair `(values, scales)`; with
    `layout="pair"`, keras-hub's pair `(keys, values)` of `(B, max_length,
    num_key_value_heads, key_dim)` tensors; with `layout="heads_first"`,
    keras-hub's Gemma 3n tensor `(B, 2, num_key_value_heads, max_length,
    key_dim)`."""
    check_cache_layout(layout, dtype)
    if layout == "pair":
        shape = (batch_size, max_length, num_key_value_heads, key_dim)
        return (ops.zeros(shape, dtype=dtype), ops.zeros(shape, dtype=dtype))
    if layout == "heads_first":
        shape = (batch_size, 2, num_key_value_heads, max_length, key_dim)
        return ops.zeros(shape, dtype=dtype)
    shape = (batch_size, 2, max_length, num_key_value_heads, key_dim)
    if dtype in QUANTIZED_CACHE_DTYPES:
        return (
            ops.zeros(shape, dtype=dtype),
            ops.zeros(shape[:-1], dtype=QUANTIZED_CACHE_SCALE_DTYPE),
        )
    return ops.zeros(shape, dtype=dtype)


def check_cache(cache, num_key_value_heads, key_dim, value_dim, layout=None):
    """Raises a ValueError naming what it got unless `cache` is a cache of a
    layer of these sizes (float, a well-formed quantized pair, a pair
    `(keys, values)`, or heads first where `layout="heads_first"`)."""
    if is_pair_cache(cache):
        _check_pair_cache(cache, num_key_value_heads, key_dim, value_dim)
        return
    if is_heads_first_cache(cache, layout):
        _check_heads_first_cache(cache, num_key_value_heads, key_dim, value_dim)
        return
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


def _check_pair_cache(cache, num_key_value_heads, key_dim, value_dim):
    """The checks of a pair cache `(keys, values)` (keras-hub's layout)."""
    if len(cache) != 2:
        raise ValueError(
            f"A pair cache is (keys, values); received a sequence of {len(cache)}."
        )
    keys, values = cache
    shapes = static_shape(keys), static_shape(values)
    dtypes = [keras.backend.standardize_dtype(part.dtype) for part in cache]
    expected = (
        (None, None, num_key_value_heads, key_dim),
        (None, None, num_key_value_heads, value_dim),
    )
    if (
        any(len(shape) != 4 for shape in shapes)
        or any(
            shape[2:] != want[2:] for shape, want in zip(shapes, expected, strict=True)
        )
        or any(
            a is not None and b is not None and a != b
            for a, b in zip(shapes[0][:2], shapes[1][:2], strict=True)
        )
        or not all(keras.backend.is_float_dtype(dtype) for dtype in dtypes)
    ):
        raise ValueError(
            "A pair cache is (keys, values): float keys (batch, max_length, "
            f"num_key_value_heads={num_key_value_heads}, key_dim={key_dim}) "
            f"and values (batch, max_length, num_key_value_heads, "
            f"value_dim={value_dim}); received keys {dtypes[0]} {shapes[0]} "
            f"and values {dtypes[1]} {shapes[1]}."
        )


def _check_heads_first_cache(cache, num_key_value_heads, key_dim, value_dim):
    """The checks of a heads-first cache (keras-hub's Gemma 3n layout)."""
    shape = static_shape(cache)
    expected = (None, 2, num_key_value_heads, None, key_dim)
    if (
        value_dim != key_dim
        or len(shape) != 5
        or shape[1] != 2
        or shape[2] != num_key_value_heads
        or shape[4] != key_dim
        or not keras.backend.is_float_dtype(cache.dtype)
    ):
        raise ValueError(
            "A heads-first cache is one float tensor (batch, 2, "
            f"num_key_value_heads={num_key_value_heads}, max_length, "
            f"key_dim={key_dim}) = {expected}, of a layer whose key_dim equals "
            f"its value_dim (={value_dim}); received "
            f"{keras.backend.standardize_dtype(cache.dtype)} {shape}."
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


def keys_values_as_cache(keys, values, layout="stacked"):
    """`keys` and `values` `(B, S, N_kv, key_dim)` as a float cache of
    `layout`: stacked `(B, 2, S, N_kv, key_dim)`, heads first `(B, 2, N_kv,
    S, key_dim)` or the pair `(keys, values)`."""
    if layout == "pair":
        return (keys, values)
    keys_values = ops.stack((keys, values), axis=1)
    if layout == "heads_first":
        return ops.transpose(keys_values, (0, 1, 3, 2, 4))
    return keys_values


def write_keys_values(cache, index, keys, values, layout=None):
    """`cache` with `keys` and `values` `(B, T, N_kv, key_dim)` written at
    position `index`: stacked for a stacked cache (`write_cache`), each into
    its tensor for a pair cache, stacked heads first for a heads-first one
    (`layout="heads_first"`)."""
    if is_heads_first_cache(cache, layout):
        keys_values = keys_values_as_cache(keys, values, "heads_first")
        return ops.slice_update(
            cache, (0, 0, 0, index, 0), ops.cast(keys_values, cache.dtype)
        )
    if is_pair_cache(cache):
        key_cache, value_cache = cache
        start = (0, index, 0, 0)
        return type(cache)(
            (
                ops.slice_update(key_cache, start, ops.cast(keys, key_cache.dtype)),
                ops.slice_update(
                    value_cache, start, ops.cast(values, value_cache.dtype)
                ),
            )
        )
    return write_cache(cache, index, ops.stack((keys, values), axis=1))


def write_cache(cache, index, keys_values):
    """`cache` with `keys_values` `(B, 2, T, N_kv, key_dim)` written at
    position `index`, quantized first for a quantized cache. One in-place
    write of the stacked keys and values: writing the two halves apart and
    stacking them again would copy the whole buffer at every decoding
    step. A pair cache gets each half in its tensor."""
    if is_pair_cache(cache):
        return write_keys_values(cache, index, keys_values[:, 0], keys_values[:, 1])
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
    quantized one dequantized to `dtype` (a pair stacked)."""
    if is_pair_cache(cache):
        return ops.stack(read_keys_values(cache, dtype), axis=1)
    if is_quantized_cache(cache):
        return dequantize_rows(*cache, dtype)
    return cache


def read_keys_values(cache, dtype, layout=None):
    """The keys and values `(B, S, N_kv, key_dim)` of a cache, a quantized
    one dequantized to `dtype`, a heads-first one (`layout="heads_first"`)
    transposed."""
    if is_heads_first_cache(cache, layout):
        keys_values = ops.transpose(ops.cast(cache, dtype), (0, 1, 3, 2, 4))
        return keys_values[:, 0], keys_values[:, 1]
    if is_pair_cache(cache):
        return tuple(ops.cast(part, dtype) for part in cache)
    keys_values = read_cache(cache, dtype)
    return keys_values[:, 0], keys_values[:, 1]


def quantize_rows(x):
    """Symmetric int8 quantization of the last axis of `x`: `(values,
    scales)`, int8 `round(x / scale)` and the int16 code of `scale =
    max|x| / 127` per row (`QUANTIZED_CACHE_SCALE_DTYPE`; a row of zeros
    gets the code of scale 0)."""
    x = ops.cast(x, "float32")
    scale = ops.amax(ops.abs(x), axis=-1) / _INT8_MAX
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
