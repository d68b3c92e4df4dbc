import re

import pytest

from keras_attention.data import translation
from keras_attention.data.translation import (
    DataFormatError,
    load_ding,
    load_translation_pairs,
    read_tsv,
    split_pairs,
)


def _write(tmp_path, content, name="pairs.tsv"):
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return str(path)


@pytest.fixture(scope="module")
def ding_pairs():
    return load_ding()


# read_tsv


def test_read_tsv(tmp_path):
    path = _write(
        tmp_path,
        "\ufeff# a comment\n"
        "Go.\tGeh.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\n"
        "\n"
        "  Hi.  \t Hallo! \r\n"
        "Run!\tLauf!\n",
    )
    assert read_tsv(path) == [("Go.", "Geh."), ("Hi.", "Hallo!"), ("Run!", "Lauf!")]
    assert read_tsv(path, source_column=1, target_column=0)[0] == ("Geh.", "Go.")


def test_read_tsv_malformed_lines(tmp_path):
    lines = ["A.\tB."] * 3 + ["no tab here"] + ["C.\t "] + ["D.\tE."]
    lines += ["\tempty source"] + ["x"] * 6
    path = _write(tmp_path, "\n".join(lines))
    with pytest.raises(DataFormatError) as info:
        read_tsv(path)
    message = str(info.value)
    assert path in message
    assert "9 malformed line(s)" in message
    assert "line 4, 5, 7, 8, 9, ..." in message
    assert "Line 4 has 1 tab-separated column(s), expected at least 2" in message
    assert "'no tab here'" in message
    assert "<TAB>" in message  # what a valid line looks like
    assert isinstance(info.value, ValueError)


def test_read_tsv_empty_side(tmp_path):
    path = _write(tmp_path, "A.\tB.\nC.\t\t\n")
    with pytest.raises(DataFormatError, match=r"line 2\).*empty target"):
        read_tsv(path)


def test_read_tsv_invalid_utf8(tmp_path):
    path = _write(tmp_path, b"A.\tB.\nGr\xfc\xdfe.\tHello.\nC.\tD.\n")
    with pytest.raises(DataFormatError, match=r"line 2\).*not UTF-8"):
        read_tsv(path)


def test_read_tsv_binary_file(tmp_path):
    path = _write(tmp_path, b"A.\tB.\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(DataFormatError, match=r"binary file.*NUL byte on line 4"):
        read_tsv(path)


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n\n"])
def test_read_tsv_no_pairs(tmp_path, content):
    path = _write(tmp_path, content)
    with pytest.raises(DataFormatError, match=re.escape(path) + ".*no sentence pairs"):
        read_tsv(path)


def test_read_tsv_missing_file(tmp_path):
    path = str(tmp_path / "missing.tsv")
    with pytest.raises(FileNotFoundError, match=re.escape(path)):
        read_tsv(path)


def test_read_tsv_bad_columns(tmp_path):
    path = _write(tmp_path, "A.\tB.\n")
    with pytest.raises(ValueError, match="must differ"):
        read_tsv(path, source_column=1, target_column=1)
    with pytest.raises(ValueError, match="source_column"):
        read_tsv(path, source_column=-1)
    with pytest.raises(DataFormatError, match="expected at least 3"):
        read_tsv(path, target_column=2)


# split_pairs


def test_split_pairs():
    pairs = [(f"s{i}", f"t{i}") for i in range(50)]
    splits = split_pairs(pairs, num_test=7, num_valid=5, seed=2)
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [38, 5, 7]
    assert sorted(sum(splits.values(), [])) == sorted(pairs)
    assert splits == split_pairs(pairs, num_test=7, num_valid=5, seed=2)
    assert splits != split_pairs(pairs, num_test=7, num_valid=5, seed=3)
    assert split_pairs(pairs, num_test=0, num_valid=0)["train"] != pairs


def test_split_pairs_too_few():
    pairs = [("a", "b")] * 10
    with pytest.raises(ValueError, match="received 10 pairs.*more than.* 10"):
        split_pairs(pairs, num_test=5, num_valid=5)
    with pytest.raises(ValueError, match="num_test"):
        split_pairs(pairs, num_test=-1)


# load_translation_pairs


def test_load_translation_pairs_dates():
    splits = load_translation_pairs("dates", seed=0)
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [20000, 1000, 2000]


def test_load_translation_pairs_tsv(tmp_path):
    path = _write(tmp_path, "".join(f"S{i}.\tT{i}.\n" for i in range(45)))
    splits = load_translation_pairs(path)
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [37, 4, 4]


def test_load_translation_pairs_unknown(tmp_path):
    with pytest.raises(
        ValueError, match=r"'fr-en'.*\['dates', 'de-en', 'messages-de'\]"
    ):
        load_translation_pairs("fr-en")
    with pytest.raises(ValueError, match="existing"):
        load_translation_pairs(str(tmp_path / "missing.tsv"))


# load_ding


def test_load_ding_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install trans-de-en"):
        load_ding(str(tmp_path / "de-en"))


def test_load_ding_small_file(tmp_path):
    path = _write(
        tmp_path,
        "# Version :: devel\n"
        "Hund {m} | Der Hund bellt. :: dog | The dog barks.\n"
        "Katze {f} | Die Katze schläft [ugs.]. :: cat | The cat’s asleep [coll.].\n"
        "Ja | Er kommt. | Sie geht. :: Yes | He comes.\n"  # counts differ
        "Maus | Ich sehe etw. Großes. :: mouse | I see sth. big.\n"
        "Haus | Ich (auch) gehe heim. :: house | I (too) go home.\n"
        "Zu kurz. :: Too short.\n"
        "Er kommt bald wieder. | Wir gehen. :: He will be back soon. | We go now.\n"
        "Der Hund bellt. :: The hound barks.\n",  # duplicate source
    )
    assert load_ding(path) == [
        ("Der Hund bellt.", "The dog barks."),
        ("Die Katze schläft.", "The cat's asleep."),
        ("Er kommt bald wieder.", "He will be back soon."),
    ]
    assert load_ding(path, max_words=3) == [
        ("Der Hund bellt.", "The dog barks."),
        ("Die Katze schläft.", "The cat's asleep."),
    ]
    with pytest.raises(ValueError, match="max_words"):
        load_ding(path, max_words=2)


@pytest.mark.needs_package("trans-de-en")
def test_load_ding(ding_pairs):
    assert len(ding_pairs) >= 10000
    sources = [source for source, _ in ding_pairs]
    assert len(set(sources)) == len(sources)
    for pair in ding_pairs:
        for text in pair:
            assert text[0].isupper() and text[-1] in ".!?", pair
            assert 3 <= len(text.split()) <= 20, pair
            assert not re.search(r"[()\[\]{}<>/~]|\.\.\.|\s{2}", text), pair
            assert text == text.strip(), pair


@pytest.mark.needs_package("trans-de-en")
def test_load_ding_splits(ding_pairs):
    splits = split_pairs(ding_pairs)
    assert len(splits["test"]) == len(splits["valid"]) == 1000
    assert len(splits["train"]) == len(ding_pairs) - 2000
    assert splits == split_pairs(ding_pairs)
    assert translation.DING_PACKAGE == "trans-de-en"
