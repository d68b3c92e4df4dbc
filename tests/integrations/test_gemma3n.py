"""keras-hub's Gemma 3n with our attention in its text decoder: the same
outputs and greedy tokens as keras-hub's own model (flat `Dense` kernels,
query/key/value norms, unscaled scores, windows on the sliding layers, the
last layers sharing earlier layers' keys and values, the heads-first cache),
keras-hub's weight paths and order, the mask's parts handed as such, the
chunked path, saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
if not hasattr(keras_hub.models, "Gemma3nBackbone"):
    pytest.skip(
        f"keras-hub {keras_hub.__version__} has no Gemma 3n", allow_module_level=True
    )

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    family_of,
    swap_attention,
)
from keras_attention.integrations.keras_hub.gemma3n import (  # noqa: E402
    Gemma3nAttention,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402
from tests.integrations.keras_hub_models import (  # noqa: E402
    assert_greedy_tokens_are_keras_hubs,
    assert_outputs_equal,
    assert_quantizes_like_keras_hubs,
    assert_weights_are_keras_hubs,
    inputs,
    numpy,
    outputs,
    saved_and_loaded,
    tiny_backbone,
    tiny_causal_lm,
    two_prompts,
)

# The tiny model's windows (layers 0 and 2) and its layers sharing keys and
# values (2 and 3, those of layers 0 and 1).
WINDOWS = [3, None, 3, None]
SHARED = [False, False, True, True]


def backbone(**overrides):
    """The tiny Gemma 3n (text only), its weights random."""
    return tiny_backbone("gemma3n", **overrides)


def attention_layers(model):
    """The attention layer of each block of a Gemma 3n backbone."""
    return [block.attention for block in model.language_model.transformer_layers]


def test_family_of_finds_gemma3n():
    assert family_of(keras_hub.models.Gemma3nBackbone).name == "Gemma 3n"


def test_backbone_outputs_equal_keras_hubs():
    original = backbone()
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.Gemma3nBackbone)
    layers = attention_layers(swapped)
    assert all(isinstance(a, Gemma3nAttention) for a in layers)
    assert [a._sliding_window for a in layers] == WINDOWS
    assert [a.is_kv_shared_layer for a in layers] == SHARED
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_windows_and_shared_keys_values_change_the_outputs():
    # The comparison above sees both: without the window, or without the
    # sharing, keras-hub's own outputs differ.
    x = inputs()
    want = outputs(backbone(), x, 9)
    no_window = outputs(backbone(sliding_window=64), x, 9)
    assert np.abs(want - no_window).max() > 1e-2
    no_sharing = outputs(backbone(num_kv_shared_layers=0), x, 9)
    assert np.abs(want - no_sharing).max() > 1e-2


def test_variable_paths_and_weight_order_are_keras_hubs():
    # The shared layers keep keras-hub's unused key and value weights.
    original = backbone()
    assert_weights_are_keras_hubs(swap_attention(original), original)


def test_blocks_hand_the_attention_the_mask_parts():
    block = swap_attention(backbone()).language_model.transformer_layers[0]
    x = keras.ops.ones((2, 5, 16))
    padding = keras.ops.ones((2, 5), "bool")
    mask = block._compute_attention_mask(x, padding, None, 0)
    assert isinstance(mask, DecoderMask) and mask.causal
    assert mask.padding_mask is padding and mask.attention_mask is None


def test_long_inputs_take_the_chunked_path():
    original = backbone()
    swapped = swap_attention(original, chunk_size=8)
    assert_outputs_equal(swapped, original, inputs(length=40, real=33), 33)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


@pytest.mark.parametrize("prompt", ["same_length", "two_lengths"])
def test_greedy_generate_gives_keras_hubs_tokens(prompt):
    # Prompts longer than the window (3); two lengths exercise keras-hub's
    # `cache_update_mask` (the longer prompt kept while the other decodes).
    original = tiny_causal_lm("gemma3n")
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.Gemma3nCausalLM
    if prompt == "same_length":
        x, real = inputs(length=16, real=5, dtype="int32"), 5
    else:
        x, real = two_prompts(), 6
    assert_greedy_tokens_are_keras_hubs(swapped, original, x, real=real)


def test_the_cache_is_keras_hubs_heads_first():
    original = tiny_causal_lm("gemma3n")
    swapped = swap_attention(original)
    token_ids = inputs(length=8, real=8, dtype="int32")["token_ids"]
    arguments = (None,) * 7 + (np.ones((2, 8), bool),)
    _, want = original._build_cache(token_ids, *arguments)
    _, got = swapped._build_cache(token_ids, *arguments)
    assert tuple(got.shape) == (2, 4, 2, 2, 8, 8)  # (B, layers, 2, N, S, H)
    np.testing.assert_allclose(numpy(got), numpy(want), atol=2e-5)


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    layers = attention_layers(loaded)
    assert all(isinstance(a, Gemma3nAttention) and a.chunk_size == 16 for a in layers)
    assert [a.is_kv_shared_layer for a in layers] == SHARED


def test_lora_and_quantization_apply_after_the_swap():
    # keras-hub's default LoRA targets (`query`, `value`) are not Gemma 3n's
    # names: the projections are named as targets, on both models alike.
    original = backbone()
    swapped = swap_attention(original)
    targets = ["q_proj", "v_proj"]
    original.enable_lora(2, target_layer_names=targets)
    swapped.enable_lora(2, target_layer_names=targets)
    lora = [w.path for w in swapped.trainable_weights]
    assert lora == [w.path for w in original.trainable_weights]
    assert any("attention/q_proj/lora_kernel_a" in p for p in lora)
    assert any("attention/v_proj/lora_kernel_b" in p for p in lora)
    reference = backbone()
    assert_quantizes_like_keras_hubs(swap_attention(reference), reference, inputs(), 9)


def test_the_int8_cache_is_refused_naming_the_task():
    # Gemma 3n's `call_with_cache` (per-layer inputs, shared keys and
    # values) is not one of QUANTIZED_CACHE_TASKS': its float cache stays.
    with pytest.raises(ValueError, match="received a Gemma3nCausalLM"):
        swap_attention(tiny_causal_lm("gemma3n"), cache_dtype="int8")
