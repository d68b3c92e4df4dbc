import re

import numpy as np
import pytest

from keras_attention.data.files import DataFormatError
from keras_attention.data.language_modeling import (
    character_tokenizer,
    clean_document,
    decode_tokens,
    load_fortune_texts,
    load_language_model_texts,
    read_documents,
    split_documents,
)
from keras_attention.data.pipeline import language_model_dataset, token_stream
from keras_attention.data.tokenization import END_ID


@pytest.fixture(scope="module")
def fortune_splits():
    return load_language_model_texts("fortunes")


@pytest.mark.needs_package("fortunes")
def test_the_fortunes_are_split_by_whole_documents(fortune_splits):
    sizes = {name: len(texts) for name, texts in fortune_splits.items()}
    assert sizes["train"] > 13000 and sizes["valid"] == sizes["test"] > 700
    everything = [text for texts in fortune_splits.values() for text in texts]
    assert len(set(everything)) == len(everything)  # no text in two splits
    assert sum(map(len, everything)) > 2_400_000
    for text in everything[:3000]:
        assert text == clean_document(text) and text.strip()
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
        assert "\n%\n" not in f"\n{text}\n"
    # Deterministic: the same seed gives the same split, another seed another.
    assert load_language_model_texts("fortunes") == fortune_splits
    assert (
        load_language_model_texts("fortunes", seed=1)["test"]
        != (fortune_splits["test"])
    )


def test_fortune_entries_keep_their_lines(tmp_path):
    (tmp_path / "jokes").write_text(
        "A _\bb_\bo_\bl_\bd joke.  \n\t\t-- Someone\n%\n\n%\nA _\bb_\bo_\bl_\bd joke."
        "  \n\t\t-- Someone\n%\nSecond\x07 one.\r\n",
        encoding="utf-8",
    )
    (tmp_path / "jokes.dat").write_bytes(b"\x00\x01")  # strfile's index: skipped
    texts = load_fortune_texts(tmp_path)
    assert texts == ["A bold joke.\n\t\t-- Someone", "Second one."]


def test_missing_fortunes_name_the_folder_and_the_package(tmp_path):
    folder = str(tmp_path / "fortunes")
    with pytest.raises(FileNotFoundError) as info:
        load_fortune_texts(folder)
    assert folder in str(info.value) and "apt-get install fortunes" in str(info.value)


def test_empty_or_unknown_fortune_files_are_refused(tmp_path):
    (tmp_path / "empty").write_text("%\n\n%\n", encoding="utf-8")
    with pytest.raises(ValueError, match="hold no text.*apt-get install"):
        load_fortune_texts(tmp_path)
    with pytest.raises(ValueError, match=r"Unknown fortune categories \['jokes'\]"):
        load_fortune_texts(tmp_path, categories=["jokes"])


def test_a_text_file_of_documents(tmp_path):
    fortune_format = tmp_path / "quotes.txt"
    fortune_format.write_text("One.\n%\nTwo,\n\nstill two.\n%\nThree.\n")
    assert read_documents(fortune_format) == ["One.", "Two,\n\nstill two.", "Three."]
    paragraphs = tmp_path / "essay.txt"
    paragraphs.write_text("\ufeffFirst part.\n\nSecond\npart.\n\n\nThird.\n")
    assert read_documents(paragraphs) == ["First part.", "Second\npart.", "Third."]
    splits = load_language_model_texts(str(paragraphs))
    assert sorted(sum(splits.values(), [])) == sorted(read_documents(paragraphs))


def test_malformed_text_files_name_the_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_documents(tmp_path / "missing.txt")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"One.\n%\nTwo.\n%\nTh\xe9e.\n")
    with pytest.raises(DataFormatError, match=r"latin1.txt.*not valid UTF-8.*line 5"):
        read_documents(latin1)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"abc\n\x00\x01")
    with pytest.raises(DataFormatError, match=r"binary file.*line 2"):
        read_documents(binary)
    short = tmp_path / "short.txt"
    short.write_text("Only one document.\n")
    with pytest.raises(DataFormatError, match=r"short.txt' holds 1 document"):
        read_documents(short)
    with pytest.raises(ValueError, match=r"'bible'.*\['fortunes'\]"):
        load_language_model_texts("bible")


def test_split_documents_holds_out_a_fraction():
    documents = [f"text {i}" for i in range(100)]
    splits = split_documents(documents, held_out_fraction=0.1, seed=3)
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [80, 10, 10]
    assert sorted(sum(splits.values(), [])) == sorted(documents)
    assert split_documents(documents, 0.1, seed=3) == splits
    with pytest.raises(ValueError, match="held_out_fraction"):
        split_documents(documents, held_out_fraction=0.5)


def test_characters_become_code_points_and_back():
    tokenizer = character_tokenizer()
    stream = token_stream(["Hi!", "caf\u00e9\n\tok"], tokenizer)
    assert stream.dtype == np.int32
    assert stream.tolist() == [
        72,
        105,
        33,
        END_ID,
        99,
        97,
        102,
        127,
        10,
        9,
        111,
        107,
        END_ID,
    ]
    assert stream[-1] == END_ID
    assert decode_tokens(tokenizer, stream) == "Hi!"
    assert decode_tokens(tokenizer, [END_ID, *stream[4:], END_ID, 0, 0]) == (
        "caf\ufffd\n\tok"
    )


def test_language_model_windows_predict_the_next_token():
    stream = np.arange(1, 12, dtype="int32")  # 11 tokens: 10 targets
    dataset, windows = language_model_dataset(stream, 4, batch_size=8)
    assert windows == 3
    inputs, targets, weights = (np.asarray(x) for x in next(iter(dataset)))
    assert inputs.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 0]]
    assert targets.tolist() == [[2, 3, 4, 5], [6, 7, 8, 9], [10, 11, 0, 0]]
    assert weights.sum() == 10 and weights[2].tolist() == [1, 1, 0, 0]
    shuffled, _ = language_model_dataset(stream, 4, 2, shuffle=True, repeat=True)
    batches = [np.asarray(b[0]) for b in shuffled.take(5)]
    assert all(b.shape == (2, 4) for b in batches)  # full batches, without end
    with pytest.raises(ValueError, match="at least 2 tokens"):
        language_model_dataset([5], 4, 2)
