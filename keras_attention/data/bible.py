"""The King James Bible as unlabelled English text, from the Debian packages
`bible-kjv` (the `bible` program) and `bible-kjv-text` (its data)."""

import re
import shutil
import subprocess

from keras_attention._checks import check_positive_int
from keras_attention.data.files import DataFormatError
from keras_attention.data.packages import require_package

BIBLE_PACKAGE = "bible-kjv"
BIBLE_PROGRAM = "bible"
# The whole text, first verse to last.
_EVERY_VERSE = "Gen1:1-Rev22:21"
# "Ge1:1 In the beginning ...": book, chapter, verse, text.
_VERSE = re.compile(r"^(\w+?)(\d+):(\d+) (.*)$")
_NUM_VERSES = 31102


def read_verses(program=BIBLE_PROGRAM):
    """Every verse of the King James Bible, in order.

    Args:
        program: the `bible` program of the Debian package `bible-kjv`.

    Returns:
        A list of `(book, chapter, text)` tuples, 31,102 of them.

    Raises:
        FileNotFoundError: if `program` is not installed.
        DataFormatError: if its output is not the 31,102 verses.
    """
    if program == BIBLE_PROGRAM:
        require_package(BIBLE_PACKAGE, "The King James Bible")
    path = shutil.which(program)
    if path is None:
        raise FileNotFoundError(
            f"The King James Bible is read with the `{program}` program, which "
            f"is not installed: `apt-get install {BIBLE_PACKAGE}`."
        )
    # One verse a line: `-f` without a width would wrap long verses.
    result = subprocess.run(
        [path, "-f", "-l100000", _EVERY_VERSE],
        capture_output=True,
        text=True,
        check=False,
    )
    verses = []
    for line in result.stdout.splitlines():
        match = _VERSE.match(line.strip())
        if match:
            book, chapter, _, text = match.groups()
            verses.append((book, int(chapter), text.strip()))
    if result.returncode != 0 or len(verses) != _NUM_VERSES:
        raise DataFormatError(
            f"`{path} -f {_EVERY_VERSE}` gave {len(verses):,} verses (exit "
            f"{result.returncode}); expected the {_NUM_VERSES:,} verses of the "
            f"King James Bible. {result.stderr.strip()[:200]}"
        )
    return verses


def load_bible_texts(max_words=120, program=BIBLE_PROGRAM):
    """The King James Bible as documents of consecutive verses.

    Verses are joined in order into documents of at most `max_words` words
    (a longer verse is a document by itself), never across chapters, so a
    document is a passage about as long as a review.

    Args:
        max_words: the most words of a document.
        program: the `bible` program (see `read_verses`).

    Returns:
        A list of strings, the passages in order.

    Example:

    >>> passages = load_bible_texts()  # doctest: +SKIP
    >>> passages[0][:40]  # doctest: +SKIP
    'In the beginning God created the heaven '
    """
    check_positive_int("max_words", max_words)
    documents, words, place = [], [], None
    for book, chapter, text in read_verses(program):
        verse = text.split()
        if words and ((book, chapter) != place or len(words) + len(verse) > max_words):
            documents.append(" ".join(words))
            words = []
        words += verse
        place = (book, chapter)
    if words:
        documents.append(" ".join(words))
    return documents
