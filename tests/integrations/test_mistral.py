"""keras-hub's Mistral with our attention: the same outputs and greedy tokens
as keras-hub's own model with a sliding window shorter than the sequence
(keras-hub's banded mask `i - w < j <= i` is our causal `sliding_window=w`),
the mask's parts handed as such, saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402
from keras_attention.integrations.keras_hub.mistral import (  # noqa: E402
    MistralAttention,
)

CONFIG = {
    "vocabulary_size": 50,
    "num_layers": 2,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "hidden_dim": 16,
    "intermediate_dim": 32,
    "sliding_window": 3,
}


def backbone(**overrides):
    keras.utils.set_random_seed(0)
    model = keras_hub.models.MistralBackbone(**{**CONFIG, **overrides})
    # Random norms too, so that every weight shows in the outputs.
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


def inputs(length=12, real=9, batch=2, seed=1):
    rng = np.random.default_rng(seed)
    padding = np.zeros((batch, length), "int32")
    padding[:, :real] = 1
    return {
        "token_ids": rng.integers(1, CONFIG["vocabulary_size"], (batch, length)),
        "padding_mask": padding,
    }


def attention_layers(model):
    return [block._self_attention_layer for block in model.transformer_layers]


@pytest.mark.parametrize("window", [3, None], ids=["window", "no_window"])
def test_backbone_outputs_equal_keras_hubs(window):
    original = backbone(sliding_window=window)
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.MistralBackbone)
    layers = attention_layers(swapped)
    assert all(isinstance(a, MistralAttention) for a in layers)
    assert all(a.sliding_window == window for a in layers)
    x = inputs()
    expected, got = np.asarray(original(x)), np.asarray(swapped(x))
    np.testing.assert_allclose(got[:, :9], expected[:, :9], atol=2e-5)


def test_the_window_changes_the_outputs():
    # The comparison above sees the window: without it the outputs differ.
    x = inputs()
    windowed = np.asarray(backbone()(x))
    unwindowed = np.asarray(backbone(sliding_window=None)(x))
    assert np.abs(windowed - unwindowed)[:, :9].max() > 1e-2


def test_head_dim_other_than_dim_over_heads():
    original = backbone(head_dim=6)
    swapped = swap_attention(original)
    assert attention_layers(swapped)[0].head_dim == 6
    x = inputs()
    np.testing.assert_allclose(
        np.asarray(swapped(x))[:, :9], np.asarray(original(x))[:, :9], atol=2e-5
    )


def test_variable_paths_and_weight_order_are_keras_hubs():
    original = backbone()
    swapped = swap_attention(original)
    assert [w.path for w in swapped.weights] == [w.path for w in original.weights]
    assert [w.shape for w in swapped.weights] == [w.shape for w in original.weights]


def test_blocks_hand_the_attention_the_mask_parts():
    swapped = swap_attention(backbone())
    block = swapped.transformer_layers[0]
    x = keras.ops.ones((2, 5, CONFIG["hidden_dim"]))
    padding = keras.ops.ones((2, 5), "int32")
    mask = block._compute_self_attention_mask(x, padding, None, None, None)
    assert isinstance(mask, DecoderMask) and mask.causal
    assert mask.padding_mask is padding and mask.attention_mask is None


def test_long_inputs_take_the_chunked_path_with_the_window():
    original = backbone(sliding_window=5)
    swapped = swap_attention(original, chunk_size=8)
    x = inputs(length=40, real=33)
    np.testing.assert_allclose(
        np.asarray(swapped(x))[:, :33], np.asarray(original(x))[:, :33], atol=2e-5
    )
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_greedy_generate_gives_keras_hubs_tokens():
    # Decoding runs past the window (3): the cached steps apply it too.
    original = keras_hub.models.MistralCausalLM(
        backbone=backbone(num_layers=1), preprocessor=None
    )
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.MistralCausalLM
    prompt = inputs(length=16, real=5)
    for model in (original, swapped):
        model.compile(sampler="greedy")
    expected = original.generate(prompt, stop_token_ids=None)["token_ids"]
    got = swapped.generate(prompt, stop_token_ids=None)["token_ids"]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(expected[:, 5:], prompt["token_ids"][:, 5:])


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    layers = attention_layers(loaded)
    assert all(isinstance(a, MistralAttention) and a.chunk_size == 16 for a in layers)
    assert all(a.sliding_window == CONFIG["sliding_window"] for a in layers)
    x = inputs()
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(swapped(x)))


def test_lora_and_quantization_apply_after_the_swap():
    swapped = swap_attention(backbone())
    swapped.enable_lora(2)
    lora = [w.path for w in swapped.trainable_weights]
    assert any("self_attention/query/lora_kernel_a" in p for p in lora)
    assert any("self_attention/value/lora_kernel_b" in p for p in lora)
    reference = backbone(num_layers=1)
    quantized = swap_attention(reference)
    quantized.quantize("int8")
    reference.quantize("int8")
    x = inputs()
    np.testing.assert_allclose(
        np.asarray(quantized(x))[:, :9], np.asarray(reference(x))[:, :9], atol=1e-4
    )
