import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.decoding.speculative import speculative_generate
from keras_attention.models import GPT, LSTMLanguageModel

SMALL = {
    "num_layers": 2,
    "hidden_dim": 32,
    "num_heads": 2,
    "intermediate_dim": 64,
    "dropout": 0.0,
    "input_positions": None,
    "attention_positions": "rotary",
}


def tiny_gpt(vocabulary_size=23, max_length=24, **overrides):
    return GPT(vocabulary_size, max_length, **{**SMALL, **overrides})


def sharpen(model, factor):
    """Scales the tied embeddings, so that the next-token distributions are
    far from uniform."""
    for weight in model.weights:
        if "embeddings" in weight.path:
            weight.assign(weight * factor)


@pytest.mark.slow
@pytest.mark.parametrize("num_draft_tokens", [1, 3])
def test_greedy_output_is_the_targets_greedy_output(num_draft_tokens):
    keras.utils.set_random_seed(1)
    target = tiny_gpt(end_token_id=7)
    draft = tiny_gpt(num_layers=1, hidden_dim=16, intermediate_dim=32)
    prompts = np.array([[3, 4, 5, 6], [7, 8, 0, 0], [9, 0, 0, 0]])
    expected = np.asarray(target.generate(prompts, max_length=24))
    rounds = {}
    for name, proposer in (("draft", draft), ("itself", target)):
        tokens, stats = speculative_generate(
            target, proposer, prompts, max_length=24, num_draft_tokens=num_draft_tokens
        )
        np.testing.assert_array_equal(np.asarray(tokens), expected)
        assert stats["proposed"] == stats["rounds"] * num_draft_tokens
        assert stats["new_tokens"] == 24 - 1  # from the shortest prompt on
        rounds[name] = stats["rounds"]
    # The target as its own draft has every proposal kept: k + 1 tokens per
    # target pass.
    assert rounds["itself"] == -(-(24 - 1) // (num_draft_tokens + 1))
    assert rounds["draft"] >= rounds["itself"]


def target_joint(target, prompt, vocabulary_size):
    """The target's exact distribution of the two tokens after `prompt`."""

    def next_probabilities(tokens):
        logits = ops.convert_to_numpy(target(np.array([tokens])))[0, -1]
        probabilities = np.exp(logits - logits.max())
        return probabilities / probabilities.sum()

    first = next_probabilities(prompt)
    return np.stack(
        [first[a] * next_probabilities([*prompt, a]) for a in range(vocabulary_size)]
    )


def two_token_frequencies(tokens, vocabulary_size):
    counts = np.zeros((vocabulary_size, vocabulary_size))
    np.add.at(counts, (tokens[:, 1], tokens[:, 2]), 1)
    return counts / len(tokens)


def test_sampled_tokens_follow_the_targets_distribution():
    """Acceptance, residual draws and the rows that wait for the slowest
    row: the two tokens after a prompt, drawn 20,000 times, against the
    target's exact joint distribution (a draft with other weights, so that
    proposals are rejected)."""
    keras.utils.set_random_seed(2)
    vocabulary_size = 6
    target = tiny_gpt(vocabulary_size, 8, num_layers=1, hidden_dim=16)
    draft = tiny_gpt(vocabulary_size, 8, num_layers=1, hidden_dim=16)
    sharpen(target, 3.0)
    sharpen(draft, 2.0)
    prompts = np.full((20000, 1), 2)
    tokens, stats = speculative_generate(
        target, draft, prompts, 3, num_draft_tokens=2, temperature=1.0, seed=5
    )
    joint = target_joint(target, [2], vocabulary_size)
    frequencies = two_token_frequencies(np.asarray(tokens), vocabulary_size)
    # About 5 standard deviations of a cell's frequency.
    np.testing.assert_allclose(frequencies, joint, atol=0.007)
    # The proposals' own distribution is another one.
    assert np.abs(target_joint(draft, [2], vocabulary_size) - joint).max() > 0.03


def test_same_seed_same_tokens_other_seed_other_tokens():
    keras.utils.set_random_seed(3)
    target = tiny_gpt()
    draft = tiny_gpt(num_layers=1)
    prompts = np.array([[3, 4], [5, 0]])
    runs = [
        np.asarray(
            speculative_generate(
                target, draft, prompts, 16, temperature=1.0, seed=seed
            )[0]
        )
        for seed in (11, 11, 12)
    ]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    np.testing.assert_array_equal(runs[0][:, :1], prompts[:, :1])


def test_bad_arguments_are_named():
    keras.utils.set_random_seed(4)
    target = tiny_gpt()
    prompts = np.array([[3, 4]])
    with pytest.raises(ValueError, match="share their vocabulary.*24.*23"):
        speculative_generate(target, tiny_gpt(24), prompts)
    lstm = LSTMLanguageModel(23, hidden_dim=8, max_length=24)
    with pytest.raises(ValueError, match="draft model must keep a cache by position"):
        speculative_generate(target, lstm, prompts)
    with pytest.raises(ValueError, match="temperature.*received temperature=0"):
        speculative_generate(target, target, prompts, temperature=0)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        speculative_generate(target, target, prompts, num_draft_tokens=0)
    with pytest.raises(ValueError, match="prompt's length"):
        speculative_generate(target, target, np.array([[3, 4, 5]]), max_length=2)
    with pytest.raises(ValueError, match="at least one token"):
        speculative_generate(target, target, np.array([[0, 4]]))
    learned = tiny_gpt(input_positions="learned", attention_positions=None)
    with pytest.raises(ValueError, match="up to 27 for max_length=24.*learned"):
        speculative_generate(learned, learned, prompts, 24, num_draft_tokens=4)
    tokens, _ = speculative_generate(learned, learned, prompts, 21, 4)
    assert np.asarray(tokens).shape == (1, 21)


@pytest.mark.slow  # trains two language models through the lm task
def test_lm_continues_texts_speculatively_as_greedy_search():
    from keras_attention.data.language_modeling import character_tokenizer
    from keras_attention.tasks import lm
    from keras_attention.tasks.common import ArgumentError

    keras.utils.set_random_seed(3)
    tokenizer = character_tokenizer()
    sizes = {"input_positions": "learned", "attention_positions": None}
    target = tiny_gpt(128, 32, tokenizer=tokenizer, end_token_id=3, **sizes)
    draft = tiny_gpt(128, 32, tokenizer=tokenizer, num_layers=1, **sizes)
    sharpen(target, 4.0)
    prompts = ["The ", "Q:"]
    greedy = lm.continue_texts(target, prompts, 24, "greedy")
    assert lm.continue_texts(target, prompts, 24, "greedy", draft, 3) == greedy
    # Learned positions: a round reads 2 positions past the output.
    assert len(lm.continue_texts(target, ["A"], None, "greedy", draft, 3)[0]) <= 30
    with pytest.raises(ArgumentError, match="more than speculative decoding"):
        lm.continue_texts(target, prompts, 31, "greedy", draft, 3)
    with pytest.raises(ArgumentError, match="decodes greedily"):
        lm.continue_texts(target, prompts, 24, "top_p", draft, 3)
    other = tiny_gpt(64, 32, num_layers=1, **sizes)
    with pytest.raises(ArgumentError, match="tokenizer .64 ids. is not the model"):
        lm.continue_texts(target, prompts, 24, "greedy", other, 3)

    measured = lm.measure_speculative(
        target, draft, prompts, 24, 3, repeats=1, temperature=0.8, separately=True
    )
    assert measured["same_as_greedy"] and measured["one_at_a_time"]["same_as_greedy"]
    assert measured["proposed"] == 3 * measured["rounds"]
    assert measured["speedup"] > 0 and 0 <= measured["acceptance"] <= 1
    assert set(measured["sampling"]) >= {"accepted_per_round", "acceptance"}


def tiny_transformer(hidden_dim=32, layers=2, vocabulary_size=13, **overrides):
    from keras_attention.models import Transformer

    sizes = {
        "num_heads": 2,
        "intermediate_dim": 2 * hidden_dim,
        "dropout": 0.0,
        "max_source_length": 8,
        "max_target_length": 16,
        "num_encoder_layers": layers,
        "num_decoder_layers": layers,
    }
    return Transformer(
        vocabulary_size, vocabulary_size, hidden_dim=hidden_dim, **sizes, **overrides
    )


@pytest.mark.slow
@pytest.mark.parametrize("num_draft_tokens", [4])
def test_translation_greedy_output_is_the_targets_greedy_output(num_draft_tokens):
    from keras_attention.decoding.speculative import speculative_translate

    keras.utils.set_random_seed(5)
    target = tiny_transformer()
    draft = tiny_transformer(hidden_dim=16, layers=1)
    sharpen(target, 3.0)
    source = np.array([[5, 6, 7, 0], [8, 9, 10, 11], [4, 0, 0, 0]])
    max_length = 16 - num_draft_tokens
    expected = np.asarray(target.generate(source, max_length))
    rounds = {}
    for name, proposer in (("draft", draft), ("itself", target)):
        tokens, stats = speculative_translate(
            target, proposer, source, num_draft_tokens=num_draft_tokens
        )
        np.testing.assert_array_equal(np.asarray(tokens), expected)
        assert stats["proposed"] == stats["rounds"] * num_draft_tokens
        rounds[name] = stats["rounds"]
    assert rounds["itself"] <= -(-max_length // (num_draft_tokens + 1))
    assert rounds["draft"] >= rounds["itself"]
    sampled = [
        np.asarray(
            speculative_translate(target, draft, source, 8, 2, 1.0, seed=seed)[0]
        )
        for seed in (1, 1)
    ]
    np.testing.assert_array_equal(*sampled)
    assert sampled[0].shape == (3, 8)


def test_translation_bad_arguments_are_named():
    from keras_attention.decoding.speculative import speculative_translate

    target = tiny_transformer(hidden_dim=16, layers=1)
    source = np.array([[5, 6]])
    other = tiny_transformer(hidden_dim=16, layers=1, vocabulary_size=14)
    with pytest.raises(ValueError, match="source_vocabulary_size=14 .draft. and 13"):
        speculative_translate(target, other, source)
    with pytest.raises(ValueError, match="encoder-decoder model"):
        speculative_translate(target, tiny_gpt(13), source)
    with pytest.raises(ValueError, match="up to 17 for max_length=13.*<= 12"):
        speculative_translate(target, target, source, 13, num_draft_tokens=4)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        speculative_translate(target, target, source, num_draft_tokens=0)
