"""Beam search: the generic search and the ancestry search, on step
functions and on the models."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.decoding import (
    ancestry_attention_mask,
    ancestry_beam_search,
    beam_search,
    greedy_search,
    model_beam_search,
)
from keras_attention.utils.backend import compile_function
from tests.decoding.markov import END, START, TABLE, markov_step
from tests.models.model_cases import tiny_rnn_seq2seq, tiny_transformer
from tests.models.seq2seq_cases import reversal_pairs


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


def ancestry_markov_step(table):
    """`markov_step` for `ancestry_beam_search`: tokens `(B, k)`."""
    step = markov_step(table)

    def beam_step(token_ids, cache, index, ancestry):
        return step(token_ids, cache, index)

    return beam_step


def test_ancestry_beam_search_ranks_and_penalizes_as_beam_search():
    cache = {"unused": ops.zeros((2, 1))}
    tokens = ancestry_beam_search(ancestry_markov_step(TABLE), cache, 2, 4, 2, 3, 2)
    np.testing.assert_array_equal(tokens, [[5, END, 0, 0]] * 2)
    table = np.zeros((8, 8))
    table[START, END], table[START, 4] = 0.55, 0.45
    table[4, 5] = table[5, END] = table[END, END] = 1.0
    step = ancestry_markov_step(table)
    for penalty, expected in ((0, [END, 0, 0, 0]), (2, [4, 5, END, 0])):
        tokens = ancestry_beam_search(step, cache, 1, 4, START, END, 2, penalty)
        np.testing.assert_array_equal(tokens, [expected])


def test_ancestry_attention_mask_reads_each_beams_own_history():
    # Beam 0 descends from slot 1 at position 0 and slot 0 at position 1; beam
    # 1 from slot 1 then itself; position 2 is not written yet.
    ancestry = np.array([[[1, 0, -1], [1, 1, -1]]], "int32")
    mask = np.asarray(ancestry_attention_mask(ancestry, 2))
    np.testing.assert_array_equal(mask, [[[0, 1, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0]]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ancestry_beam_search_follows_the_beams_histories(seed):
    # The next token's logits hash each beam's whole history (the token at
    # every position) and its source: the generic search keeps the history
    # in a cache it gathers; the ancestry search keeps one row per source of
    # the tokens each slot wrote, never reordered, and reads a beam's history
    # through the ancestry mask. Both must pick the same tokens.
    rng = np.random.default_rng(seed)
    vocabulary, length, k, rows, buckets = 8, 8, 3, 4, 101
    table = rng.normal(0, 2, (buckets, vocabulary))
    table[:, END] -= 2.0  # some beams end, most go on
    table = ops.convert_to_tensor(table, "float32")
    weights = ops.convert_to_tensor(rng.integers(1, buckets, length), "int32")
    salt = ops.convert_to_tensor(rng.integers(0, buckets, rows), "int32")

    def logits_of(history, salt):  # history (..., length), 0 past the step
        hashed = (ops.sum(history * weights, axis=-1) + salt) % buckets
        return ops.take(table, hashed, 0)

    def generic_step(token_ids, cache, index):
        history = ops.slice_update(cache["history"], [0, index], token_ids[:, None])
        return logits_of(history, cache["salt"]), {**cache, "history": history}

    def ancestry_step(token_ids, cache, index, ancestry):
        written = ops.slice_update(cache["written"], [0, index * k], token_ids)
        mask = ops.cast(ancestry_attention_mask(ancestry, k), "int32")
        history = ops.reshape(mask * written[:, None], (rows, k, length, k))
        logits = logits_of(ops.sum(history, axis=-1), cache["salt"][:, None])
        return logits, {**cache, "written": written}

    generic_cache = {"history": ops.zeros((rows, length), "int32"), "salt": salt}
    ancestry_cache = {"written": ops.zeros((rows, length * k), "int32"), "salt": salt}
    for penalty in (0.0, 0.6):
        generic = np.asarray(
            beam_search(
                generic_step, generic_cache, rows, length, START, END, k, penalty
            )
        )
        ancestry = ancestry_beam_search(
            ancestry_step, ancestry_cache, rows, length, START, END, k, penalty
        )
        np.testing.assert_array_equal(ancestry, generic)
        assert len({tuple(row) for row in generic}) > 1  # the sources differ


def transformer_and_sources(seed, **options):
    """A random Transformer and 5 sources of random padded lengths."""
    keras.utils.set_random_seed(seed)
    model = tiny_transformer(num_decoder_layers=2, **options)
    rng = np.random.default_rng(seed)
    sources = rng.integers(4, 20, (5, 8)).astype("int32")
    lengths = rng.integers(1, 9, 5)
    sources[np.arange(8)[None] >= lengths[:, None]] = 0
    return model, sources


def assert_ancestry_gives_the_generic_tokens(
    model, sources, beam_width, length_penalty, end_biases=(0.0,)
):
    """Both beam searches, compiled with XLA, pick the same tokens, with each
    of `end_biases` added to `<end>`'s logit (a likelier `<end>`: beams
    finish at different steps). Returns the generic search's tokens per
    bias."""

    def generic(sources):
        cache = model.initial_cache(sources, 9)
        return beam_search(
            model.decode_step,
            cache,
            ops.shape(sources)[0],
            9,
            START,
            END,
            beam_width,
            length_penalty,
        )

    def ancestry(sources):
        return model_beam_search(model, sources, 9, beam_width, length_penalty)

    variables = [*model.trainable_variables, *model.non_trainable_variables]
    searches = [compile_function(fn, variables) for fn in (generic, ancestry)]
    bias = model.output_dense.bias
    outputs = []
    for end_bias in end_biases:
        bias.assign(np.where(np.arange(bias.shape[0]) == END, end_bias, 0.0))
        expected, tokens = (np.asarray(search(sources)) for search in searches)
        np.testing.assert_array_equal(tokens, expected)
        outputs.append(expected)
    return outputs


@pytest.mark.parametrize(
    "seed, beam_width, length_penalty",
    [
        (0, 2, 0.0),
        pytest.param(1, 4, 0.6, marks=pytest.mark.slow),
        pytest.param(2, 4, 0.0, marks=pytest.mark.slow),
        pytest.param(3, 2, 0.6, marks=pytest.mark.slow),
    ],
)
def test_the_transformers_ancestry_beam_search_gives_the_generic_tokens(
    seed, beam_width, length_penalty
):
    model, sources = transformer_and_sources(seed)
    assert model.beam_search_cache(sources, 9, beam_width) is not None
    outputs = assert_ancestry_gives_the_generic_tokens(
        model, sources, beam_width, length_penalty, end_biases=(0.0, 1.5, 3.0)
    )
    assert (outputs[-1][:, -1] == 0).any()  # some outputs ended early


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(
            {"normalize_first": True, "num_key_value_heads": 1}, marks=pytest.mark.slow
        ),
        pytest.param(
            {"input_positions": "learned", "chunk_size": 4}, marks=pytest.mark.slow
        ),
        # Positions inside the attention: the generic path.
        {"input_positions": None, "attention_positions": "rotary"},
    ],
)
def test_ancestry_beam_search_across_transformer_options(options):
    model, sources = transformer_and_sources(4, **options)
    uses_ancestry = model.beam_search_cache(sources, 9, 3) is not None
    assert uses_ancestry == ("attention_positions" not in options)
    assert_ancestry_gives_the_generic_tokens(model, sources, 3, 0.6, (0.0, 1.5))


def test_bad_search_arguments():
    step = markov_step(TABLE)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(step, {}, 1, 4, START, END, beam_width=0)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(step, {}, 1, 4, START, END, length_penalty=-1)
    with pytest.raises(ValueError, match="max_length"):
        greedy_search(step, {}, 1, 0, START, END)


@pytest.mark.parametrize("attention", ["bahdanau", "luong-general"])
def test_the_rnn_beam_search_leaves_the_memory_where_it_is(attention):
    keras.utils.set_random_seed(0)
    model = tiny_rnn_seq2seq(attention)
    sources = reversal_pairs(4)[0]["encoder_token_ids"]
    cache = model.initial_cache(ops.convert_to_tensor(sources, "int32"))
    assert model.beam_reorder(cache)[-3:] == [False] * 3

    def gather_all(sources):
        cache = model.initial_cache(sources, 7)
        return beam_search(
            model.decode_step, cache, ops.shape(sources)[0], 7, START, END, 3
        )

    variables = [*model.trainable_variables, *model.non_trainable_variables]
    generic = compile_function(gather_all, variables)(ops.convert_to_tensor(sources))
    np.testing.assert_array_equal(model.generate(sources, 7, beam_width=3), generic)
