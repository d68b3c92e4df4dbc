import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import DotProductAttention, TokenAndPositionEmbedding
from tests import numpy_reference as ref
from tests.layer_test import run_layer_test


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


IDS = np.array([[4, 2, 9, 0, 0], [1, 1, 1, 1, 1]], "int32")


@pytest.mark.parametrize("position_encoding", ["learned", "sinusoidal"])
def test_sum_of_token_and_position(position_encoding):
    layer = TokenAndPositionEmbedding(
        10, 5, 6, position_encoding=position_encoding, scale_embeddings=True
    )
    out = ops.convert_to_numpy(layer(IDS))
    tokens = ops.convert_to_numpy(layer.token_embedding.embeddings)[IDS] * np.sqrt(6)
    if position_encoding == "learned":
        positions = ops.convert_to_numpy(layer.position_layer.embeddings)
    else:
        positions = ref.sinusoidal(5, 6)
    np.testing.assert_allclose(out, tokens + positions[None], atol=1e-5)


def test_mask_zero_emits_a_mask():
    layer = TokenAndPositionEmbedding(10, 5, 6, mask_zero=True)
    mask = ops.convert_to_numpy(layer.compute_mask(IDS))
    np.testing.assert_array_equal(mask, IDS != 0)
    assert TokenAndPositionEmbedding(10, 5, 6).compute_mask(IDS) is None


def test_mask_reaches_attention_in_a_functional_model():
    tokens = keras.Input((5,), dtype="int32")
    x = TokenAndPositionEmbedding(10, 5, 6, mask_zero=True)(tokens)
    _, weights = DotProductAttention(scale=True)([x, x], return_attention_scores=True)
    w = keras.Model(tokens, weights).predict(IDS, verbose=0)
    assert np.all(w[0, :, 3:] == 0.0)


@pytest.mark.parametrize("position_encoding", ["learned", "sinusoidal"])
def test_keeps_the_layer_contract(position_encoding):
    run_layer_test(
        TokenAndPositionEmbedding,
        {
            "vocabulary_size": 10,
            "sequence_length": 5,
            "embedding_dim": 6,
            "mask_zero": True,
            "position_encoding": position_encoding,
            "scale_embeddings": True,
        },
        IDS,
        expected_output_shape=(2, 5, 6),
    )


def test_too_long_input_and_bad_config():
    with pytest.raises(ValueError, match=r"5 tokens.*sequence_length=4"):
        TokenAndPositionEmbedding(10, 4, 6)(IDS)
    with pytest.raises(ValueError, match=r"Unknown `position_encoding`: 'rotary'"):
        TokenAndPositionEmbedding(10, 4, 6, position_encoding="rotary")
    with pytest.raises(ValueError, match="`embedding_dim` must be a positive integer"):
        TokenAndPositionEmbedding(10, 4, 0)


def test_embeddings_initializer_initializes_both_tables():
    layer = TokenAndPositionEmbedding(5, 4, 3, embeddings_initializer="ones")
    out = np_(layer(np.array([[1, 2, 3, 4]])))
    np.testing.assert_array_equal(out, np.full((1, 4, 3), 2.0))


@pytest.mark.parametrize(
    "position_encoding, tables", [("learned", 2), ("sinusoidal", 1)]
)
def test_trainable_tables(position_encoding, tables):
    layer = TokenAndPositionEmbedding(5, 4, 3, position_encoding=position_encoding)
    layer.build((2, 4))
    assert len(layer.trainable_weights) == tables
    assert not layer.non_trainable_weights


def test_eager_output_carries_the_padding_mask():
    ids = np.array([[1, 0], [3, 0]])
    out = TokenAndPositionEmbedding(5, 4, 3, mask_zero=True)(ids)
    mask = keras.src.backend.get_keras_mask(out)
    np.testing.assert_array_equal(ops.convert_to_numpy(mask), ids != 0)
