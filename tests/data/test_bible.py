import pytest

from keras_attention.data.bible import BIBLE_PACKAGE, load_bible_texts, read_verses
from keras_attention.data.files import DataFormatError

installed = pytest.mark.needs_package(BIBLE_PACKAGE)


@installed
def test_every_verse_is_read_in_order():
    verses = read_verses()
    assert len(verses) == 31102
    assert verses[0] == (
        "Ge",
        1,
        "In the beginning God created the heaven and the earth.",
    )
    assert verses[-1][:2] == ("Rev", 22)
    assert verses[-1][2].endswith("be with you all. Amen.")


@installed
def test_passages_hold_every_word_once_within_one_chapter():
    verses = read_verses()
    passages = load_bible_texts(max_words=60)
    words = [word for _, _, text in verses for word in text.split()]
    assert " ".join(passages).split() == words
    longest_verse = max(len(text.split()) for _, _, text in verses)
    assert max(len(p.split()) for p in passages) <= max(60, longest_verse)
    # Genesis 1 has 31 verses of 797 words: more than one passage, and the
    # first of Genesis 2 starts a passage of its own.
    assert any(p.startswith("Thus the heavens and the earth") for p in passages)


def test_a_missing_program_names_the_package():
    with pytest.raises(FileNotFoundError, match="apt-get install bible-kjv"):
        read_verses(program="no-such-bible-program")


def test_output_that_is_not_the_bible_is_refused(tmp_path):
    fake = tmp_path / "bible"
    fake.write_text("#!/bin/sh\necho 'Ge1:1 In the beginning'\n")
    fake.chmod(0o755)
    with pytest.raises(DataFormatError, match="gave 1 verses .* expected the 31,102"):
        read_verses(program=str(fake))


def test_max_words_must_be_positive():
    with pytest.raises(ValueError, match="`max_words` must be a positive integer"):
        load_bible_texts(max_words=0)
