import numpy as np
import pytest

# Data from the applications (the `apps` extra), absent on a core install.
pytest.importorskip("tensorflow")

from keras_attention.data import train_word_piece
from keras_attention.evaluation import delete_words, word_index, word_weights


@pytest.fixture(scope="module")
def tokenizer():
    return train_word_piece(["playing played player play the cat sat"] * 20, 40)


def test_word_pieces_are_grouped_into_words(tokenizer):
    ids = np.zeros(12, "int32")
    pieces = np.asarray(tokenizer.tokenize("the cats playing"))
    ids[: len(pieces)] = pieces
    index = word_index(tokenizer, ids)
    assert index[0] == 0 and index[len(pieces)] == -1
    assert index[len(pieces) - 1] == 2  # "playing" may be several pieces
    importance = np.where(ids != 0, 1.0, 0.0)
    words, weights = word_weights(tokenizer, ids, importance)
    assert words == ["the", "cats", "playing"]
    assert sum(weights) == pytest.approx(len(pieces))


def test_deleting_a_word_removes_all_its_pieces_and_closes_the_gap(tokenizer):
    grid = np.zeros((2, 8), "int32")
    first = np.asarray(tokenizer.tokenize("the cats"))
    second = np.asarray(tokenizer.tokenize("playing the cat"))
    grid[0, : len(first)] = first
    grid[1, : len(second)] = second
    index = word_index(tokenizer, grid)
    assert index.max() == 4  # five words over two sentences
    deleted = delete_words(grid, index, [1, 2])  # "cats" and "playing"
    words, _ = word_weights(tokenizer, deleted, np.ones(grid.shape))
    assert words == [["the"], ["the", "cat"]]
