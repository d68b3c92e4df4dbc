"""Speculative decoding of swapped keras-hub causal LMs: greedy output equal
to keras-hub's own greedy generate of the target."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
import keras  # noqa: E402

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.speculative import (  # noqa: E402
    speculative_generate,
)


def _causal_lm(num_layers, hidden_dim, vocabulary_size=100):
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers,
        num_query_heads=4,
        num_key_value_heads=2,
        hidden_dim=hidden_dim,
        intermediate_dim=2 * hidden_dim,
    )
    return keras_hub.models.LlamaCausalLM(backbone, preprocessor=None)


def _prompt(width):
    prompt = np.zeros((2, width), "int32")
    prompt[0, :4] = [5, 6, 7, 8]
    prompt[1, :6] = [9, 10, 11, 12, 13, 14]
    return prompt


def test_greedy_tokens_are_keras_hubs_own():
    keras.utils.set_random_seed(1)
    target = _causal_lm(2, 64)
    # Larger embeddings than the default: the tiny model's greedy tokens then
    # vary instead of repeating one token.
    embeddings = target.backbone.token_embedding.embeddings
    embeddings.assign(embeddings * 20.0)
    draft = swap_attention(_causal_lm(1, 32))
    prompt = _prompt(20)
    target.compile(sampler="greedy")
    expected = target.generate(
        {"token_ids": prompt, "padding_mask": prompt != 0}, stop_token_ids=None
    )["token_ids"]
    tokens, stats = speculative_generate(
        swap_attention(target), draft, prompt, 20, num_draft_tokens=3
    )
    np.testing.assert_array_equal(np.asarray(tokens), np.asarray(expected))
    assert stats["new_tokens"] == 20 - 4
    assert stats["proposed"] == 3 * stats["rounds"]


def test_the_draft_is_checked():
    target = swap_attention(_causal_lm(1, 32))
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(
            target, swap_attention(_causal_lm(1, 32, 50)), _prompt(8), 8
        )
    with pytest.raises(ValueError, match="swap the model's attention first"):
        speculative_generate(target, _causal_lm(1, 32), _prompt(8), 8)
