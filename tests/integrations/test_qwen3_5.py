"""keras-hub's Qwen 3.5 and Qwen 3.5 MoE with our attention in their
full-attention layers (the DeltaNet layers stay keras-hub's): the same
outputs and greedy tokens as keras-hub's own models (the gate packed in the
query kernel, partial and multi-axis rotary positions, the query/key norms,
keras-hub's unfused window), the paper's window on request, the mask's parts
handed as such, a decoding cache for the full-attention layers alone (float
and int8), saving, LoRA and quantization."""

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
if not hasattr(keras_hub.models, "Qwen3_5Backbone"):
    pytest.skip(
        f"keras-hub {keras_hub.__version__} has no Qwen 3.5", allow_module_level=True
    )

from keras_hub.src.models.qwen3_5 import qwen3_5_attention  # noqa: E402

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.generation import (  # noqa: E402
    cache_bytes,
)
from keras_attention.integrations.keras_hub.qwen3_5 import (  # noqa: E402
    Qwen3_5Attention,
    attention_only_cache_class,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    QWEN_WINDOW,
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_quantizes_like_keras_hubs,
    assert_weights_are_keras_hubs,
    attention_layers,
    greedy_tokens,
    inputs,
    numpy,
    outputs,
    saved_and_loaded,
    tiny_backbone,
    tiny_causal_lm,
)

NAMES = ["qwen3_5", "qwen3_5_moe"]
# The tiny models' layers: DeltaNet, full attention, DeltaNet, full attention.
ATTENTION_LAYERS = [1, 3]
DELTANET_LAYERS = [0, 2]


@pytest.fixture
def unfused(monkeypatch):
    """keras-hub's Qwen 3.5 attention on its unfused path on every backend:
    the only one that applies its window (its fused branch, taken on JAX and
    PyTorch, returns before it; keras-hub 0.32)."""
    unavailable = lambda: False  # noqa: E731
    monkeypatch.setattr(qwen3_5_attention, "fused_attention_op_available", unavailable)


@pytest.mark.parametrize("name", NAMES)
def test_backbone_outputs_equal_keras_hubs_unfused_outputs(name, unfused):
    original = tiny_backbone(name)
    swapped = swap_attention(original)
    assert isinstance(swapped, type(original)) and type(swapped) is not type(original)
    layers = attention_layers(swapped)
    assert len(layers) == 2 and all(type(a) is Qwen3_5Attention for a in layers)
    assert all(a.sliding_window == QWEN_WINDOW for a in layers)
    # The gate in the query kernel: (hidden, heads, 2 * head_dim).
    assert tuple(layers[0]._query_dense.kernel.shape) == (16, 4, 16)
    assert_weights_are_keras_hubs(swapped, original)
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_the_window_changes_keras_hubs_outputs(unfused):
    # The comparison above sees the window: keras-hub's unfused outputs
    # without it differ.
    x = inputs()
    windowed = outputs(tiny_backbone("qwen3_5"), x, 9)
    full = outputs(tiny_backbone("qwen3_5", sliding_window_size=None), x, 9)
    assert np.abs(windowed - full).max() > 1e-2


def test_the_papers_window_is_keras_hubs_fused_path():
    # Every earlier key: keras-hub's model without a window, on every
    # backend, and its fused path (JAX, PyTorch) with one.
    original = tiny_backbone("qwen3_5")
    papers = swap_attention(original, sliding_window_keys="paper")
    assert all(a.sliding_window is None for a in attention_layers(papers))
    x = inputs()
    unwindowed = tiny_backbone("qwen3_5", sliding_window_size=None)
    assert_outputs_equal(papers, unwindowed, x, 9)
    if keras.config.backend() in ("jax", "torch"):
        assert_outputs_equal(papers, original, x, 9)


def multi_axis_positions(batch=2, length=12):
    """`(B, 4, T)` positions: text positions, then a 2 x 3 grid of image
    patches at positions 3 to 8 (one time step, its rows and columns), as
    Qwen 3.5's processor gives them."""
    positions = np.tile(np.arange(length, dtype="int32"), (batch, 4, 1))
    rows, columns = np.divmod(np.arange(6), 3)
    positions[:, 1, 3:9] = 3
    positions[:, 2, 3:9] = 3 + rows
    positions[:, 3, 3:9] = 3 + columns
    positions[:, 0, 3:9] = 3
    return positions


@pytest.mark.parametrize("name", NAMES)
def test_multi_axis_positions_equal_keras_hubs(name, unfused):
    original = tiny_causal_lm(name, mrope_section=[1, 1, 1])
    swapped = swap_attention(original)
    x = {**inputs(), "position_ids": multi_axis_positions()}
    expected = numpy(original.score(x))[:, :9]
    np.testing.assert_allclose(numpy(swapped.score(x))[:, :9], expected, atol=2e-5)
    # The positions reach the rotary layers: without them the logits differ.
    text_only = numpy(original.score(inputs()))[:, :9]
    assert np.abs(expected - text_only).max() > 1e-3


def test_blocks_hand_the_attention_the_mask_parts():
    # (x, padding mask, attention mask, cache, cache update index)
    swapped = swap_attention(tiny_backbone("qwen3_5"))
    assert_hands_the_mask_parts(swapped, None, None, None)


def test_long_inputs_take_the_chunked_path(unfused):
    original = tiny_backbone("qwen3_5")
    swapped = swap_attention(original, chunk_size=8)
    assert_outputs_equal(swapped, original, inputs(length=40, real=33), 33)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


@pytest.mark.parametrize("name", NAMES)
def test_greedy_generate_gives_keras_hubs_tokens(name, unfused):
    # Decoding runs past the window (4) from a prompt of 5 tokens.
    original = tiny_causal_lm(name)
    swapped = swap_attention(original)
    assert type(swapped) is attention_only_cache_class(type(original))
    prompt = inputs(length=16, real=5, dtype="int32")
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def build_caches(original, swapped, length=12, **dtype):
    """keras-hub's cache and the swapped model's (`dtype`: its
    `initial_cache` dtype) after the same prompt."""
    x = inputs(length=length, real=5, dtype="int32")
    arguments = (x["token_ids"], x["padding_mask"])
    return original._build_cache(*arguments)[1], swapped._build_cache(*arguments)[1]


def test_the_cache_holds_the_full_attention_layers_alone(unfused):
    original = tiny_causal_lm("qwen3_5")
    swapped = swap_attention(original)
    theirs, ours = build_caches(original, swapped)
    # keras-hub's keys and values for all 4 layers, ours for the 2 attention
    # layers; the DeltaNet states for the 2 DeltaNet layers.
    assert tuple(theirs[0].shape) == (2, 4, 2, 12, 2, 8)
    assert tuple(ours[0].shape) == (2, 2, 2, 12, 2, 8)
    assert ours[1].shape[1] == ours[2].shape[1] == 2
    # After the prompt they hold what keras-hub's holds at those layers.
    np.testing.assert_allclose(
        numpy(ours[0]), numpy(theirs[0])[:, ATTENTION_LAYERS], atol=1e-5
    )
    for i in (1, 2):
        np.testing.assert_allclose(
            numpy(ours[i]), numpy(theirs[i])[:, DELTANET_LAYERS], atol=1e-5
        )
    # Each part of it holds 2 layers of keras-hub's 4.
    assert 2 * cache_bytes(ours) == cache_bytes(theirs)


def test_the_int8_cache_decodes_keras_hubs_greedy_tokens(unfused):
    original = tiny_causal_lm("qwen3_5")
    swapped = swap_attention(original, cache_dtype="int8")
    assert type(swapped) is attention_only_cache_class(type(original))
    _, ours = build_caches(original, swapped)
    values, scales = ours[0]
    assert keras.backend.standardize_dtype(values.dtype) == "int8"
    assert keras.backend.standardize_dtype(scales.dtype) == "int16"
    assert tuple(values.shape) == (2, 2, 2, 12, 2, 8)
    prompt = inputs(length=16, real=5, dtype="int32")
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def test_a_model_of_one_layer_kind_decodes(unfused):
    # No DeltaNet layer (or no attention layer): that part of the cache is
    # empty, and generate runs.
    for kind in ("full_attention", "linear_attention"):
        original = tiny_causal_lm("qwen3_5", layer_types=[kind] * 4)
        swapped = swap_attention(original)
        prompt = inputs(length=10, real=4, dtype="int32")
        assert_greedy_tokens_are_keras_hubs(swapped, original, prompt)


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(
        tiny_backbone("qwen3_5"), chunk_size=16, sliding_window_keys="paper"
    )
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    layers = attention_layers(loaded)
    assert all(isinstance(a, Qwen3_5Attention) and a.chunk_size == 16 for a in layers)
    assert all(a.sliding_window is None for a in layers)


def test_the_task_saves_and_loads_with_its_cache(tmp_path, unfused):
    swapped = swap_attention(tiny_causal_lm("qwen3_5"), cache_dtype="int8")
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    prompt = inputs(length=12, real=5, dtype="int32")
    np.testing.assert_array_equal(
        greedy_tokens(loaded, prompt), greedy_tokens(swapped, prompt)
    )


def test_lora_and_quantization_apply_after_the_swap(unfused):
    assert_lora_applies(swap_attention(tiny_backbone("qwen3_5")))
    reference = tiny_backbone("qwen3_5")
    assert_quantizes_like_keras_hubs(swap_attention(reference), reference, inputs(), 9)


def test_an_unknown_window_convention_is_refused():
    with pytest.raises(ValueError, match="Unknown `sliding_window_keys`: 'both'"):
        swap_attention(tiny_backbone("qwen3_5"), sliding_window_keys="both")
