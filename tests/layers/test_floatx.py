"""Under `keras.config.set_floatx("bfloat16")` or `("float16")` Keras gives
Python ints and `ops.arange` the float's width (int16), so every index the
attention computes (positions, offsets, buckets, masks) must be int32 of its
own, and so must the constants of dropout's integer hash (Keras' JAX ops turn
NumPy and Python ints into float32 under bfloat16): each layer and model here
runs, in inference, training and cached decoding, as Keras' own layers do."""

import functools

import keras
import numpy as np
import pytest

from keras_attention import layers
from tests.models.model_cases import tiny_gpt, tiny_transformer

rng = np.random.default_rng(0)
X = rng.normal(size=(2, 6, 16)).astype("float32")
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]], "int32")


def segments():
    # A tensor, not the NumPy array: Keras 3.15's JAX `convert_to_tensor`
    # turns an int NumPy array into float32 under floatx bfloat16 (it casts
    # to `standardize_dtype(None)`), and the layer then refuses float ids.
    return keras.ops.convert_to_tensor(SEGMENTS, "int32")


def mha(**options):
    return layers.MultiHeadAttention(num_heads=2, key_dim=8, **options)


CASES = {
    "causal": lambda: mha()(X, X, use_causal_mask=True),
    "chunked": lambda: mha(chunk_size=4)(X, X, use_causal_mask=True),
    "sliding_window": lambda: mha(sliding_window=2)(X, X, use_causal_mask=True),
    "segment_ids": lambda: mha()(X, X, segment_ids=segments()),
    "alibi": lambda: mha(attention_positions="alibi")(X, X, use_causal_mask=True),
    "rotary": lambda: mha(attention_positions="rotary")(X, X, use_causal_mask=True),
    "relative": lambda: mha(attention_positions="relative")(X, X, use_causal_mask=True),
    "grouped_query": lambda: layers.GroupedQueryAttention(
        head_dim=8, num_query_heads=4, num_key_value_heads=2
    )(X, X, use_causal_mask=True),
    "grouped_query_rotary": lambda: layers.GroupedQueryAttention(
        head_dim=8,
        num_query_heads=4,
        num_key_value_heads=2,
        attention_positions="rotary",
    )(X, X, use_causal_mask=True),
    "attention_dropout": lambda: mha(dropout=0.5)(X, X, training=True),
    "dropout": lambda: layers.Dropout(0.5)(X, training=True),
    "encoder_block": lambda: layers.TransformerEncoderBlock(32, 2, dropout=0.1)(
        X, training=True
    ),
    "decoder_block": lambda: layers.TransformerDecoderBlock(32, 2)(X),
    "decoder_block_step": lambda: decoder_block_step(),
    "token_and_position": lambda: layers.TokenAndPositionEmbedding(20, 8, 16)(
        token_ids(), start_index=2
    ),
    "token_and_sinusoidal": lambda: layers.TokenAndPositionEmbedding(
        20, 8, 16, input_positions="sinusoidal"
    )(token_ids(), segment_ids=segments()),
    "sinusoidal": lambda: layers.SinusoidalPositionEncoding()(X),
    "sinusoidal_start_index": lambda: layers.SinusoidalPositionEncoding()(
        X, start_index=3
    ),
    "sinusoidal_segments": lambda: layers.SinusoidalPositionEncoding()(
        X, segment_ids=segments()
    ),
    "learned_positions": lambda: layers.PositionEmbedding(12)(X, start_index=3),
    "rotary_embedding": lambda: layers.RotaryEmbedding()(X, start_index=3),
    "rotary_segments": lambda: layers.RotaryEmbedding()(X, segment_ids=segments()),
    "relative_position_bias": lambda: layers.RelativePositionBias(
        2, num_buckets=8, max_distance=16
    )(X[:, :2], X, query_offset=4),
}


def token_ids():
    return keras.ops.convert_to_tensor([[3, 4, 5, 6, 7, 8]] * 2, "int32")


def cache_step(positions):
    """Two decoding steps through a cache, the second at index 1."""
    layer = mha(attention_positions=positions)
    cache = layer.initial_cache(2, 6)
    for t in range(2):
        out, cache = layer(
            X[:, t : t + 1],
            X[:, t : t + 1],
            use_causal_mask=True,
            cache=cache,
            cache_update_index=t,
        )
    return out


def decoder_block_step():
    block = layers.TransformerDecoderBlock(32, 2, attention_positions="relative")
    block(X)  # builds it
    cache = block.initial_self_attention_cache(2, 6)
    for t in range(2):
        out, cache = block(
            X[:, t : t + 1],
            self_attention_cache=cache,
            self_attention_cache_update_index=t,
        )
    return out


CASES.update(
    {
        f"cache_step_{positions}": functools.partial(cache_step, positions)
        for positions in (None, "rotary", "alibi", "relative")
    }
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_layers_run_under_a_16_bit_floatx(floatx, case):
    out = CASES[case]()
    assert keras.backend.standardize_dtype(out.dtype) == floatx
    assert np.all(
        np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32")))
    )


# A Python constant taking floatx overflows float16 (beam search's -1e9 did).
@pytest.mark.filterwarnings("error:overflow encountered:RuntimeWarning")
def test_models_generate_under_a_16_bit_floatx(floatx):
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    tokens = keras.ops.convert_to_numpy(tiny_gpt().generate(ids, max_length=8))
    assert tokens.shape == (2, 8) and tokens[:, 0].tolist() == [5, 8]
    for beam_width in (1, 2):
        tokens = tiny_transformer().generate(ids, max_length=5, beam_width=beam_width)
        assert keras.ops.convert_to_numpy(tokens).shape == (2, 5)
