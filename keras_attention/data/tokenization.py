"""WordPiece tokenizers learned from a corpus, and detokenization clean-up."""

import re

import keras_hub
import tensorflow as tf

from keras_attention._checks import check_positive_int

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
PAD_ID, UNK_ID, START_ID, END_ID = range(len(SPECIAL_TOKENS))

_SPACE_BEFORE = re.compile(r"\s+([.,!?;:)])")
_SPACE_AFTER = re.compile(r"\(\s+")
_SPACE_AROUND = re.compile(r"\s*([-/'])\s*")


def train_word_piece(texts, vocabulary_size, lowercase=False, strip_accents=False):
    """Learns a WordPiece vocabulary from texts and returns its tokenizer.

    The vocabulary starts with `SPECIAL_TOKENS`, so that `[PAD]`, `[UNK]`,
    `[START]` and `[END]` have ids `PAD_ID` .. `END_ID` (0 .. 3), and words
    the vocabulary cannot spell map to `[UNK]`. The tokenizer stores its
    vocabulary as an asset, so a Keras model that holds it as an attribute
    saves it inside the `.keras` file.

    Args:
        texts: a list of strings (e.g. the source or target side of the
            training pairs).
        vocabulary_size: the largest vocabulary to learn, special tokens
            included. The learned vocabulary can be smaller when the texts
            have few distinct words.
        lowercase: whether the tokenizer lowercases its inputs.
        strip_accents: whether the tokenizer removes accents ("ü" -> "u").

    Returns:
        A `keras_hub.tokenizers.WordPieceTokenizer` with int32 outputs.

    Example:

    >>> tokenizer = train_word_piece(["Hello, world."] * 10, 40)
    >>> tokenizer.id_to_token(START_ID)
    '[START]'
    """
    check_positive_int("vocabulary_size", vocabulary_size)
    if vocabulary_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"`vocabulary_size` must exceed the {len(SPECIAL_TOKENS)} special "
            f"tokens; received vocabulary_size={vocabulary_size}."
        )
    texts = [str(text) for text in texts]
    if not texts:
        raise ValueError("`texts` is empty: a vocabulary needs some text.")
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(1024)
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        dataset,
        vocabulary_size,
        lowercase=lowercase,
        strip_accents=strip_accents,
        reserved_tokens=list(SPECIAL_TOKENS),
    )
    return word_piece_tokenizer(vocabulary, lowercase, strip_accents)


def word_piece_tokenizer(vocabulary, lowercase=False, strip_accents=False):
    """The tokenizer of a vocabulary made by `train_word_piece`: a list of
    tokens, or the path of a file with one token per line.

    Args:
        vocabulary: the tokens, `SPECIAL_TOKENS` first, or a file of them.
        lowercase: whether the tokenizer lowercases its inputs (as when the
            vocabulary was learned).
        strip_accents: whether the tokenizer removes accents (likewise).

    Returns:
        A `keras_hub.tokenizers.WordPieceTokenizer` mapping unknown words to
        `[UNK]`.
    """
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary,
        lowercase=lowercase,
        strip_accents=strip_accents,
        oov_token=SPECIAL_TOKENS[UNK_ID],
    )


def join_punctuation(text):
    """Undoes the spaces that WordPiece detokenization puts around punctuation.

    Removes the space before `. , ! ? ; : )`, after `(`, and on both sides
    of `-`, `/` and `'`.

    Args:
        text: a detokenized string.

    Returns:
        The string with natural spacing.

    Example:

    >>> join_punctuation("Don ' t , please : 2021 - 03 - 03 .")
    "Don't, please: 2021-03-03."
    """
    text = _SPACE_BEFORE.sub(r"\1", text)
    text = _SPACE_AFTER.sub("(", text)
    return _SPACE_AROUND.sub(r"\1", text).strip()
