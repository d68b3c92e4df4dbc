"""The chunked (memory-efficient) path of dot_product_attention."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import dot_product_attention, sliding_window_mask
from tests.conftest import trainable_gradients

rng = np.random.default_rng(0)
B, T, S, N, H = 2, 19, 45, 3, 8  # S not a multiple of the chunk: padded block
Q = rng.normal(size=(B, T, N, H)).astype("float32")
K = rng.normal(size=(B, S, N, H)).astype("float32")
V = rng.normal(size=(B, S, N, 5)).astype("float32")
MASKS = {
    "none": None,
    "padding": rng.random((B, 1, 1, S)) > 0.3,
    "full": rng.random((B, N, T, S)) > 0.3,
}


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def queries(length):
    return (
        np.random.default_rng(length).normal(size=(B, length, N, H)).astype("float32")
    )


def mask_for(name, query_length):
    if name != "full":
        return MASKS[name]
    return np.random.default_rng(1).random((B, N, query_length, S)) > 0.3


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize(
    ("chunk_size", "query_length"),
    # Chunks of one query over a short query: each chunk is a compiled step.
    [(1, 5), (8, T), (8, S), (8, 60), (64, T), (64, 60)],
)
def test_matches_standard_path(mask, is_causal, chunk_size, query_length):
    # Causal tiles above the diagonal are skipped: fewer, as many and more
    # queries than keys put the diagonal in every place.
    q = queries(query_length)
    m = mask_for(mask, query_length)
    want = dot_product_attention(q, K, V, mask=m, is_causal=is_causal)
    got = dot_product_attention(
        q, K, V, mask=m, is_causal=is_causal, chunk_size=chunk_size
    )
    np.testing.assert_allclose(np_(got), np_(want), atol=2e-6)


def test_matches_keras_dot_product_attention():
    mask = np.broadcast_to(MASKS["padding"], (B, N, T, S))
    v = rng.normal(size=(B, S, N, H)).astype("float32")
    ours = dot_product_attention(Q, K, v, mask=mask, chunk_size=16)
    theirs = keras.ops.dot_product_attention(Q, K, v, mask=mask)
    np.testing.assert_allclose(np_(ours), np_(theirs), atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(("mask", "query_length"), [("padding", S), ("full", 60)])
def test_gradients_match_standard_path(is_causal, mask, query_length):
    weights = rng.normal(size=(5,)).astype("float32")
    q = keras.Variable(queries(query_length))
    k, v = keras.Variable(K), keras.Variable(V)
    mask = mask_for(mask, query_length)

    def loss(chunk):
        def fn():
            out = dot_product_attention(
                q, k, v, mask=mask, is_causal=is_causal, chunk_size=chunk
            )
            return ops.sum(ops.multiply(out, weights))

        return fn

    standard = trainable_gradients([q, k, v], loss(None))
    chunked = trainable_gradients([q, k, v], loss(16))
    for a, b in zip(standard, chunked, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    mask = np.ones((B, 1, T, S), bool)
    mask[:, :, 3] = False
    out = np_(dot_product_attention(Q, K, V, mask=mask, chunk_size=8))
    assert np.all(out[:, 3] == 0.0) and np.all(np.isfinite(out))
    q = keras.Variable(Q)
    grads = trainable_gradients(
        [q], lambda: ops.sum(dot_product_attention(q, K, V, mask=mask, chunk_size=8))
    )
    assert np.all(np.isfinite(grads[0])) and np.all(grads[0][:, 3] == 0.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_matches_float32(dtype):
    q, k, v = (ops.cast(x, dtype) for x in (Q, K, V))
    got = dot_product_attention(q, k, v, mask=MASKS["padding"], chunk_size=16)
    assert keras.backend.standardize_dtype(got.dtype) == dtype
    want = dot_product_attention(Q, K, V, mask=MASKS["padding"])
    np.testing.assert_allclose(np_(got), np_(want), atol=5e-2)


def test_jit_compiled_matches_eager():
    q = keras.Input((T, N, H))
    k = keras.Input((S, N, H))
    v = keras.Input((S, N, 5))

    class Chunked(keras.layers.Layer):
        def call(self, q, k, v):
            # Three key blocks, the last one padded (S = 45): each block is
            # unrolled where the backend's compiler traces the loop (torch).
            return dot_product_attention(q, k, v, is_causal=True, chunk_size=16)

        def compute_output_shape(self, q_shape, k_shape, v_shape):
            return (*q_shape[:-1], v_shape[-1])

    model = keras.Model([q, k, v], Chunked()(q, k, v))
    model.compile(jit_compile=True)
    got = model.predict([Q, K, V], verbose=0)
    want = dot_product_attention(Q, K, V, is_causal=True)
    np.testing.assert_allclose(got, np_(want), atol=2e-6)


def test_weights_cannot_be_returned():
    with pytest.raises(ValueError, match="return_weights.*chunk_size"):
        dot_product_attention(Q, K, V, chunk_size=8, return_weights=True)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("mask", ["none", "padding"])
@pytest.mark.parametrize(
    ("window", "chunk_size", "query_length"),
    # Windows shorter than a tile, across several tiles, longer than the
    # sequence; fewer and more queries than keys.
    [(1, 8, T), (5, 8, S), (13, 4, 60), (17, 16, T), (100, 16, S)],
)
def test_sliding_window_matches_the_band_mask(
    is_causal, mask, window, chunk_size, query_length
):
    q = queries(query_length)
    band = ops.convert_to_numpy(sliding_window_mask(query_length, S, window))
    m = band if MASKS[mask] is None else MASKS[mask] & band
    want = dot_product_attention(q, K, V, mask=m, is_causal=is_causal)
    for chunk in (None, chunk_size):
        got = dot_product_attention(
            q,
            K,
            V,
            mask=MASKS[mask],
            is_causal=is_causal,
            chunk_size=chunk,
            sliding_window=window,
        )
        np.testing.assert_allclose(np_(got), np_(want), atol=2e-6)


@pytest.mark.parametrize("is_causal", [False, True])
def test_sliding_window_gradients_match_the_band_mask(is_causal):
    weights = rng.normal(size=(5,)).astype("float32")
    q, k, v = keras.Variable(queries(S)), keras.Variable(K), keras.Variable(V)
    band = ops.convert_to_numpy(sliding_window_mask(S, S, 11))

    def loss(**options):
        def fn():
            out = dot_product_attention(q, k, v, is_causal=is_causal, **options)
            return ops.sum(ops.multiply(out, weights))

        return fn

    want = trainable_gradients([q, k, v], loss(mask=band))
    got = trainable_gradients([q, k, v], loss(chunk_size=8, sliding_window=11))
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_tiles_outside_the_window_are_never_computed(is_causal):
    # A NaN value behind a zero weight poisons any tile that reads it (0 * NaN
    # is NaN): the outputs stay finite only if the tiles of keys 0..7 are
    # never computed for the queries 16.. (and, not causal, those of keys
    # 32..39 for the queries ..23), which a window of 8 puts out of reach.
    q, k, v = queries(40), K[:, :40], V[:, :40].copy()
    v[:, :8] = np.nan
    if not is_causal:
        v[:, 32:] = np.nan
    out = np_(
        dot_product_attention(
            q, k, v, is_causal=is_causal, chunk_size=8, sliding_window=8
        )
    )
    assert np.all(np.isfinite(out[:, 16:24]))
    full = np_(dot_product_attention(q, k, v, is_causal=is_causal, chunk_size=8))
    assert np.all(np.isnan(full[:, 16:24]))


@pytest.mark.parametrize("window", [0, -3, 2.5, True])
def test_a_bad_sliding_window_is_refused(window):
    with pytest.raises(ValueError, match="sliding_window"):
        dot_product_attention(Q, K, V, sliding_window=window)
