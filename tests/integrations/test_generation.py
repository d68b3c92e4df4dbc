"""swap_attention(causal_lm, cache_dtype="int8"): keras-hub's generate over
our quantized cache, against keras-hub's own model with its float cache: on a
small Llama (logits, greedy tokens, saving), and the greedy tokens of every
family whose task decodes over it (`QUANTIZED_CACHE_TASKS`)."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
import keras  # noqa: E402

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.generation import (  # noqa: E402
    QUANTIZED_CACHE_TASKS,
    cache_bytes,
    empty_cache,
    quantized_cache_class,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    GENERATE_CANNOT_WINDOW,
    TINY,
    assert_greedy_tokens_are_keras_hubs,
    assert_int8_cache,
    greedy_tokens,
    greedy_without_cache,
    inputs,
    numpy,
    scale_embeddings,
    small_llama,
    tiny_causal_lm,
    two_prompts,
    unfused_qwen_attention,
)


@pytest.fixture(scope="module")
def causal_lm():
    keras.utils.set_random_seed(3)
    causal_lm = small_llama()
    scale_embeddings(causal_lm)
    return causal_lm


def test_the_cache_is_int8_and_a_quarter_of_float32(causal_lm):
    quantized = swap_attention(causal_lm, cache_dtype="int8")
    assert isinstance(quantized, keras_hub.models.LlamaCausalLM)
    assert type(quantized) is quantized_cache_class(keras_hub.models.LlamaCausalLM)
    values, scales = cache = assert_int8_cache(quantized, two_prompts()["token_ids"])
    assert tuple(values.shape) == (2, 2, 2, 16, 2, 16)
    assert tuple(scales.shape) == (2, 2, 2, 16, 2)
    # keras-hub's own float32 cache of the same prompt.
    _, float_cache = causal_lm._build_cache(two_prompts()["token_ids"])
    ratio = cache_bytes(cache) / cache_bytes(float_cache)
    assert ratio == pytest.approx((16 + 2) / (16 * 4))


def test_logits_over_the_int8_cache_near_keras_hubs(causal_lm):
    quantized = swap_attention(causal_lm, cache_dtype="int8")
    token_ids = two_prompts()["token_ids"][:, :8]
    expected = numpy(
        causal_lm({"token_ids": token_ids, "padding_mask": np.ones_like(token_ids)})
    )
    cache = empty_cache(quantized, 2, 8)
    _, _, cache = quantized.call_with_cache(token_ids[:, :4], cache, 0)
    steps = []
    for index in range(4, 8):
        logits, _, cache = quantized.call_with_cache(
            token_ids[:, index : index + 1], cache, index
        )
        steps.append(numpy(logits))
    difference = np.abs(np.concatenate(steps, axis=1) - expected[:, 4:]).max()
    # Quantized: near, and not equal.
    assert 0 < difference < 0.05 * np.abs(expected).max()


def test_greedy_tokens_and_safe_mode_load(causal_lm, tmp_path):
    # int8 rounding may flip a near tie of the logits: most tokens agree.
    expected = greedy_tokens(causal_lm, two_prompts())
    quantized = swap_attention(causal_lm, cache_dtype="int8")
    tokens = greedy_tokens(quantized, two_prompts())
    generated = two_prompts()["padding_mask"] == 0
    agree = (tokens == expected)[generated].mean()
    assert agree >= 0.9, (tokens, expected)
    path = str(tmp_path / "quantized.keras")
    quantized.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(quantized)
    np.testing.assert_array_equal(greedy_tokens(loaded, two_prompts()), tokens)


def test_a_task_it_cannot_build_the_cache_of_is_refused():
    with pytest.raises(ValueError, match="cache_dtype='int8'"):
        quantized_cache_class(keras_hub.models.GPT2CausalLM)


# The tiny model (`TINY`) of each task of `QUANTIZED_CACHE_TASKS`.
INT8_FAMILIES = [
    "llama",
    "mistral",
    "mixtral",
    "phi3",
    "qwen",
    "qwen3",
    "qwen_moe",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gpt_oss",
    "smollm3",
]


def test_the_int8_families_are_every_quantized_cache_task():
    tasks = {path.split(":")[1] for path in QUANTIZED_CACHE_TASKS}
    assert {TINY[name].causal_lm for name in INT8_FAMILIES} == tasks


@pytest.mark.parametrize("name", INT8_FAMILIES)
def test_int8_cache_greedy_tokens_are_keras_hubs_on_every_family(name, monkeypatch):
    # keras-hub's Qwen attention applies the window on its unfused path only.
    unfused_qwen_attention(monkeypatch)
    # The windowed models (Mistral, Mixtral, Qwen, Gemma 2) decode past
    # their window (3 or 4) from the prompt's 4 tokens.
    original = tiny_causal_lm(name)
    swapped = swap_attention(original, cache_dtype="int8")
    assert type(swapped) is quantized_cache_class(type(original))
    vocabulary_size = TINY[name].config["vocabulary_size"]
    prompt = inputs(length=12, real=4, vocabulary_size=vocabulary_size, dtype="int32")
    assert_int8_cache(swapped, prompt["token_ids"])
    if name in GENERATE_CANNOT_WINDOW:
        expected = greedy_without_cache(original, prompt, 4)
        np.testing.assert_array_equal(greedy_tokens(swapped, prompt), expected)
        assert not np.array_equal(expected[:, 4:], prompt["token_ids"][:, 4:])
    else:
        assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=4)


def test_gemma3_refuses_the_int8_cache():
    # Gemma 3's task is not one of QUANTIZED_CACHE_TASKS (its generate wants
    # images): the swap refuses it, naming it.
    with pytest.raises(ValueError, match="received a Gemma3CausalLM"):
        swap_attention(tiny_causal_lm("gemma3", num_layers=1), cache_dtype="int8")
