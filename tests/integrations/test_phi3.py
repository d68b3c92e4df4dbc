"""keras-hub's Phi-3 with our attention: the same outputs and greedy tokens
as keras-hub's own model with its plain and its "su" scaled rotary embedding
(LongRoPE's short and long factors both reached), saving and LoRA."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    swap_attention,
    swapped_class,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402
from keras_attention.integrations.keras_hub.phi3 import Phi3Attention  # noqa: E402

CONFIG = {
    "vocabulary_size": 50,
    "num_layers": 2,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "hidden_dim": 16,
    "intermediate_dim": 32,
}
# Head size 4: two factors each. Sequences longer than 8 take the long ones.
SU = {
    "rope_scaling_type": "su",
    "rope_scaling_short_factor": [1.0, 1.3],
    "rope_scaling_long_factor": [1.5, 2.5],
    "max_sequence_length": 32,
    "pretraining_sequence_length": 8,
}


def backbone(**overrides):
    keras.utils.set_random_seed(0)
    model = keras_hub.models.Phi3Backbone(**{**CONFIG, **overrides})
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
    return [block.attention for block in model.transformer_layers]


@pytest.mark.parametrize("length", [6, 12], ids=["short", "long"])
def test_su_scaled_rotary_outputs_equal_keras_hubs(length):
    original = backbone(**SU)
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.Phi3Backbone)
    assert all(isinstance(a, Phi3Attention) for a in attention_layers(swapped))
    real = length - 2
    x = inputs(length=length, real=real)
    expected, got = np.asarray(original(x)), np.asarray(swapped(x))
    np.testing.assert_allclose(got[:, :real], expected[:, :real], atol=2e-5)
    # The comparison sees the scaling: the plain rotary gives other outputs.
    plain = np.asarray(backbone()(x))
    assert np.abs(plain - expected)[:, :real].max() > 1e-2


def test_plain_rotary_outputs_and_weights_equal_keras_hubs():
    original = backbone(rope_max_wavelength=500)
    swapped = swap_attention(original)
    assert [w.path for w in swapped.weights] == [w.path for w in original.weights]
    assert [w.shape for w in swapped.weights] == [w.shape for w in original.weights]
    x = inputs()
    np.testing.assert_allclose(
        np.asarray(swapped(x))[:, :9], np.asarray(original(x))[:, :9], atol=2e-5
    )


def test_blocks_hand_the_attention_the_mask_parts():
    swapped = swap_attention(backbone())
    block = swapped.transformer_layers[0]
    x = keras.ops.ones((2, 5, CONFIG["hidden_dim"]))
    padding = keras.ops.ones((2, 5), "int32")
    mask = block._compute_self_attention_mask(x, padding, None, None, None)
    assert isinstance(mask, DecoderMask) and mask.causal
    assert mask.padding_mask is padding and mask.attention_mask is None


def test_factors_of_the_wrong_length_are_refused():
    wrong = {**SU, "rope_scaling_long_factor": [1.0, 2.0, 3.0]}
    with pytest.raises(ValueError, match="`rope_scaling_long_factor` must be"):
        swapped_class(keras_hub.models.Phi3Backbone)(**CONFIG, **wrong)
    with pytest.raises(ValueError, match="`rope_scaling_type` must be"):
        Phi3Attention(4, 2, rope_scaling_type="yarn")


def test_greedy_generate_gives_keras_hubs_tokens():
    # The prompt (16 slots) takes the long factors, the first steps of
    # decoding (up to position 8) the short ones, as in keras-hub.
    original = keras_hub.models.Phi3CausalLM(
        backbone=backbone(num_layers=1, **SU), preprocessor=None
    )
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.Phi3CausalLM
    prompt = inputs(length=16, real=5)
    for model in (original, swapped):
        model.compile(sampler="greedy")
    expected = original.generate(prompt, stop_token_ids=None)["token_ids"]
    got = swapped.generate(prompt, stop_token_ids=None)["token_ids"]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(expected[:, 5:], prompt["token_ids"][:, 5:])


def test_saves_and_loads_in_safe_mode_and_takes_lora(tmp_path):
    swapped = swap_attention(backbone(**SU), chunk_size=16)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    layers = attention_layers(loaded)
    assert all(isinstance(a, Phi3Attention) and a.chunk_size == 16 for a in layers)
    x = inputs()
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(swapped(x)))
    loaded.enable_lora(2)
    lora = [w.path for w in loaded.trainable_weights]
    assert any("attention/query/lora_kernel_a" in p for p in lora)
    assert any("attention/value/lora_kernel_b" in p for p in lora)


def test_int8_cache_generate_gives_keras_hubs_tokens():
    # Phi-3's task hands its blocks `attention_cache`, not Llama's
    # `self_attention_cache`.
    original = keras_hub.models.Phi3CausalLM(
        backbone=backbone(num_layers=1, **SU), preprocessor=None
    )
    swapped = swap_attention(original, cache_dtype="int8")
    assert isinstance(swapped, keras_hub.models.Phi3CausalLM)
    prompt = inputs(length=12, real=4)
    for model in (original, swapped):
        model.compile(sampler="greedy")
    expected = original.generate(prompt, stop_token_ids=None)["token_ids"]
    got = swapped.generate(prompt, stop_token_ids=None)["token_ids"]
    np.testing.assert_array_equal(got, expected)
