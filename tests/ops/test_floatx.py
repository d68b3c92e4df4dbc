"""The ops under `keras.config.set_floatx("bfloat16")` or `("float16")`.

Keras gives `ops.arange` without a dtype, and Python ints, the float's width
there (int16), so an index an op builds (positions, offsets, buckets, masks,
tiles of the chunked path) must be int32 of its own, or TensorFlow refuses to
add it to an int32 offset. Each op here runs on 16-bit inputs and gives what
it gives under float32: the same masks and indices, finite attention.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import mods
from keras_attention.ops.random import uniform_from_counter

B, T, N, H = 2, 6, 2, 8
rng = np.random.default_rng(0)
QUERY, KEY, VALUE = (rng.normal(size=(B, T, N, H)).astype("float32") for _ in "qkv")
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]], "int32")


def int32(array):
    # A tensor, not the NumPy array: Keras' JAX `convert_to_tensor` turns an
    # int NumPy array into a float under a 16-bit floatx.
    return ops.convert_to_tensor(array, "int32")


def attend(dtype, query_length=T, kv_heads=N, **options):
    query = ops.cast(QUERY[:, T - query_length :], dtype)
    key = ops.cast(KEY[..., :kv_heads, :], dtype)
    value = ops.cast(VALUE[..., :kv_heads, :], dtype)
    return ka_ops.dot_product_attention(query, key, value, **options)


ATTENTION = {
    "standard": lambda d: attend(d),
    "causal": lambda d: attend(d, is_causal=True),
    "chunked": lambda d: attend(d, is_causal=True, chunk_size=4),
    "sliding_window": lambda d: attend(d, is_causal=True, sliding_window=2),
    "chunked_sliding_window": lambda d: attend(
        d, is_causal=True, sliding_window=2, chunk_size=4
    ),
    "alibi": lambda d: attend(d, is_causal=True, alibi_slopes=ka_ops.alibi_slopes(N)),
    "chunked_alibi": lambda d: attend(
        d, is_causal=True, alibi_slopes=ka_ops.alibi_slopes(N), chunk_size=4
    ),
    "segment_ids": lambda d: attend(d, segment_ids=int32(SEGMENTS)),
    "chunked_segment_ids": lambda d: attend(
        d, segment_ids=int32(SEGMENTS), chunk_size=4
    ),
    "query_offset": lambda d: attend(d, query_length=2, is_causal=True, query_offset=4),
    "chunked_query_offset": lambda d: attend(
        d, query_length=2, is_causal=True, query_offset=4, chunk_size=2
    ),
    "grouped_query": lambda d: attend(d, kv_heads=1, is_causal=True),
    "relative_score_mod": lambda d: attend(
        d,
        is_causal=True,
        score_mod=mods.relative_position_score_mod(num_buckets=8),
        score_mod_inputs=(ops.cast(np.linspace(-1, 1, 8 * N).reshape(8, N), d),),
    ),
    "mask_mods": lambda d: attend(
        d,
        mask_mod=mods.and_masks(
            mods.prefix_lm_mask_mod(int32([2, 3])),
            mods.document_mask_mod(int32(SEGMENTS)),
        ),
    ),
    "chunked_mask_mods": lambda d: attend(
        d, mask_mod=mods.sliding_window_mask_mod(3), chunk_size=4
    ),
    "weights": lambda d: attend(d, is_causal=True, return_weights=True)[1],
}


def as_float32(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_attention_runs_under_a_16_bit_floatx(floatx, case):
    out = ATTENTION[case](floatx)
    assert keras.backend.standardize_dtype(out.dtype) == floatx
    got = as_float32(out)
    assert np.all(np.isfinite(got))
    keras.config.set_floatx("float32")
    want = as_float32(ATTENTION[case]("float32"))
    np.testing.assert_allclose(got, want, atol=0.05)


# Masks, indices and biases: exactly what float32's floatx gives.
INDICES = {
    "causal_mask": lambda: ka_ops.causal_mask(3, 6, offset=int32(3)),
    "sliding_window_mask": lambda: ka_ops.sliding_window_mask(3, 6, 2, offset=3),
    "length_mask": lambda: ka_ops.length_mask(int32([2, 5]), 6),
    "padding_mask": lambda: ka_ops.padding_mask(int32([[3, 4, 0, 0]])),
    "alibi_bias": lambda: ka_ops.alibi_bias(ka_ops.alibi_slopes(N), 3, 6, offset=3),
    "relative_position_buckets": lambda: ka_ops.relative_position_buckets(
        3, 200, offset=int32(150), num_buckets=8, max_distance=64
    ),
    "segment_positions": lambda: ka_ops.segment_positions(int32(SEGMENTS)),
    "dropout": lambda: ka_ops.dropout(ops.ones((4, 8)), 0.5, seed=3),
    # speculative decoding's draws
    "uniform_from_counter": lambda: uniform_from_counter((2, 3), 5, int32(2)),
}


@pytest.mark.parametrize("case", sorted(INDICES))
def test_masks_and_indices_under_a_16_bit_floatx(floatx, case):
    got = ops.convert_to_numpy(INDICES[case]())
    keras.config.set_floatx("float32")
    keras.config.set_dtype_policy("float32")
    want = ops.convert_to_numpy(INDICES[case]())
    if np.issubdtype(want.dtype, np.integer) or want.dtype == bool:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    else:
        got = got.astype("float32")
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
