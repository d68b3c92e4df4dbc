"""Sentence pairs for translation: a user's TSV file, the Ding German-English
dictionary's example sentences, the software messages of Debian packages'
German catalogs, or the generated date task, split into train/valid/test."""

import os
import re

import numpy as np

from keras_attention.data.dates import date_splits
from keras_attention.data.files import DataFormatError, malformed_error, read_data_file
from keras_attention.data.messages import message_splits
from keras_attention.data.packages import require_data

DING_PATH = "/usr/share/trans/de-en"
DING_PACKAGE = "trans-de-en"
TRANSLATION_DATA = ("dates", "de-en", "messages-de")

_VALID_TSV_LINE = "'Guten Morgen.<TAB>Good morning.' (more columns are ignored)"

# Ding markup: `{m}` (grammar), `[ugs.]` (usage), `<Aalmolch>` (spellings).
_ANNOTATION = re.compile(r"\s*(\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>)")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([.,!?;:])")
_SPACES = re.compile(r"\s+")
_MAY_HOLD_SENTENCE = re.compile(r"[.!?](?:[ ;]|$)")
# Left-overs that mark a dictionary phrase rather than a sentence: brackets,
# elisions, alternatives written `a/b`, `~` for the head word, and the
# placeholders "jdm./etw." and "sb./sth.".
_NOT_A_SENTENCE = re.compile(
    r"[()\[\]{}<>/~…]|\.\.\.|\b(?:jd[mnrs]?|etw|sb|sth)\.", re.IGNORECASE
)


def _check_non_negative_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"`{name}` must be a non-negative integer; received {name}={value!r}."
        )


def read_tsv(path, source_column=0, target_column=1):
    """Reads sentence pairs from a tab-separated text file.

    The format of Anki and Tatoeba exports: one pair per line,
    `source<TAB>target`, optionally followed by more tab-separated columns
    (attribution, ids) which are ignored. Blank lines and lines starting with
    `#` are skipped. The file must be UTF-8 (a byte-order mark is allowed).

    Args:
        path: path of the file.
        source_column: index of the source column.
        target_column: index of the target column.

    Returns:
        A list of `(source, target)` string tuples, stripped of surrounding
        whitespace, in file order.

    Raises:
        FileNotFoundError: if `path` does not exist.
        DataFormatError: if the file is binary, has no pairs, or has lines
            that are not valid UTF-8, have too few columns or an empty side.
            The message names the file and the offending line numbers.
    """
    _check_non_negative_int("source_column", source_column)
    _check_non_negative_int("target_column", target_column)
    if source_column == target_column:
        raise ValueError(
            "`source_column` and `target_column` must differ; received "
            f"source_column=target_column={source_column}."
        )
    data = read_data_file(
        path,
        "Translation file",
        f"a UTF-8 text file with one pair per line, e.g. {_VALID_TSV_LINE}",
    )

    num_columns = max(source_column, target_column) + 1
    pairs = []
    problems = []  # (line number, what was found)
    for line_number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as error:
            problems.append(
                (line_number, f"bytes that are not UTF-8 at column {error.start}")
            )
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) < num_columns:
            problems.append(
                (
                    line_number,
                    f"{len(columns)} tab-separated column(s), expected at least "
                    f"{num_columns}: {line[:60]!r}",
                )
            )
            continue
        source = columns[source_column].strip()
        target = columns[target_column].strip()
        if not source or not target:
            side = "source" if not source else "target"
            problems.append((line_number, f"an empty {side}: {line[:60]!r}"))
            continue
        pairs.append((source, target))

    if problems:
        raise malformed_error(
            path, problems, "line(s)", f"A valid line looks like {_VALID_TSV_LINE}."
        )
    if not pairs:
        raise DataFormatError(
            f"'{path}' contains no sentence pairs (only blank or `#` comment "
            f"lines). Expected one pair per line, e.g. {_VALID_TSV_LINE}."
        )
    return pairs


def _clean_ding(text):
    text = _ANNOTATION.sub("", text)
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = _SPACE_BEFORE_PUNCTUATION.sub(r"\1", text)
    return _SPACES.sub(" ", text).strip()


def _is_sentence(text, max_words):
    if not text or not text[0].isupper() or text[-1] not in ".!?":
        return False
    if not 3 <= text.count(" ") + 1 <= max_words:
        return False
    return _NOT_A_SENTENCE.search(text) is None


def load_ding(path=DING_PATH, max_words=20):
    """Loads the example sentences of the Ding German-English dictionary.

    The dictionary (Debian package `trans-de-en`) has lines
    `German :: English` whose sides hold `|`-separated sub-entries that
    correspond by position; most are words and phrases, and some are example
    sentences. This keeps the sub-entries whose both sides are sentences: the
    first of `;`-separated alternatives, stripped of `{...}`, `[...]` and
    `<...>` annotations, starting with an uppercase letter, ending with `.`,
    `!` or `?`, with 3 to `max_words` words and no brackets, `/`, `~`,
    elisions or placeholders such as "etw." or "sb.". Lines whose sides have
    different numbers of sub-entries are skipped.

    Args:
        path: path of the dictionary file.
        max_words: longest sentence kept, in whitespace-separated words.

    Returns:
        A list of `(german, english)` string tuples, the first occurrence of
        each German sentence, in file order.

    Raises:
        FileNotFoundError: if the file is missing.
    """
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 3:
        raise ValueError(
            f"`max_words` must be an integer >= 3; received max_words={max_words!r}."
        )
    path = os.fspath(path)
    require_data(
        path,
        DING_PATH,
        DING_PACKAGE,
        "The Ding dictionary",
        f"The Ding dictionary was not found at '{path}'. Install it with "
        f"`apt-get install {DING_PACKAGE}`, or pass a TSV file of your own.",
        exists=os.path.exists,
    )
    with open(path, encoding="utf-8", errors="replace") as file:
        lines = file.read().split("\n")

    pairs = []
    seen = set()
    for line in lines:
        # A cheap filter first: comments, and lines that cannot hold a sentence.
        if line.startswith("#") or not _MAY_HOLD_SENTENCE.search(line):
            continue
        sides = line.split(" :: ")
        if len(sides) != 2:
            continue
        german_entries = sides[0].split(" | ")
        english_entries = sides[1].split(" | ")
        if len(german_entries) != len(english_entries):
            continue
        for german, english in zip(german_entries, english_entries, strict=True):
            german = _clean_ding(german.split("; ")[0])
            if german in seen or not _is_sentence(german, max_words):
                continue
            english = _clean_ding(english.split("; ")[0])
            if not _is_sentence(english, max_words):
                continue
            seen.add(german)
            pairs.append((german, english))
    return pairs


def split_pairs(pairs, num_test=1000, num_valid=1000, seed=0, what="pairs"):
    """Splits sentence pairs (or any items) into train, validation and test
    sets.

    Args:
        pairs: a sequence of `(source, target)` tuples (or other items).
        num_test: number of test pairs.
        num_valid: number of validation pairs.
        seed: seed of the permutation (the split is deterministic given it).
        what: what the items are, for the error message.

    Returns:
        A dict `{"train": [...], "valid": [...], "test": [...]}`: the test and
        validation splits have exactly `num_test` and `num_valid` pairs and
        the training split has the rest.
    """
    _check_non_negative_int("num_test", num_test)
    _check_non_negative_int("num_valid", num_valid)
    pairs = list(pairs)
    if len(pairs) <= num_test + num_valid:
        raise ValueError(
            f"Too few {what} to split: received {len(pairs)} {what}, expected more "
            f"than num_test + num_valid = {num_test + num_valid} so that the "
            "training split is not empty."
        )
    order = np.random.default_rng(seed).permutation(len(pairs)).tolist()
    shuffled = [pairs[i] for i in order]
    return {
        "train": shuffled[num_test + num_valid :],
        "valid": shuffled[num_test : num_test + num_valid],
        "test": shuffled[:num_test],
    }


def load_translation_pairs(data, seed=0):
    """Loads the train/valid/test splits of a translation dataset by name.

    Args:
        data: `"dates"` (the generated date-normalisation task, see
            `date_splits`), `"de-en"` (the Ding dictionary's sentences, see
            `load_ding`), `"messages-de"` (English->German software
            messages of Debian packages, see `message_splits`: 1000 test and
            1000 validation messages chosen by hash), or the path of a
            `source<TAB>target` file (see
            `read_tsv`), of which a tenth, at most 1000 pairs, goes to each of
            the test and validation splits.
        seed: seed of the generation or of the split.

    Returns:
        A dict `{"train": [...], "valid": [...], "test": [...]}` of lists of
        `(source, target)` tuples.
    """
    if data == "dates":
        return date_splits(seed=seed)
    if data == "de-en":
        return split_pairs(load_ding(), seed=seed)
    if data == "messages-de":
        return message_splits(language="de", seed=seed)
    if isinstance(data, (str, os.PathLike)) and os.path.isfile(data):
        pairs = read_tsv(data)
        num_held_out = min(1000, len(pairs) // 10)
        return split_pairs(
            pairs, num_test=num_held_out, num_valid=num_held_out, seed=seed
        )
    raise ValueError(
        f"Unknown translation `data`: {data!r}. Expected one of "
        f"{list(TRANSLATION_DATA)} or the path of an existing "
        "`source<TAB>target` file."
    )
