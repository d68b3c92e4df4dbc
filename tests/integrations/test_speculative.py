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
from tests.integrations.keras_hub_models import (  # noqa: E402
    greedy_tokens,
    numpy,
    scale_embeddings,
    small_llama,
    two_prompts,
)


def _prompt(width):
    return two_prompts(width)["token_ids"]


def test_greedy_tokens_are_keras_hubs_own():
    keras.utils.set_random_seed(1)
    target = small_llama(2, 64)
    scale_embeddings(target)
    draft = swap_attention(small_llama(1, 32))
    expected = greedy_tokens(target, two_prompts(20))
    tokens, stats = speculative_generate(
        swap_attention(target), draft, _prompt(20), 20, num_draft_tokens=3
    )
    np.testing.assert_array_equal(numpy(tokens), expected)
    assert stats["new_tokens"] == 20 - 4
    assert stats["proposed"] == 3 * stats["rounds"]


def test_the_draft_is_checked():
    target = swap_attention(small_llama(1, 32))
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(
            target, swap_attention(small_llama(1, 32, 50)), _prompt(8), 8
        )
    with pytest.raises(ValueError, match="swap the model's attention first"):
        speculative_generate(target, small_llama(1, 32), _prompt(8), 8)
