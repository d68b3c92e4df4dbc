"""keras-hub's Mistral with our attention: the same outputs and greedy tokens
as keras-hub's own model with a sliding window shorter than the sequence
(keras-hub's banded mask `i - w < j <= i` is our causal `sliding_window=w`),
the mask's parts handed as such, saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.mistral import (  # noqa: E402
    MistralAttention,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    TINY,
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_quantizes_like_keras_hubs,
    assert_weights_are_keras_hubs,
    attention_layers,
    inputs,
    outputs,
    saved_and_loaded,
    tiny_backbone,
    tiny_causal_lm,
)

CONFIG = TINY["mistral"].config


def backbone(**overrides):
    """The tiny Mistral (window 3), its weights random, norms included."""
    return tiny_backbone("mistral", **overrides)


@pytest.mark.parametrize("window", [3, None], ids=["window", "no_window"])
def test_backbone_outputs_equal_keras_hubs(window):
    original = backbone(sliding_window=window)
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.MistralBackbone)
    layers = attention_layers(swapped)
    assert all(isinstance(a, MistralAttention) for a in layers)
    assert all(a.sliding_window == window for a in layers)
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_the_window_changes_the_outputs():
    # The comparison above sees the window: without it the outputs differ.
    x = inputs()
    windowed = outputs(backbone(), x)
    unwindowed = outputs(backbone(sliding_window=None), x)
    assert np.abs(windowed - unwindowed)[:, :9].max() > 1e-2


def test_head_dim_other_than_dim_over_heads():
    original = backbone(head_dim=6)
    swapped = swap_attention(original)
    assert attention_layers(swapped)[0].head_dim == 6
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_variable_paths_and_weight_order_are_keras_hubs():
    original = backbone()
    assert_weights_are_keras_hubs(swap_attention(original), original)


def test_blocks_hand_the_attention_the_mask_parts():
    # (x, padding mask, attention mask, cache, cache update index)
    assert_hands_the_mask_parts(swap_attention(backbone()), None, None, None)


def test_long_inputs_take_the_chunked_path_with_the_window():
    original = backbone(sliding_window=5)
    swapped = swap_attention(original, chunk_size=8)
    assert_outputs_equal(swapped, original, inputs(length=40, real=33), 33)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_greedy_generate_gives_keras_hubs_tokens():
    # Decoding runs past the window (3): the cached steps apply it too.
    original = tiny_causal_lm("mistral", num_layers=1)
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.MistralCausalLM
    prompt = inputs(length=16, real=5)
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    layers = attention_layers(loaded)
    assert all(isinstance(a, MistralAttention) and a.chunk_size == 16 for a in layers)
    assert all(a.sliding_window == CONFIG["sliding_window"] for a in layers)


def test_lora_and_quantization_apply_after_the_swap():
    assert_lora_applies(swap_attention(backbone()))
    reference = backbone(num_layers=1)
    assert_quantizes_like_keras_hubs(swap_attention(reference), reference, inputs(), 9)
