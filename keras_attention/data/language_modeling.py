"""Text for character-level language models: the Debian `fortunes` files or a
user's text file, split by document into train/valid/test, and the character
tokenizer (`data.pipeline.token_stream` makes the stream a model reads)."""

import os

import keras_hub
import numpy as np

from keras_attention._checks import check_positive_int
from keras_attention.data.classification import (
    FORTUNES_DIR,
    FORTUNES_PACKAGE,
    fortune_files,
    split_fortunes,
)
from keras_attention.data.files import DataFormatError, not_utf8_error, read_data_file
from keras_attention.data.tokenization import END_ID, PAD_ID
from keras_attention.data.translation import split_pairs
from keras_attention.names import LM_VOCABULARY_SIZE

LANGUAGE_MODEL_DATA = ("fortunes",)
# ASCII: the fortunes' other characters (47 of 2.6 million) share id 127.
CHARACTER_VOCABULARY_SIZE = LM_VOCABULARY_SIZE
UNKNOWN_CHARACTER = "\ufffd"

_VALID_TEXT = (
    "a UTF-8 text file of documents separated by lines holding only `%` (the "
    "fortune format) or, in a file without such lines, by blank lines"
)


def clean_document(text):
    """A document with `\\r\\n` line ends made `\\n`, trailing spaces cut from
    every line and blank lines cut from both ends (leading spaces and tabs
    of the first line, which indent verse and drawings, stay)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def _documents(entries):
    """The cleaned, non-empty entries, each text once (first occurrence), so
    that no held-out document is also a training one."""
    seen = set()
    documents = []
    for entry in entries:
        document = clean_document(entry)
        if document.strip() and document not in seen:
            seen.add(document)
            documents.append(document)
    return documents


def load_fortune_texts(directory=FORTUNES_DIR, categories=None):
    """The fortune-cookie texts of the Debian package `fortunes`, one per
    entry, with their line breaks.

    Each category file of `directory` holds entries separated by lines
    holding only `%`. They are read as UTF-8 (undecodable bytes become
    U+FFFD), freed of overstriking and control characters (see
    `split_fortunes`) and cleaned by `clean_document`; empty entries and
    repeated ones are dropped. The 43 categories of Debian's package hold
    15,134 texts, 2.52 million characters.

    Args:
        directory: the folder of the fortune files.
        categories: the category files to read (default: every file without
            a dot in its name, sorted).

    Returns:
        A list of strings, in file order.

    Raises:
        FileNotFoundError: if `directory` does not exist (the message names
            the package to install).
        ValueError: if a category has no file, or no text is left.
    """
    paths = fortune_files(directory, categories)
    entries = []
    for path in paths:
        with open(path, "rb") as file:
            entries += split_fortunes(file.read().decode("utf-8", errors="replace"))
    documents = _documents(entries)
    if not documents:
        raise ValueError(
            f"The fortune files {paths} hold no text: "
            "expected texts separated by lines holding only `%`. Reinstall "
            f"them with `apt-get install --reinstall {FORTUNES_PACKAGE}`."
        )
    return documents


def read_documents(path):
    """Reads the documents of a user's text file.

    The file is UTF-8 (a byte-order mark is allowed); its documents are
    separated by lines holding only `%` (the format of the fortune files)
    or, when it has no such line, by blank lines. Documents are cleaned by
    `clean_document`; empty and repeated ones are dropped.

    Args:
        path: the file.

    Returns:
        A list of strings, in file order.

    Raises:
        FileNotFoundError: if `path` does not exist.
        DataFormatError: if the file is binary, has lines that are not UTF-8
            (named by number) or holds fewer than 3 documents (one for each
            split).
    """
    data = read_data_file(path, "Text file", _VALID_TEXT)
    lines, problems = [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            problems.append((number, error.start))
    if problems:
        raise not_utf8_error(path, problems, _VALID_TEXT)
    text = "\n".join(lines)
    entries = split_fortunes(text)
    if len(entries) == 1:
        entries = text.replace("\r\n", "\n").split("\n\n")
    documents = _documents(entries)
    if len(documents) < 3:
        raise DataFormatError(
            f"'{path}' holds {len(documents)} document(s); a language model "
            f"needs at least 3 (training, validation, test). Expected {_VALID_TEXT}."
        )
    return documents


def split_documents(documents, held_out_fraction=0.05, seed=0):
    """Splits documents into train, validation and test sets: a fixed
    permutation (given `seed`) puts `round(held_out_fraction * n)` documents,
    at least 1, in each of the test and validation sets and the rest in
    training. Whole documents are held out, never parts of one.

    Returns:
        `{"train": [...], "valid": [...], "test": [...]}`, lists of strings.
    """
    if not 0 < held_out_fraction < 0.5:
        raise ValueError(
            "`held_out_fraction` must be between 0 and 0.5; received "
            f"{held_out_fraction!r}."
        )
    held_out = max(1, int(round(held_out_fraction * len(documents))))
    return split_pairs(documents, held_out, held_out, seed=seed, what="documents")


def load_language_model_texts(data, seed=0):
    """Loads the train/valid/test documents of a language-modelling corpus.

    Args:
        data: `"fortunes"` (the Debian fortune files, see
            `load_fortune_texts`) or the path of a text file (see
            `read_documents`); 5 % of the documents go to each of the test
            and validation splits (`split_documents`).
        seed: seed of the split.

    Returns:
        `{"train": [...], "valid": [...], "test": [...]}`, lists of strings.
    """
    if data == "fortunes":
        return split_documents(load_fortune_texts(), seed=seed)
    if isinstance(data, (str, os.PathLike)) and os.path.isfile(data):
        return split_documents(read_documents(data), seed=seed)
    raise ValueError(
        f"Unknown language-model `data`: {data!r}. Expected one of "
        f"{list(LANGUAGE_MODEL_DATA)} or the path of an existing text file."
    )


def character_tokenizer(vocabulary_size=CHARACTER_VOCABULARY_SIZE):
    """keras-hub's `UnicodeCodepointTokenizer`: a character's id is its
    code point, `vocabulary_size - 1` for every character beyond (with 128,
    ASCII and one id for the rest). Ids 0 (`PAD_ID`) and 3 (`END_ID`, the
    control character "end of text") never occur in cleaned text, so they
    serve as padding and as the end-of-text token."""
    check_positive_int("vocabulary_size", vocabulary_size)
    if vocabulary_size <= END_ID:
        raise ValueError(
            f"`vocabulary_size` must exceed END_ID={END_ID}; received "
            f"{vocabulary_size}."
        )
    return keras_hub.tokenizers.UnicodeCodepointTokenizer(
        lowercase=False, vocabulary_size=vocabulary_size
    )


def decode_tokens(tokenizer, token_ids):
    """The text of character ids: up to the first `END_ID` after the first
    token, without padding, the unknown-character id shown as U+FFFD."""
    token_ids = [int(t) for t in token_ids]
    if END_ID in token_ids[1:]:
        token_ids = token_ids[: token_ids.index(END_ID, 1)]
    token_ids = [t for t in token_ids if t not in (PAD_ID, END_ID)]
    if not token_ids:
        return ""
    text = tokenizer.detokenize(np.array(token_ids, "int32"))
    text = text.numpy() if hasattr(text, "numpy") else text
    text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
    unknown = chr(tokenizer.vocabulary_size() - 1)
    return text.replace(unknown, UNKNOWN_CHARACTER)
