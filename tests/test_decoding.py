import numpy as np
import pytest
from keras import ops

from keras_attention.decoding import beam_search, greedy_search, truncate_after_end

START, END = 2, 3


def markov_step(table):
    """A step function whose next-token log-probabilities depend only on the
    previous token: `table[previous]`."""
    table = ops.convert_to_tensor(np.log(np.asarray(table, "float32") + 1e-9))

    def step(token_ids, cache, index):
        return ops.take(table, token_ids, axis=0), cache

    return step


# From <start>, token 4 is likely (0.6) but always leads to a poor
# continuation (0.3 each for 6 and 7); token 5 (0.4) leads to <end> for sure.
# Greedy picks 4 (best sequence probability 0.6 * 0.3 * 1 = 0.18); beam search
# finds 5, <end> (0.4).
TABLE = np.zeros((8, 8))
TABLE[START, 4], TABLE[START, 5] = 0.6, 0.4
TABLE[4, 6], TABLE[4, 7], TABLE[4, END] = 0.3, 0.3, 0.4
TABLE[5, END] = 1.0
TABLE[6, END] = TABLE[7, END] = 1.0
TABLE[END, END] = TABLE[0, 0] = 1.0


def test_beam_search_finds_the_more_probable_sequence_that_greedy_misses():
    step = markov_step(TABLE)
    cache = {"unused": ops.zeros((2, 1))}
    greedy = np.asarray(greedy_search(step, cache, 2, 4, START, END))
    beam = np.asarray(beam_search(step, cache, 2, 4, START, END, beam_width=2))
    np.testing.assert_array_equal(greedy, [[4, END, 0, 0]] * 2)
    np.testing.assert_array_equal(beam, [[5, END, 0, 0]] * 2)


def test_length_penalty_prefers_longer_hypotheses():
    # <start> -> <end> (0.5) or 4 (0.5); 4 -> 5 (1.0); 5 -> <end> (1.0).
    table = np.zeros((8, 8))
    table[START, END], table[START, 4] = 0.55, 0.45
    table[4, 5] = table[5, END] = table[END, END] = 1.0
    step = markov_step(table)
    cache = {"unused": ops.zeros((1, 1))}
    plain = np.asarray(beam_search(step, cache, 1, 4, START, END, 2, length_penalty=0))
    long = np.asarray(beam_search(step, cache, 1, 4, START, END, 2, length_penalty=2))
    np.testing.assert_array_equal(plain, [[END, 0, 0, 0]])
    np.testing.assert_array_equal(long, [[4, 5, END, 0]])


def test_beam_search_reorders_the_cache_with_the_beams():
    # The cache counts the steps of each beam's own history: a cache that was
    # not reordered with its beam would mix counts of different histories.
    def step(token_ids, cache, index):
        logits = ops.one_hot(ops.minimum(cache + 4, 7), 8) * 10.0
        return logits, cache + 1

    tokens = beam_search(step, ops.zeros((3,), "int32"), 3, 4, START, END, 3)
    np.testing.assert_array_equal(tokens, [[4, 5, 6, 7]] * 3)


def test_truncate_after_end():
    tokens = np.array([[5, 3, 6, 3], [5, 6, 7, 8]])
    np.testing.assert_array_equal(
        truncate_after_end(tokens, 3), [[5, 3, 0, 0], [5, 6, 7, 8]]
    )


def test_bad_search_arguments():
    step = markov_step(TABLE)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(step, {}, 1, 4, START, END, beam_width=0)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(step, {}, 1, 4, START, END, length_penalty=-1)
    with pytest.raises(ValueError, match="max_length"):
        greedy_search(step, {}, 1, 0, START, END)
