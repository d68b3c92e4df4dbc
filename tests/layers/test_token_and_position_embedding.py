import io
import zipfile
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import DotProductAttention, TokenAndPositionEmbedding
from keras_attention.layers.tied_embedding import TiedEmbedding
from tests import numpy_reference as ref
from tests.keras_versions import requires_keras_3_15_files
from tests.layer_test import (
    assert_saved_model_matches,
    each_document_alone,
    run_layer_test,
)


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


IDS = np.array([[4, 2, 9, 0, 0], [1, 1, 1, 1, 1]], "int32")


@pytest.mark.parametrize("input_positions", ["learned", "sinusoidal"])
def test_sum_of_token_and_position(input_positions):
    layer = TokenAndPositionEmbedding(
        10, 5, 6, input_positions=input_positions, scale_embeddings=True
    )
    out = ops.convert_to_numpy(layer(IDS))
    tokens = ops.convert_to_numpy(layer.token_embedding.embeddings)[IDS] * np.sqrt(6)
    if input_positions == "learned":
        positions = ops.convert_to_numpy(layer.position_embedding.position_embeddings)
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


@pytest.mark.parametrize("input_positions", ["learned", "sinusoidal"])
def test_keeps_the_layer_contract(input_positions):
    run_layer_test(
        TokenAndPositionEmbedding,
        {
            "vocabulary_size": 10,
            "sequence_length": 5,
            "embedding_dim": 6,
            "mask_zero": True,
            "input_positions": input_positions,
            "scale_embeddings": True,
        },
        IDS,
        expected_output_shape=(2, 5, 6),
    )


def test_too_long_input_and_bad_config():
    with pytest.raises(ValueError, match=r"5 tokens.*sequence_length=4"):
        TokenAndPositionEmbedding(10, 4, 6)(IDS)
    with pytest.raises(ValueError, match=r"Unknown `input_positions`: 'rotary'"):
        TokenAndPositionEmbedding(10, 4, 6, input_positions="rotary")
    with pytest.raises(ValueError, match="`embedding_dim` must be a positive integer"):
        TokenAndPositionEmbedding(10, 4, 0)


def test_embeddings_initializer_initializes_both_tables():
    layer = TokenAndPositionEmbedding(5, 4, 3, embeddings_initializer="ones")
    out = np_(layer(np.array([[1, 2, 3, 4]])))
    np.testing.assert_array_equal(out, np.full((1, 4, 3), 2.0))


@pytest.mark.parametrize("input_positions, tables", [("learned", 2), ("sinusoidal", 1)])
def test_trainable_tables(input_positions, tables):
    layer = TokenAndPositionEmbedding(5, 4, 3, input_positions=input_positions)
    layer.build((2, 4))
    assert len(layer.trainable_weights) == tables
    assert not layer.non_trainable_weights


def test_eager_output_carries_the_padding_mask():
    ids = np.array([[1, 0], [3, 0]])
    out = TokenAndPositionEmbedding(5, 4, 3, mask_zero=True)(ids)
    mask = keras.src.backend.get_keras_mask(out)
    np.testing.assert_array_equal(ops.convert_to_numpy(mask), ids != 0)


@pytest.mark.parametrize("input_positions", ["learned", "sinusoidal"])
def test_parts_have_keras_hubs_attribute_names(input_positions):
    layer = TokenAndPositionEmbedding(10, 5, 6, input_positions=input_positions)
    layer.build((2, 5))
    assert isinstance(layer.token_embedding, keras.layers.Embedding)
    kind = "PositionEmbedding" if input_positions == "learned" else "Sinusoidal"
    assert type(layer.position_embedding).__name__.startswith(kind)
    # This package's earlier name for the position part stays an alias.
    assert layer.position_layer is layer.position_embedding


def test_matches_keras_hub_with_its_tables_copied_by_name():
    # keras-hub's TokenAndPositionEmbedding, as keras.io's examples build it
    # (mask_zero=True), with its two tables copied through the attribute names
    # the two layers share: the same sums and the same Keras mask.
    keras_hub = pytest.importorskip("keras_hub")
    hub = keras_hub.layers.TokenAndPositionEmbedding(10, 5, 6, mask_zero=True)
    ours = TokenAndPositionEmbedding(10, 5, 6, mask_zero=True)
    want = hub(IDS)
    ours.build(IDS.shape)
    ours.token_embedding.embeddings.assign(np_(hub.token_embedding.embeddings))
    ours.position_embedding.position_embeddings.assign(
        np_(hub.position_embedding.position_embeddings)
    )
    got = ours(IDS)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-6)
    get_mask = keras.src.backend.get_keras_mask
    np.testing.assert_array_equal(np_(get_mask(got)), np_(get_mask(want)))
    positions = np.array([[4, 3, 2, 1, 0], [0, 0, 1, 1, 2]])
    np.testing.assert_allclose(
        np_(ours(IDS, positions=positions)),
        np_(hub(IDS, positions=positions)),
        atol=1e-6,
    )


@requires_keras_3_15_files
def test_loads_a_model_saved_by_0_1_0(tmp_path):
    # Saved by keras_attention 0.1.0 (369079b) on TensorFlow, when the
    # position table of TokenAndPositionEmbedding was the attribute
    # `position_layer` (the path of its weights in the file) and that of
    # PositionEmbedding `embeddings`: a learned TokenAndPositionEmbedding
    # (vocabulary 11, length 8, width 4, mask_zero) plus a PositionEmbedding.
    data = Path(__file__).parent.parent / "data"
    model = keras.saving.load_model(
        data / "embeddings_saved_by_0_1_0.keras", safe_mode=True
    )
    ids = np.array([[3, 1, 4, 1, 5, 0], [9, 2, 6, 0, 0, 0]], "int32")
    want = np.load(data / "embeddings_saved_by_0_1_0_output.npy")
    np.testing.assert_allclose(np_(model(ids)), want, atol=1e-6)
    # Saved again, the table goes under keras-hub's name and loads back.
    path = tmp_path / "model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        weights = h5py.File(io.BytesIO(archive.read("model.weights.h5")))
        names = []
        weights.visit(names.append)
    assert "layers/token_and_position_embedding/position_embedding/vars/0" in names
    assert not any("position_layer" in name for name in names)
    again = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(np_(again(ids)), want, atol=1e-6)


def test_tied_embedding_maps_vectors_back_through_its_table(tmp_path):
    # The fallback for Keras' ReversibleEmbedding on Keras 3.11.
    layer = TiedEmbedding(11, 4)
    ids = np.array([[1, 2, 3]])
    vectors = layer(ids)
    logits = layer(vectors, reverse=True)
    table = ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(
        ops.convert_to_numpy(logits),
        ops.convert_to_numpy(vectors) @ table.T,
        rtol=1e-5,
        atol=1e-7,
    )
    assert layer.compute_output_shape((2, 3, 4), reverse=True) == (2, 3, 11)
    inputs = keras.Input((3,), dtype="int32")
    model = keras.Model(inputs, layer(layer(inputs), reverse=True))
    assert_saved_model_matches(model, ids, tmp_path)
    with pytest.raises(ValueError, match="mask_zero"):
        TiedEmbedding(11, 4, mask_zero=True)


def test_without_input_positions_only_the_tokens_are_embedded():
    # For a model whose positions are inside attention (rotary, ALiBi).
    layer = TokenAndPositionEmbedding(10, 5, 6, input_positions=None, mask_zero=True)
    out = np_(layer(IDS))
    np.testing.assert_array_equal(out, np_(layer.token_embedding.embeddings)[IDS])
    assert layer.position_embedding is None and len(layer.weights) == 1
    run_layer_test(
        TokenAndPositionEmbedding,
        {
            "vocabulary_size": 10,
            "sequence_length": 5,
            "embedding_dim": 6,
            "mask_zero": True,
            "input_positions": None,
        },
        IDS,
        expected_output_shape=(2, 5, 6),
    )


@pytest.mark.parametrize("input_positions", ["learned", "sinusoidal"])
def test_segment_ids_restart_the_positions_at_each_document(input_positions):
    layer = TokenAndPositionEmbedding(20, 8, 4, input_positions=input_positions)
    tokens = np.array([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    ids = np.array([[1, 1, 1, 2, 2, 2], [4, 4, 4, 4, 4, 5]])
    packed = np_(layer(tokens, segment_ids=ids))
    alone = each_document_alone(layer, tokens, ids)
    np.testing.assert_allclose(packed, alone, atol=1e-6)
    with pytest.raises(ValueError, match="either `positions` or `segment_ids`"):
        layer(tokens, segment_ids=ids, positions=np.arange(6))
    with pytest.raises(ValueError, match="start_index=2"):
        layer(tokens, segment_ids=ids, start_index=2)
    with pytest.raises(ValueError, match=r"\(batch, 6\).*dtype float32"):
        layer(tokens, segment_ids=ids.astype("float32"))
