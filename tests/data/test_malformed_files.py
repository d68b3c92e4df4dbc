"""Property-based tests of the loaders of users' files: whatever bytes a file
holds (empty, binary, wrong columns, Latin-1 mixed into UTF-8), a loader
either returns well-formed records or raises a `DataFormatError` (a
`ValueError`) that names the file, and the line where there is one."""

import re
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from keras_attention.data.captioning import read_captioned_images
from keras_attention.data.files import DataFormatError
from keras_attention.data.labelled_csv import read_labelled_csv
from keras_attention.data.translation import read_tsv
from tests.properties import EXAMPLES, outcome

WORDS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\t\n\r\x00"),
    max_size=12,
)


def lines_of(valid_line):
    """File contents: lines that are valid, empty, binary, Latin-1 encoded,
    or with the wrong number of columns, in any mix."""
    line = st.one_of(
        valid_line,
        st.just(b""),
        st.just(b"# a comment"),
        st.binary(max_size=16),
        WORDS.map(lambda w: f"{w} caf\u00e9".encode("latin-1", errors="replace")),
        st.lists(WORDS, max_size=4).map(lambda ws: "\t".join(ws).encode()),
        st.lists(WORDS, max_size=4).map(lambda ws: ",".join(ws).encode()),
    )
    return st.one_of(
        st.lists(line, max_size=8), st.lists(valid_line, min_size=1, max_size=8)
    ).map(b"\n".join)


# A loader's error names the file and says what is wrong with which line.
DATA_ERROR_WORDS = re.compile(r"line|no |empty|header|binary|Expected|needs")


def load(read):
    return outcome(read, clear_words=DATA_ERROR_WORDS)


def refused_clearly(error, path):
    assert isinstance(error, DataFormatError), repr(error)
    assert str(path) in str(error), str(error)


def tsv_line():
    return st.tuples(WORDS.filter(str.strip), WORDS.filter(str.strip)).map(
        lambda pair: "\t".join(pair).encode()
    )


@EXAMPLES
@given(lines_of(tsv_line()))
def test_translation_file_is_read_or_refused_with_its_line(content):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pairs.tsv"
        path.write_bytes(content)
        result = load(lambda: read_tsv(path))
        if isinstance(result, Exception):
            refused_clearly(result, path)
            return
        assert result and all(s.strip() and t.strip() for s, t in result)


def csv_line():
    return st.tuples(WORDS.filter(str.strip), st.sampled_from(["pos", "neg"])).map(
        lambda row: ",".join(f'"{v}"' for v in row).encode()
    )


@EXAMPLES
@given(st.sampled_from([b"text,label\n", b"", b"label\n"]), lines_of(csv_line()))
def test_labelled_csv_is_read_or_refused_with_its_line(header, content):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "texts.csv"
        path.write_bytes(header + content)
        result = load(lambda: read_labelled_csv(path))
        if isinstance(result, Exception):
            refused_clearly(result, path)
            return
        assert len({label for _, label in result}) >= 2
        assert all(text.strip() and label.strip() for text, label in result)


def caption_line():
    return WORDS.filter(str.strip).map(lambda caption: f"a.png\t{caption}".encode())


@EXAMPLES
@given(lines_of(caption_line()))
def test_captions_file_is_read_or_refused_with_its_line(content):
    with tempfile.TemporaryDirectory() as folder:
        Image.fromarray(np.zeros((4, 4), "uint8")).save(Path(folder) / "a.png")
        path = Path(folder) / "captions.tsv"
        path.write_bytes(content)
        try:
            result = load(lambda: read_captioned_images(folder, image_size=(4, 4)))
        except FileNotFoundError as error:  # a line names an image not there
            assert folder in str(error)
            return
        if isinstance(result, Exception):
            refused_clearly(result, path)
            return
        assert len(result.images) == len(result.captions) >= 1
