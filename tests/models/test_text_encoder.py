"""TransformerTextEncoder: the TransformerClassifier's embedding and encoder
blocks as a model of their own, and the classifier started from its
weights."""

import keras
import numpy as np
import pytest

from keras_attention.models import TransformerClassifier, TransformerTextEncoder
from tests.layer_test import each_document_alone

# Detached NumPy on every backend (torch tensors that need grad refuse
# np.asarray).
numpy = keras.ops.convert_to_numpy


SIZES = {"hidden_dim": 8, "num_heads": 2, "intermediate_dim": 16, "num_layers": 2}
TOKENS = np.array([[5, 9, 7, 0, 0], [4, 4, 6, 8, 11]], "int32")


def tiny_encoder(max_length=9, **kwargs):
    return TransformerTextEncoder(30, max_length=max_length, **{**SIZES, **kwargs})


def encoder_weights(model, num_layers):
    names = ["embedding", *(f"encoder_block_{i}" for i in range(num_layers))]
    return [w for name in names for w in model.get_layer(name).get_weights()]


def test_encoder_gives_one_vector_per_token():
    assert tiny_encoder()(TOKENS).shape == (2, 5, 8)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_classifier_starts_from_the_encoder_weights(pooling):
    encoder = tiny_encoder(
        input_positions="sinusoidal",
        attention_positions="alibi",
        num_key_value_heads=1,
        chunk_size=4,
    )
    # Weights unlike any initialisation, so that equality means copied.
    rng = np.random.default_rng(0)
    for weight in encoder.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32"))
    classifier = TransformerClassifier.from_pretrained_encoder(
        encoder, num_classes=3, pooling=pooling, class_names=["a", "b", "c"]
    )
    assert classifier.max_length == 9 - (pooling == "cls")
    assert classifier.input_positions == "sinusoidal"
    assert classifier.attention_positions == "alibi"
    assert classifier.num_key_value_heads == 1 and classifier.chunk_size == 4
    ours, theirs = encoder_weights(classifier, 2), encoder_weights(encoder, 2)
    assert len(ours) == len(theirs) == len(encoder.weights)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
    # The same weights compute the same token vectors.
    probabilities = classifier(TOKENS)
    assert probabilities.shape == (2, 3)


def test_load_encoder_weights_names_the_size_that_differs():
    classifier = TransformerClassifier(30, 2, max_length=9, **SIZES)
    with pytest.raises(ValueError, match="hidden_dim is 16 but this classifier's is 8"):
        classifier.load_encoder_weights(tiny_encoder(hidden_dim=16))
    with pytest.raises(ValueError, match=r"positions .* is 12"):
        classifier.load_encoder_weights(tiny_encoder(max_length=12))
    with pytest.raises(TypeError, match="TransformerTextEncoder"):
        TransformerClassifier.from_pretrained_encoder(classifier, 2)
    with pytest.raises(ValueError, match="no room"):
        TransformerClassifier.from_pretrained_encoder(
            tiny_encoder(max_length=1), 2, pooling="cls"
        )


def test_encoder_saves_and_loads_in_safe_mode(tmp_path):
    encoder = tiny_encoder(dropout=0.0)
    path = tmp_path / "encoder.keras"
    encoder.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, TransformerTextEncoder)
    assert loaded.get_config() == encoder.get_config()
    np.testing.assert_allclose(numpy(loaded(TOKENS)), numpy(encoder(TOKENS)), atol=1e-6)


def test_encoder_checks_its_sizes():
    with pytest.raises(ValueError, match="divisible"):
        tiny_encoder(hidden_dim=9)
    with pytest.raises(ValueError, match="max_length"):
        tiny_encoder(max_length=0)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_packed_texts_are_encoded_as_if_alone(chunk_size):
    encoder = tiny_encoder(chunk_size=chunk_size, dropout=0.0)
    tokens = np.array([[5, 9, 7, 4, 6, 8, 10], [11, 12, 13, 14, 15, 0, 0]], "int32")
    ids = np.array([[1, 1, 1, 2, 2, 2, 2], [3, 3, 4, 4, 4, 5, 5]], "int32")
    packed = keras.ops.convert_to_numpy(
        encoder({"token_ids": tokens, "segment_ids": ids})
    )
    # Padding (token 0) is not compared: the last document of row 2 is all
    # padding.
    alone = each_document_alone(encoder, tokens, ids)
    text = tokens != 0
    np.testing.assert_allclose(packed[text], alone[text], atol=2e-5)
    inputs = {
        name: keras.Input((None,), dtype="int32", name=name)
        for name in ("token_ids", "segment_ids")
    }
    outer = keras.Model(inputs, encoder(inputs))
    x = {"token_ids": tokens, "segment_ids": ids}
    np.testing.assert_allclose(keras.ops.convert_to_numpy(outer(x)), packed, atol=1e-6)
    with pytest.raises(ValueError, match=r"received dtype float32"):
        encoder({"token_ids": tokens, "segment_ids": ids.astype("float32")})
