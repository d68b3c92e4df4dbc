"""keras-hub's Phi-3 with our attention: the same outputs and greedy tokens
as keras-hub's own model with its plain and its "su" scaled rotary embedding
(LongRoPE's short and long factors both reached), saving and LoRA."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from keras_attention.integrations.keras_hub import (  # noqa: E402
    swap_attention,
    swapped_class,
)
from keras_attention.integrations.keras_hub.phi3 import Phi3Attention  # noqa: E402
from tests.integrations.keras_hub_models import (  # noqa: E402
    TINY,
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_int8_cache,
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

CONFIG = TINY["phi3"].config
# Head size 4: two factors each. Sequences longer than 8 take the long ones.
SU = {
    "rope_scaling_type": "su",
    "rope_scaling_short_factor": [1.0, 1.3],
    "rope_scaling_long_factor": [1.5, 2.5],
    "max_sequence_length": 32,
    "pretraining_sequence_length": 8,
}


def backbone(**overrides):
    """The tiny Phi-3, its weights random, norms included."""
    return tiny_backbone("phi3", **overrides)


@pytest.mark.parametrize("length", [6, 12], ids=["short", "long"])
def test_su_scaled_rotary_outputs_equal_keras_hubs(length):
    original = backbone(**SU)
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.Phi3Backbone)
    assert all(isinstance(a, Phi3Attention) for a in attention_layers(swapped))
    real = length - 2
    x = inputs(length=length, real=real)
    expected = assert_outputs_equal(swapped, original, x, real)
    # The comparison sees the scaling: the plain rotary gives other outputs.
    plain = outputs(backbone(), x, real)
    assert np.abs(plain - expected).max() > 1e-2


def test_plain_rotary_outputs_and_weights_equal_keras_hubs():
    original = backbone(rope_max_wavelength=500)
    swapped = swap_attention(original)
    assert_weights_are_keras_hubs(swapped, original)
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_blocks_hand_the_attention_the_mask_parts():
    # (x, padding mask, attention mask, cache, cache update index)
    assert_hands_the_mask_parts(swap_attention(backbone()), None, None, None)


def test_factors_of_the_wrong_length_are_refused():
    wrong = {**SU, "rope_scaling_long_factor": [1.0, 2.0, 3.0]}
    with pytest.raises(ValueError, match="`rope_scaling_long_factor` must be"):
        swapped_class(keras_hub.models.Phi3Backbone)(**CONFIG, **wrong)
    with pytest.raises(ValueError, match="`rope_scaling_type` must be"):
        Phi3Attention(4, 2, rope_scaling_type="yarn")


def test_greedy_generate_gives_keras_hubs_tokens():
    # The prompt (16 slots) takes the long factors, the first steps of
    # decoding (up to position 8) the short ones, as in keras-hub.
    original = tiny_causal_lm("phi3", num_layers=1, **SU)
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.Phi3CausalLM
    prompt = inputs(length=16, real=5)
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def test_saves_and_loads_in_safe_mode_and_takes_lora(tmp_path):
    swapped = swap_attention(backbone(**SU), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    layers = attention_layers(loaded)
    assert all(isinstance(a, Phi3Attention) and a.chunk_size == 16 for a in layers)
    assert_lora_applies(loaded, attention="attention")


def test_int8_cache_generate_gives_keras_hubs_tokens():
    # Phi-3's task hands its blocks `attention_cache`, not Llama's
    # `self_attention_cache`.
    original = tiny_causal_lm("phi3", num_layers=1, **SU)
    swapped = swap_attention(original, cache_dtype="int8")
    assert isinstance(swapped, keras_hub.models.Phi3CausalLM)
    prompt = inputs(length=12, real=4)
    assert_int8_cache(swapped, prompt["token_ids"])
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=4)
