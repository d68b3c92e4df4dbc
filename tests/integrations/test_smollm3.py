"""keras-hub's SmolLM 3 with our attention: the same outputs and greedy
tokens as keras-hub's own model (rotary positions on some layers, none on
the NoPE ones, biases on the query, key and value), keras-hub's weight paths
and order, the mask's parts handed as such, the chunked path, saving, LoRA
and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
if not hasattr(keras_hub.models, "SmolLM3Backbone"):
    pytest.skip(
        f"keras-hub {keras_hub.__version__} has no SmolLM 3", allow_module_level=True
    )

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.smollm3 import (  # noqa: E402
    SmolLM3Attention,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
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

# The tiny model's layers with rotary positions (the others are NoPE).
ROPE = [True, False, True, False]


def backbone(**overrides):
    """The tiny SmolLM 3 (NoPE on layers 1 and 3), its weights random, the
    biases, norms and rotary frequencies included."""
    return tiny_backbone("smollm3", **overrides)


def test_backbone_outputs_equal_keras_hubs():
    original = backbone()
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.SmolLM3Backbone)
    layers = attention_layers(swapped)
    assert all(isinstance(a, SmolLM3Attention) for a in layers)
    assert [a.use_rope for a in layers] == ROPE
    # The NoPE layers keep keras-hub's embedding (its weight) but apply none.
    assert [a._rotary is not None for a in layers] == ROPE
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_the_nope_layers_and_the_biases_change_the_outputs():
    # The comparison above sees both: rotating every layer, or dropping the
    # biases, changes keras-hub's own outputs.
    x = inputs()
    want = outputs(backbone(), x, 9)
    every_layer = outputs(backbone(rope_layer_enabled_list=[True] * 4), x, 9)
    assert np.abs(want - every_layer).max() > 1e-2
    no_bias = backbone()
    for layer in attention_layers(no_bias):
        for dense in (layer.q_proj, layer.k_proj, layer.v_proj):
            dense.bias.assign(np.zeros(dense.bias.shape, "float32"))
    assert np.abs(want - outputs(no_bias, x, 9)).max() > 1e-2


def test_every_layer_with_rotary_and_without_biases_equals_keras_hubs():
    original = backbone(rope_layer_enabled_list=[True] * 4, attention_bias=False)
    swapped = swap_attention(original)
    assert all(a._rotary is not None for a in attention_layers(swapped))
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_variable_paths_and_weight_order_are_keras_hubs():
    original = backbone()
    assert_weights_are_keras_hubs(swap_attention(original), original)


def test_blocks_hand_the_attention_the_mask_parts():
    # (x, padding mask, attention mask, cache, cache update index)
    assert_hands_the_mask_parts(swap_attention(backbone()), None, None, None)


def test_long_inputs_take_the_chunked_path():
    original = backbone()
    swapped = swap_attention(original, chunk_size=8)
    assert_outputs_equal(swapped, original, inputs(length=40, real=33), 33)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_greedy_generate_gives_keras_hubs_tokens():
    original = tiny_causal_lm("smollm3")
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.SmolLM3CausalLM
    prompt = inputs(length=16, real=5, dtype="int32")
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    layers = attention_layers(loaded)
    assert all(isinstance(a, SmolLM3Attention) and a.chunk_size == 16 for a in layers)
    assert [a.use_rope for a in layers] == ROPE


def test_lora_and_quantization_apply_after_the_swap():
    # keras-hub's default LoRA targets (`query`, `value`) are not SmolLM 3's
    # names: the projections are named as targets, on keras-hub's model
    # and ours alike.
    original = backbone()
    swapped = swap_attention(original)
    targets = ["q_proj", "v_proj"]
    original.enable_lora(2, target_layer_names=targets)
    swapped.enable_lora(2, target_layer_names=targets)
    lora = [w.path for w in swapped.trainable_weights]
    assert lora == [w.path for w in original.trainable_weights]
    assert any("self_attn/q_proj/lora_kernel_a" in p for p in lora)
    assert any("self_attn/v_proj/lora_kernel_b" in p for p in lora)
    # keras-hub builds its rotary embedding on its first call that rotates
    # (its `quantize` refuses an unbuilt layer, so never on a NoPE layer):
    # the reference rotates on its one layer, called once.
    reference = backbone(num_layers=1, rope_layer_enabled_list=[True])
    swapped = swap_attention(reference)
    outputs(reference, inputs())
    assert_quantizes_like_keras_hubs(swapped, reference, inputs(), 9)


def test_quantizes_with_nope_layers():
    # Ours builds the NoPE layers' embedding with the model: it quantizes,
    # its outputs near the float model's.
    swapped = swap_attention(backbone())
    x = inputs()
    want = outputs(swapped, x, 9)
    swapped.quantize("int8")
    got = outputs(swapped, x, 9)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=0.25)
