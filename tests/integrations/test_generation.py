"""swap_attention(causal_lm, cache_dtype="int8"): keras-hub's generate over
our quantized cache, against keras-hub's own model with its float cache."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
import keras  # noqa: E402

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.generation import (  # noqa: E402
    cache_bytes,
    empty_cache,
    quantized_cache_class,
)

CONFIG = dict(
    vocabulary_size=100,
    num_layers=2,
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=64,
    intermediate_dim=128,
)


@pytest.fixture(scope="module")
def causal_lm():
    keras.utils.set_random_seed(3)
    backbone = keras_hub.models.LlamaBackbone(**CONFIG)
    # Larger embeddings than the default keep the tiny model's greedy tokens
    # from collapsing onto one token.
    embeddings = backbone.token_embedding.embeddings
    embeddings.assign(embeddings * 20.0)
    return keras_hub.models.LlamaCausalLM(backbone, preprocessor=None)


def _prompt():
    token_ids = np.zeros((2, 16), "int32")
    token_ids[0, :4] = [5, 6, 7, 8]
    token_ids[1, :6] = [9, 10, 11, 12, 13, 14]
    return {"token_ids": token_ids, "padding_mask": token_ids != 0}


def _greedy(model):
    model.compile(sampler="greedy")
    return np.asarray(model.generate(_prompt(), stop_token_ids=None)["token_ids"])


def test_the_cache_is_int8_and_a_quarter_of_float32(causal_lm):
    quantized = swap_attention(causal_lm, cache_dtype="int8")
    assert isinstance(quantized, keras_hub.models.LlamaCausalLM)
    assert type(quantized) is quantized_cache_class(keras_hub.models.LlamaCausalLM)
    _, cache = quantized._build_cache(_prompt()["token_ids"])
    values, scales = cache
    assert keras.backend.standardize_dtype(values.dtype) == "int8"
    assert keras.backend.standardize_dtype(scales.dtype) == "int16"
    assert tuple(values.shape) == (2, 2, 2, 16, 2, 16)
    assert tuple(scales.shape) == (2, 2, 2, 16, 2)
    # keras-hub's own float32 cache of the same prompt.
    _, float_cache = causal_lm._build_cache(_prompt()["token_ids"])
    ratio = cache_bytes(cache) / cache_bytes(float_cache)
    assert ratio == pytest.approx((16 + 2) / (16 * 4))


def test_logits_over_the_int8_cache_near_keras_hubs(causal_lm):
    quantized = swap_attention(causal_lm, cache_dtype="int8")
    token_ids = _prompt()["token_ids"][:, :8]
    expected = np.asarray(
        causal_lm({"token_ids": token_ids, "padding_mask": np.ones_like(token_ids)})
    )
    cache = empty_cache(quantized, 2, 8)
    _, _, cache = quantized.call_with_cache(token_ids[:, :4], cache, 0)
    steps = []
    for index in range(4, 8):
        logits, _, cache = quantized.call_with_cache(
            token_ids[:, index : index + 1], cache, index
        )
        steps.append(np.asarray(logits))
    difference = np.abs(np.concatenate(steps, axis=1) - expected[:, 4:]).max()
    # Quantized: near, and not equal.
    assert 0 < difference < 0.05 * np.abs(expected).max()


def test_greedy_tokens_and_safe_mode_load(causal_lm, tmp_path):
    expected = _greedy(causal_lm)
    quantized = swap_attention(causal_lm, cache_dtype="int8")
    tokens = _greedy(quantized)
    generated = _prompt()["padding_mask"] == 0
    agree = (tokens == expected)[generated].mean()
    assert agree >= 0.9, (tokens, expected)
    path = str(tmp_path / "quantized.keras")
    quantized.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(quantized)
    np.testing.assert_array_equal(_greedy(loaded), tokens)


def test_a_task_it_cannot_build_the_cache_of_is_refused():
    with pytest.raises(ValueError, match="cache_dtype='int8'"):
        quantized_cache_class(keras_hub.models.GPT2CausalLM)
