"""keras-hub's Mixtral with our attention: the same outputs and greedy tokens
as keras-hub's own model with a sliding window shorter than the sequence,
its mixture-of-experts feed-forward untouched, saving and LoRA."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.mixtral import (  # noqa: E402
    MixtralAttention,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_weights_are_keras_hubs,
    attention_layers,
    inputs,
    outputs,
    saved_and_loaded,
    tiny_backbone,
    tiny_causal_lm,
)


def backbone(**overrides):
    """The tiny Mixtral (4 experts, 2 a token, window 3), its weights
    random, norms included."""
    return tiny_backbone("mixtral", **overrides)


@pytest.mark.parametrize("window", [3, None], ids=["window", "no_window"])
def test_backbone_outputs_equal_keras_hubs(window):
    original = backbone(sliding_window=window)
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.MixtralBackbone)
    layers = attention_layers(swapped)
    assert all(isinstance(a, MixtralAttention) for a in layers)
    assert all(a.sliding_window == window for a in layers)
    x = inputs()
    expected = assert_outputs_equal(swapped, original, x, 9)
    if window is not None:
        # The comparison sees the window: without it the outputs differ.
        unwindowed = outputs(backbone(sliding_window=None), x, 9)
        assert np.abs(unwindowed - expected).max() > 1e-2


def test_weight_order_is_keras_hubs():
    # keras-hub leaves the experts' block unnamed, so its path takes a
    # counter (`mixtral_sparse_moe_block_<n>`) that differs between two
    # models (`weight_paths` leaves it out); the rest of each path and the
    # order are keras-hub's.
    original = backbone()
    assert_weights_are_keras_hubs(swap_attention(original), original)


def test_blocks_hand_the_attention_the_mask_parts():
    # (x, padding mask, attention mask, cache, cache update index)
    assert_hands_the_mask_parts(swap_attention(backbone()), None, None, None)


def test_greedy_generate_gives_keras_hubs_tokens():
    # Decoding runs past the window (3): the cached steps apply it too.
    original = tiny_causal_lm("mixtral", num_layers=1)
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.MixtralCausalLM
    prompt = inputs(length=16, real=5)
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def test_saves_and_loads_in_safe_mode_and_takes_lora(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    layers = attention_layers(loaded)
    assert all(isinstance(a, MixtralAttention) and a.chunk_size == 16 for a in layers)
    assert_lora_applies(loaded)
