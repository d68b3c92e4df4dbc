"""The models' `generate`: a prompt or a forced prefix prefilled, and
continued as feeding it token by token would."""

import numpy as np
import pytest
from keras import ops, tree

from keras_attention.decoding import greedy_fill, truncate_after_end
from tests.models.model_cases import (
    LM_VOCABULARY,
    tiny_gpt,
    tiny_lstm_lm,
    tiny_rnn_seq2seq,
    tiny_transformer,
)
from tests.models.seq2seq_cases import reversal_pairs


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
