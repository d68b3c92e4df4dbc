"""keras-hub's GPT-OSS with our attention: the same outputs and greedy tokens
as keras-hub's own model (its learned sinks from our log-sum-exp, its window
of `w + 1` keys on every other layer), the mask's parts handed as such, the
paper's window on request, saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
if not hasattr(keras_hub.models, "GptOssBackbone"):
    pytest.skip(
        f"keras-hub {keras_hub.__version__} has no GPT-OSS", allow_module_level=True
    )

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.gpt_oss import (  # noqa: E402
    GptOssAttention,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_packed_rows_are_each_document_alone,
    assert_quantizes_like_keras_hubs,
    assert_weights_are_keras_hubs,
    attention_layers,
    inputs,
    outputs,
    saved_and_loaded,
    tiny_backbone,
    tiny_causal_lm,
)


def backbone(**overrides):
    """The tiny GPT-OSS (window 3 on layer 1), its weights random, the sinks
    and norms included."""
    return tiny_backbone("gpt_oss", **overrides)


@pytest.mark.parametrize("window", [3, None], ids=["window", "no_window"])
def test_backbone_outputs_equal_keras_hubs(window):
    original = backbone(sliding_window=window)
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.GptOssBackbone)
    layers = attention_layers(swapped)
    assert all(isinstance(a, GptOssAttention) for a in layers)
    # keras-hub windows every other layer, `w + 1` keys.
    assert [a.sliding_window for a in layers] == [None, window and window + 1]
    assert_outputs_equal(swapped, original, inputs(), 9)


def test_the_sinks_and_the_window_change_the_outputs():
    # The comparison above sees both: without either the outputs differ.
    x = inputs()
    want = outputs(backbone(), x)
    unwindowed = outputs(backbone(sliding_window=None), x)
    assert np.abs(want - unwindowed)[:, :9].max() > 1e-2
    no_sinks = backbone()
    for layer in attention_layers(no_sinks):
        layer.sinks.assign(np.full(layer.sinks.shape, -1e4, "float32"))
    assert np.abs(want - outputs(no_sinks, x))[:, :9].max() > 1e-2


def test_the_papers_window_keeps_w_keys():
    original = backbone()
    keras_hubs = swap_attention(original)
    papers = swap_attention(original, sliding_window_keys="paper")
    assert attention_layers(papers)[1].sliding_window == 3
    x = inputs()
    assert np.abs(outputs(papers, x) - outputs(keras_hubs, x))[:, :9].max() > 1e-3
    # keras-hub's window of 4 keys is the paper's window of 4.
    wider = swap_attention(backbone(sliding_window=4), sliding_window_keys="paper")
    np.testing.assert_allclose(
        outputs(wider, x)[:, :9], outputs(keras_hubs, x)[:, :9], atol=1e-5
    )


def test_variable_paths_and_weight_order_are_keras_hubs():
    original = backbone()
    assert_weights_are_keras_hubs(swap_attention(original), original)


def test_blocks_hand_the_attention_the_mask_parts():
    # (x, padding mask, attention mask, cache, cache update index)
    assert_hands_the_mask_parts(swap_attention(backbone()), None, None, None)


def test_long_inputs_take_the_chunked_path_with_the_sinks():
    original = backbone(sliding_window=5)
    swapped = swap_attention(original, chunk_size=8)
    assert_outputs_equal(swapped, original, inputs(length=40, real=33), 33)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_packed_documents_equal_each_document_alone():
    # The sinks, the window (3, shorter than either document) and the
    # experts' routing, per token, see each document alone.
    original = backbone()
    assert_packed_rows_are_each_document_alone(
        swap_attention(original, packed=True), original
    )


def test_greedy_generate_gives_keras_hubs_tokens():
    # Decoding runs past the window (3): the cached steps apply it too.
    original = tiny_causal_lm("gpt_oss")
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.GptOssCausalLM
    prompt = inputs(length=16, real=5)
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    layers = attention_layers(loaded)
    assert all(isinstance(a, GptOssAttention) and a.chunk_size == 16 for a in layers)
    assert [a.sliding_window for a in layers] == [None, 4]


def test_lora_and_quantization_apply_after_the_swap():
    assert_lora_applies(swap_attention(backbone()))
    reference = backbone(num_layers=1)
    assert_quantizes_like_keras_hubs(swap_attention(reference), reference, inputs(), 9)


def test_an_unknown_window_convention_is_refused():
    with pytest.raises(ValueError, match="Unknown `sliding_window_keys`: 'both'"):
        swap_attention(backbone(), sliding_window_keys="both")
