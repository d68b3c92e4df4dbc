import keras
import numpy as np
import pytest

from keras_attention.data.synthetic import keyword_task
from keras_attention.models import BiLSTMClassifier, TransformerClassifier
from tests.layer_test import assert_saved_model_matches
from tests.models.model_cases import CLASSES, LENGTH, SENTENCES, bag, bilstm, han
from tests.models.model_cases import CLASSIFIER_VOCABULARY as VOCABULARY
from tests.models.model_cases import transformer_classifier as transformer

FACTORIES = {
    "transformer-mean": transformer,
    "transformer-cls": lambda **kw: transformer("cls", **kw),
    "han": han,
    "bilstm": bilstm,
    "bag": bag,
}


def task(name, num_examples, seed):
    sentences = SENTENCES if name == "han" else None
    return keyword_task(
        num_examples,
        CLASSES,
        VOCABULARY,
        min_length=3,
        max_length=LENGTH,
        num_sentences=sentences,
        seed=seed,
    )


def trained(name, epochs=12):
    model = FACTORIES[name]()
    model.compile(
        keras.optimizers.Adam(3e-3),
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=True,
    )
    # 1,000 examples in batches of 64: the last batch is partial.
    train = task(name, 1000, seed=0)
    model.fit(
        train["token_ids"], train["labels"], epochs=epochs, batch_size=64, verbose=0
    )
    return model


@pytest.fixture(scope="session")
def trained_han():
    keras.utils.set_random_seed(0)
    # 6 epochs: measured per epoch to 12, test accuracy 1.000 from the third,
    # the keyword's sentence on top 0.887 and the keyword on top 0.687 from
    # the fifth to the twelfth (the thresholds below: 0.9, 0.8, 0.5; after
    # one epoch 0.693, 0.640, 0.253).
    return trained("han", epochs=6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["transformer-mean", "transformer-cls", "bilstm", "bag"]
)
def test_model_learns_keyword_task(name):
    # 4 epochs: each of these reached 1.000 test accuracy by its second (the
    # BiLSTM 0.847 after one, the others 0.977-1.000; measured to 12 epochs,
    # 1.000 throughout), and an untrained model guesses one of 3 classes.
    model = trained(name, epochs=4)
    test = task(name, 300, seed=1)
    predictions = np.argmax(model.predict(test["token_ids"], verbose=0), axis=-1)
    assert np.mean(predictions == test["labels"]) > 0.9


@pytest.mark.slow
@pytest.mark.xdist_group("trained_han")
def test_han_learns_keyword_task_and_attends_to_the_keyword(trained_han):
    test = task("han", 300, seed=1)
    predictions = np.argmax(trained_han.predict(test["token_ids"], verbose=0), -1)
    assert np.mean(predictions == test["labels"]) > 0.9
    # The explanation points at the evidence: the keyword's sentence gets the
    # most sentence attention, and the keyword the most importance far more
    # often than chance (1 in ~15 tokens; the bi-GRU spreads the keyword to
    # its neighbours' annotations, so not always).
    _, sentence_weights = trained_han.attention_weights(test["token_ids"])
    rows, columns = test["keyword_positions"].T
    assert np.mean(np.argmax(sentence_weights, -1) == rows) > 0.8
    importance = trained_han.token_importance(test["token_ids"]).reshape(300, -1)
    keyword_index = rows * LENGTH + columns
    assert np.mean(np.argmax(importance, -1) == keyword_index) > 0.5


@pytest.mark.slow
@pytest.mark.xdist_group("trained_han")
def test_han_masks_padding_words_and_sentences(trained_han):
    documents = task("han", 50, seed=2)["token_ids"]
    word_weights, sentence_weights = trained_han.attention_weights(documents)
    real_words = documents != 0
    real_sentences = real_words.any(-1)
    assert np.all(word_weights[~real_words] == 0)
    assert np.all(sentence_weights[~real_sentences] == 0)
    np.testing.assert_allclose(word_weights.sum(-1)[real_sentences], 1, atol=1e-5)
    np.testing.assert_allclose(sentence_weights.sum(-1), 1, atol=1e-5)
    assert not real_sentences.all(), "the task should include padding sentences"
    importance = trained_han.token_importance(documents)
    np.testing.assert_allclose(importance.sum((1, 2)), 1, atol=1e-5)


@pytest.mark.slow
@pytest.mark.xdist_group("trained_han")
def test_empty_document_gives_finite_probabilities(trained_han):
    empty = np.zeros((1, SENTENCES, LENGTH), "int32")
    probabilities = trained_han.predict(empty, verbose=0)
    word_weights, sentence_weights = trained_han.attention_weights(empty)
    assert np.all(np.isfinite(probabilities))
    assert np.all(word_weights == 0) and np.all(sentence_weights == 0)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_transformer_ignores_padding_and_weights_real_tokens(pooling):
    model = transformer(pooling)
    tokens = task("transformer", 8, seed=4)["token_ids"][:, :8]
    tokens[:, 6:] = 0
    longer = np.pad(tokens, ((0, 0), (0, 4)))
    np.testing.assert_allclose(
        model.predict(longer, verbose=0), model.predict(tokens, verbose=0), atol=1e-5
    )
    importance = model.token_importance(longer)
    assert importance.shape == longer.shape
    assert np.all(importance[longer == 0] == 0)
    if pooling == "mean":
        np.testing.assert_allclose(importance.sum(-1), 1, atol=1e-5)
    else:  # the [CLS] query also attends to itself
        assert np.all(importance.sum(-1) < 1 + 1e-5)


def test_baselines_have_no_token_importance():
    for model in (bilstm(), bag()):
        assert not model.has_attention
        with pytest.raises(ValueError, match="has no attention"):
            model.token_importance(np.ones((1, 4), "int32"))


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_save_and_load_in_safe_mode(name, tmp_path):
    model = FACTORIES[name](class_names=["a", "b", "c"])
    tokens = task(name, 4, seed=5)["token_ids"]
    loaded = assert_saved_model_matches(model, tokens, tmp_path)
    assert loaded.class_names == ["a", "b", "c"]
    if model.has_attention:
        np.testing.assert_allclose(
            loaded.token_importance(tokens), model.token_importance(tokens), atol=1e-6
        )


@pytest.mark.parametrize(
    "options",
    [
        {
            "input_positions": None,
            "attention_positions": "rotary",
            "num_key_value_heads": 1,
            "chunk_size": 4,
        },
        {"attention_positions": "alibi", "chunk_size": 4},
        {"input_positions": "sinusoidal", "attention_positions": "relative"},
    ],
    ids=["rotary-gqa-chunked", "alibi-chunked", "t5"],
)
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_transformer_blocks_get_the_attention_options(options, pooling, tmp_path):
    model = transformer(pooling=pooling, **options)
    config = model.get_config()
    assert "position_encoding" not in config
    want = {
        "input_positions": "learned",
        "num_key_value_heads": None,
        "chunk_size": None,
        **options,
    }
    for name, value in want.items():
        assert config[name] == value
    block = model.get_layer("encoder_block_0")
    assert block.attention_positions == options["attention_positions"]
    assert block.num_key_value_heads == want["num_key_value_heads"]
    assert block.chunk_size == want["chunk_size"]
    tokens = task("transformer", 4, seed=5)["token_ids"]
    loaded = assert_saved_model_matches(model, tokens, tmp_path)
    np.testing.assert_allclose(
        loaded.token_importance(tokens), model.token_importance(tokens), atol=1e-6
    )


# Each model in one policy, each policy on several models (the Transformer in
# both, one per pooling): between the policies what differs is float16's loss
# scaling, Keras' own and the same for every model; between the models, their
# layers' dtypes, which either policy computes in half precision (every
# layer's contract checks both policies, tests/layer_test.py).
@pytest.mark.slow
@pytest.mark.parametrize(
    "name, policy",
    [
        ("bag", "mixed_bfloat16"),
        ("bilstm", "mixed_bfloat16"),
        ("han", "mixed_float16"),
        ("transformer-cls", "mixed_bfloat16"),
        ("transformer-mean", "mixed_float16"),
    ],
)
def test_mixed_precision_trains_under_xla(name, policy):
    keras.config.set_dtype_policy(policy)
    model = FACTORIES[name]()
    model.compile("adam", "sparse_categorical_crossentropy", jit_compile=True)
    data = task(name, 32, seed=6)
    model.fit(data["token_ids"], data["labels"], batch_size=16, epochs=1, verbose=0)
    probabilities = model.predict(data["token_ids"], verbose=0)
    assert probabilities.dtype == np.float32
    assert np.all(np.isfinite(probabilities))
    np.testing.assert_allclose(probabilities.sum(-1), 1, atol=1e-3)
    if model.has_attention:
        assert np.all(np.isfinite(model.token_importance(data["token_ids"])))


@pytest.mark.parametrize(
    "factory, message",
    [
        (
            lambda: TransformerClassifier(VOCABULARY, 1),
            "`num_classes` must be at least 2",
        ),
        (lambda: transformer(num_heads=4, hidden_dim=30), r"\(30\).*\(4\)"),
        (lambda: transformer(pooling="max"), "`pooling`.*'max'"),
        (
            lambda: transformer(attention_positions="sinusoidal"),
            "Unknown `attention_positions`: 'sinusoidal'",
        ),
        (
            lambda: transformer(num_key_value_heads=3),
            "`num_key_value_heads` must divide `num_heads`",
        ),
        (lambda: han(class_names=["a"]), r"one name per class \(3\); received 1"),
        (lambda: han(word_units=0), "`word_units` must be a positive integer"),
        (lambda: bag(dropout=1.5), "`dropout`"),
        (
            lambda: BiLSTMClassifier(0, CLASSES),
            "`vocabulary_size` must be a positive",
        ),
    ],
)
def test_invalid_configs(factory, message):
    with pytest.raises(ValueError, match=message):
        factory()


@pytest.mark.slow
@pytest.mark.xdist_group("trained_han")
def test_han_attention_weights_need_a_document_grid(trained_han):
    with pytest.raises(
        ValueError, match=r"\(batch, max_sentences, max_words\).*\(2, 5\)"
    ):
        trained_han.attention_weights(np.ones((2, 5), "int32"))


def test_transformer_classifier_refuses_packed_rows():
    model = transformer()
    tokens = np.array([[5, 6, 7, 8]], "int32")
    model({"token_ids": tokens})  # a dict of token ids alone is fine
    with pytest.raises(ValueError, match="one text per row.*`segment_ids`"):
        model({"token_ids": tokens, "segment_ids": np.array([[1, 1, 2, 2]])})
