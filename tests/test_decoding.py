import sys

import keras
import numpy as np
import pytest
from keras import ops, tree

from keras_attention.decoding import (
    _initial_tokens,
    ancestry_attention_mask,
    ancestry_beam_search,
    beam_search,
    greedy_fill,
    greedy_search,
    model_beam_search,
    sample,
    truncate_after_end,
)
from keras_attention.utils.backend import compile_function
from tests.models.model_cases import (
    LM_VOCABULARY,
    tiny_gpt,
    tiny_lstm_lm,
    tiny_rnn_seq2seq,
    tiny_transformer,
)
from tests.models.seq2seq_cases import reversal_pairs

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


@pytest.mark.parametrize("build", [tiny_gpt, tiny_lstm_lm])
def test_a_prompt_prefilled_in_one_pass_continues_as_token_by_token(build):
    # GPT's prompt goes through `call_with_cache` at once: queries at an
    # offset into the cache, causal to the lower right; the LSTM's through
    # its steps. Their caches and continuations equal those of feeding the
    # prompt one token at a time.
    rng = np.random.default_rng(1)
    prompts = rng.integers(4, LM_VOCABULARY, (3, 6)).astype("int32")
    for row, width in enumerate([6, 4, 5]):
        prompts[row, width:] = 0
    model = build()
    one_pass = model.prefill(prompts[:, :3], model.initial_cache(3, 12))
    stepped = model.initial_cache(3, 12)
    for index in range(3):
        stepped = model.decode_step(prompts[:, index], stepped, index)[1]
    for a, b in zip(tree.flatten(one_pass), tree.flatten(stepped), strict=True):
        np.testing.assert_allclose(
            ops.convert_to_numpy(a), ops.convert_to_numpy(b), atol=1e-5
        )
    token_by_token = np.asarray(model.sample(prompts, 12, start=1))
    np.testing.assert_array_equal(model.sample(prompts, 12, start=4), token_by_token)
    np.testing.assert_array_equal(model.generate(prompts, 12), token_by_token)


def test_generate_takes_prompts_of_another_width_at_the_same_start():
    # Same `max_length` and the same shortest prompt, so the same first new
    # position: the compiled search must still be traced for the new width.
    model = tiny_gpt()
    narrow = np.array([[5, 6, 7], [8, 9, 0]], "int32")
    wide = np.array([[5, 6, 7, 4], [8, 9, 0, 0]], "int32")
    for prompts in (narrow, wide):
        ours = np.asarray(model.generate(prompts, 10))
        np.testing.assert_array_equal(ours, np.asarray(model.sample(prompts, 10)))


@pytest.mark.parametrize("build", [tiny_transformer, tiny_rnn_seq2seq])
def test_a_forced_prefix_is_prefilled_and_continued_as_token_by_token(build):
    # The Transformer's decoder takes the prefix in one pass
    # (`call_with_cache`), the RNN's token by token: both continue it as
    # feeding the prefix one token at a time through the search would.
    model = build()
    sources = reversal_pairs(3, seed=2)[0]["encoder_token_ids"]
    prefix = np.array([[5, 6, 7], [8, 9, 5], [6, 6, 6]], "int32")
    got = np.asarray(model.generate(sources, 8, prefix_ids=prefix))
    np.testing.assert_array_equal(got[:, :3], prefix)

    tokens = ops.slice_update(
        ops.zeros((3, 9), "int32"),
        [0, 0],
        np.concatenate([np.full((3, 1), model.start_token_id), prefix], 1),
    )
    given = np.broadcast_to(np.arange(9) < 4, (3, 9))
    cache = model.initial_cache(model.generation_inputs(sources), 8)
    stepped = greedy_fill(model.decode_step, cache, tokens, given, model.end_token_id)
    want = truncate_after_end(stepped[:, 1:], model.end_token_id, given[:, 1:])
    np.testing.assert_array_equal(got, np.asarray(want))
    with pytest.raises(ValueError, match="greedy search"):
        model.generate(sources, 8, beam_width=2, prefix_ids=prefix)
    with pytest.raises(ValueError, match=r"received shape \(3, 8\)"):
        model.generate(sources, 8, prefix_ids=np.ones((3, 8), "int32"))


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
