"""Greedy search and its loop: the tokens it keeps, its end, no keras-hub
needed, and the same tokens as keras-hub's `GreedySampler`."""

import sys

import numpy as np
import pytest
from keras import ops

from keras_attention.decoding import (
    greedy_fill,
    greedy_search,
    sample,
    truncate_after_end,
)
from keras_attention.decoding.tokens import _initial_tokens
from keras_attention.utils.backend import compile_function
from tests.decoding.markov import END, START, TABLE, markov_step
from tests.models.model_cases import (
    LM_VOCABULARY,
    tiny_gpt,
    tiny_rnn_seq2seq,
    tiny_transformer,
)
from tests.models.seq2seq_cases import reversal_pairs


def test_truncate_after_end():
    tokens = np.array([[5, 3, 6, 3], [5, 6, 7, 8]])
    np.testing.assert_array_equal(
        truncate_after_end(tokens, 3), [[5, 3, 0, 0], [5, 6, 7, 8]]
    )


def test_greedy_fill_keeps_the_given_tokens_and_stops_at_the_end_token():
    # Row 0 is given <start>, 5 and <end> (an <end> in a prompt does not stop
    # it) and generates <end>; row 1 picks 4 and <end>, one step earlier, and
    # goes on (one more <end>) until row 0 is done. The loop stops there:
    # the last positions keep their padding.
    step = markov_step(TABLE)
    prompt = np.array([[START, 5, END, 0, 0, 0], [START, 0, 0, 0, 0, 0]], "int32")
    tokens = greedy_fill(step, {}, prompt, prompt != 0, end_id=END)
    np.testing.assert_array_equal(
        tokens, [[START, 5, END, END, 0, 0], [START, 4, END, END, 0, 0]]
    )
    # Without an end token the loop fills every position.
    tokens = greedy_fill(step, {}, prompt, prompt != 0)
    np.testing.assert_array_equal(
        tokens, [[START, 5, END, END, END, END], [START, 4, END, END, END, END]]
    )


def test_greedy_search_and_greedy_generation_need_no_keras_hub(monkeypatch):
    # The core install has no keras-hub: greedy search and a language
    # model's greedy `generate` run without it; the other samplers say what
    # to install.
    monkeypatch.setitem(sys.modules, "keras_hub", None)  # import fails
    greedy = greedy_search(markov_step(TABLE), {}, 2, 4, START, END)
    np.testing.assert_array_equal(greedy, [[4, END, 0, 0]] * 2)
    model = tiny_gpt(end_token_id=END)
    assert np.asarray(model.generate(np.array([[5, 6]]), max_length=6)).shape == (1, 6)
    with pytest.raises(ImportError, match="pip install keras-hub"):
        model.generate(np.array([[5, 6]]), max_length=6, sampler="top_k")


# -- the same tokens as keras-hub's GreedySampler -------------------------------


def keras_hub_greedy_search(model, source, max_length, end_id):
    """`model.generate`'s greedy search with keras-hub's `GreedySampler` (the
    search `greedy_search` replaced), compiled with XLA like `generate`."""
    keras_hub = pytest.importorskip("keras_hub")

    def search(source):
        cache = model.initial_cache(source, max_length)
        prompt = _initial_tokens(ops.shape(source)[0], max_length, START)
        sampler = keras_hub.samplers.GreedySampler()
        tokens = sample(model.decode_step, cache, prompt, sampler, None, end_id, model)
        return truncate_after_end(tokens[:, 1:], end_id)

    return compile_function(search, model.variables)(ops.convert_to_tensor(source))


def end_token_of_rows(tokens):
    """An end token that ends the rows of `tokens` (greedy outputs with no
    end) at the most different steps (or not at all), one row at least before
    its last step, so that padding follows: among the tokens that end a row
    early, the one whose first positions in the rows are most varied."""
    last = tokens.shape[1] - 1

    def first_positions(token):
        return {row.tolist().index(token) if token in row else None for row in tokens}

    def ends_a_row_early(token):
        return any(p is not None and p < last for p in first_positions(token))

    candidates = set(np.unique(tokens).tolist()) - {0, START}
    end = max(
        sorted(candidates),
        key=lambda token: (ends_a_row_early(token), len(first_positions(token))),
    )
    # The search stops at different steps, and pads a row after its end.
    assert len(first_positions(end)) > 1 and ends_a_row_early(end), tokens
    return end


@pytest.mark.parametrize(
    "build", [tiny_transformer, tiny_rnn_seq2seq], ids=["transformer", "rnn"]
)
def test_greedy_search_picks_the_tokens_of_keras_hubs_greedy_sampler(build):
    pytest.importorskip("keras_hub")
    source = reversal_pairs(8)[0]["encoder_token_ids"]
    model = build()
    assert model.start_token_id == START
    length = 9
    unended = greedy_fill(
        model.decode_step,
        model.initial_cache(ops.convert_to_tensor(source), length),
        _initial_tokens(len(source), length, START),
    )
    model.end_token_id = end_token_of_rows(np.asarray(unended)[:, 1:])
    ours = np.asarray(model.generate(source, length))
    theirs = keras_hub_greedy_search(model, source, length, model.end_token_id)
    np.testing.assert_array_equal(ours, theirs)
    assert (ours == model.end_token_id).any() and (ours == 0).any()


def test_greedy_generation_picks_the_tokens_of_keras_hubs_greedy_sampler():
    keras_hub = pytest.importorskip("keras_hub")
    rng = np.random.default_rng(0)
    prompts = rng.integers(4, LM_VOCABULARY, (4, 5)).astype("int32")
    for row, width in enumerate([5, 1, 3, 2]):  # prompts of different lengths
        prompts[row, width:] = 0
    model = tiny_gpt()
    unended = np.asarray(model.sample(prompts, 16))
    model.end_token_id = end_token_of_rows(unended[:, 5:])
    ours = np.asarray(model.generate(prompts, 16, sampler="greedy"))
    sampler = keras_hub.samplers.GreedySampler()
    np.testing.assert_array_equal(ours, model.generate(prompts, 16, sampler=sampler))
    given = prompts != 0
    np.testing.assert_array_equal(ours[:, :5][given], prompts[given])
    assert (ours == model.end_token_id).any() and (ours == 0).any()
