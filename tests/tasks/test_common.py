import pytest

from keras_attention.tasks import common
from keras_attention.tasks.common import ArgumentError, check_training_size


def test_training_sizes_are_checked_against_the_data():
    check_training_size(64, 64, "pairs")
    check_training_size(8, 100, "texts", num_train=100, available=100)
    with pytest.raises(ArgumentError) as error:
        check_training_size(100_000, 19_990, "pairs")
    assert str(error.value) == (
        "batch size 100,000 is larger than the training split (19,990 pairs): "
        "no full batch to train on"
    )
    assert error.value.exit_status == 2
    with pytest.raises(ArgumentError, match="num_train 5,000 is more than the "):
        check_training_size(8, 1_000, "images", num_train=5_000, available=1_000)


TEXTS = ["the cat sat on the mat", "a dog sat on a log"] * 20


def test_a_vocabulary_learned_once_is_read_by_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_ATTENTION_CACHE", str(tmp_path / "cache"))
    first = common.cached_word_piece(tmp_path / "one.txt", TEXTS, 40, lowercase=True)

    def no_learning(*args, **kwargs):
        raise AssertionError("learned the vocabulary again")

    monkeypatch.setattr(common, "train_word_piece", no_learning)
    second = common.cached_word_piece(
        tmp_path / "two.txt", TEXTS, 40, lowercase=True, extra_tokens=["[MASK]"]
    )
    assert second.get_vocabulary() == [*first.get_vocabulary(), "[MASK]"]
    # Other texts, another size or casing: learned anew.
    for texts, size, lowercase in ((TEXTS[:1], 40, True), (TEXTS, 30, True)):
        with pytest.raises(AssertionError, match="again"):
            common.cached_word_piece(tmp_path / "x.txt", texts, size, lowercase)
    with pytest.raises(AssertionError, match="again"):
        common.cached_word_piece(tmp_path / "x.txt", TEXTS, 40, lowercase=False)


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("KERAS_ATTENTION_CACHE", str(blocked))
    tokenizer = common.cached_word_piece(tmp_path / "vocabulary.txt", TEXTS, 40)
    assert (tmp_path / "vocabulary.txt").read_text().splitlines() == (
        tokenizer.get_vocabulary()
    )
