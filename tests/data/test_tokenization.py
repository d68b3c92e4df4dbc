import zipfile

import keras
import numpy as np
import pytest

from keras_attention.data import tokenization
from keras_attention.data.pipeline import encode_texts
from keras_attention.data.tokenization import (
    END_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    START_ID,
    UNK_ID,
    join_punctuation,
    train_word_piece,
    word_piece_tokenizer,
)

TEXTS = [
    "Hello, world.",
    "Don't do that!",
    "The cat sat on the mat.",
    "Is the dog asleep?",
    "2021-03-03 was a Wednesday.",
    "Guten Morgen, Frau Müller.",
] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return train_word_piece(TEXTS, 120)


@keras.saving.register_keras_serializable(package="keras_attention_tests")
class TokenizerHolder(keras.Model):
    """A model that keeps its tokenizer as an attribute.

    The vocabulary size is a separate config entry: while the model is loaded,
    `from_config` runs before the tokenizer's vocabulary asset is restored.
    """

    def __init__(self, tokenizer, vocabulary_size, **kwargs):
        super().__init__(**kwargs)
        self.tokenizer = tokenizer
        self.vocabulary_size = vocabulary_size
        self.embedding = keras.layers.Embedding(vocabulary_size, 4)

    def build(self, input_shape):
        self.embedding.build(input_shape)

    def call(self, token_ids):
        return self.embedding(token_ids)

    def get_config(self):
        config = super().get_config()
        config["tokenizer"] = keras.saving.serialize_keras_object(self.tokenizer)
        config["vocabulary_size"] = self.vocabulary_size
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


def test_special_token_ids(tokenizer):
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)
    assert tokenizer.get_vocabulary()[:4] == list(SPECIAL_TOKENS)
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == token_id
    assert tokenizer.oov_token == "[UNK]"
    assert tokenizer.vocabulary_size() <= 120


def test_round_trip(tokenizer):
    for text in TEXTS[:6]:
        token_ids = tokenizer.tokenize(text)
        assert UNK_ID not in np.asarray(token_ids).tolist()
        assert join_punctuation(tokenizer.detokenize(token_ids)) == text


def test_unknown_characters_map_to_unk(tokenizer):
    assert np.asarray(tokenizer.tokenize("Ωmega")).tolist() == [UNK_ID]


def test_lowercase_and_strip_accents():
    tokenizer = train_word_piece(TEXTS, 120, lowercase=True, strip_accents=True)
    assert tokenizer.lowercase and tokenizer.strip_accents
    vocabulary = tokenizer.get_vocabulary()
    assert "hello" in vocabulary or "h" in vocabulary
    assert not any(c.isupper() for token in vocabulary[4:] for c in token)
    assert "ü" not in "".join(vocabulary)
    ids = np.asarray(tokenizer.tokenize("HELLO, Müller.")).tolist()
    assert UNK_ID not in ids
    assert tokenizer.detokenize(ids) == "hello , muller ."


def test_bad_vocabulary_size():
    with pytest.raises(ValueError, match="vocabulary_size"):
        train_word_piece(TEXTS, 4)
    with pytest.raises(ValueError, match="vocabulary_size"):
        train_word_piece(TEXTS, 0)
    with pytest.raises(ValueError, match="empty"):
        train_word_piece([], 100)


def test_saved_inside_keras_file(tokenizer, tmp_path):
    model = TokenizerHolder(tokenizer, tokenizer.vocabulary_size())
    token_ids = encode_texts(TEXTS[:6], tokenizer, 16)
    expected = model(token_ids)
    path = str(tmp_path / "holder.keras")
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        assets = [name for name in archive.namelist() if "vocabulary.txt" in name]
    assert assets, "the vocabulary was not saved as an asset"

    restored = keras.saving.load_model(path, safe_mode=True)
    assert restored.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    restored_ids = encode_texts(TEXTS[:6], restored.tokenizer, 16)
    np.testing.assert_array_equal(restored_ids, token_ids)
    np.testing.assert_allclose(restored(restored_ids), expected)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2021 - 03 - 03", "2021-03-03"),
        ("don ' t", "don't"),
        ("Hello , world .", "Hello, world."),
        ("Is it ( really ) true ?", "Is it (really) true?"),
        ("Wait ; then : go !", "Wait; then: go!"),
        ("03 / 03 / 21", "03/03/21"),
        ("Already natural.", "Already natural."),
    ],
)
def test_join_punctuation(text, expected):
    assert join_punctuation(text) == expected


def test_module_constants():
    assert tokenization.SPECIAL_TOKENS == ("[PAD]", "[UNK]", "[START]", "[END]")


def test_tokenizer_rebuilt_from_a_vocabulary_file_matches(tokenizer, tmp_path):
    path = tmp_path / "vocabulary.txt"
    path.write_text("\n".join(tokenizer.get_vocabulary()) + "\n", encoding="utf-8")
    rebuilt = word_piece_tokenizer(str(path))
    assert rebuilt.get_vocabulary() == tokenizer.get_vocabulary()
    np.testing.assert_array_equal(
        encode_texts(TEXTS[:6] + ["zzz unknown"], rebuilt, 16),
        encode_texts(TEXTS[:6] + ["zzz unknown"], tokenizer, 16),
    )


@pytest.mark.parametrize("texts", [["   ", "\t"], ["\u200b\u200b", "\x00"]])
def test_texts_without_words_are_refused_in_one_line(texts):
    with pytest.raises(ValueError) as error:
        train_word_piece(texts, 100)
    assert str(error.value).startswith(
        f"The 2 texts hold no word to learn a vocabulary from (only whitespace or "
        f"control characters, such as {texts[0]!r})"
    )
