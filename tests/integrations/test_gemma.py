"""keras-hub's Gemma (1 and 2) and Gemma 3 with our attention: the same
outputs and greedy tokens as keras-hub's own models, soft cap and windows
on both paths, Gemma 3's query/key norms, pair cache and bidirectional
window, saving, keras-hub's weight files, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    swap_attention,
    swapped_class,
)
from keras_attention.integrations.keras_hub.gemma import (  # noqa: E402
    Gemma3Attention,
    GemmaAttention,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402
from tests.integrations.keras_hub_models import (  # noqa: E402
    GEMMA,
    GEMMA_VOCABULARY,
    TINY,
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_quantizes_like_keras_hubs,
    attention_layers,
    numpy,
    outputs,
    saved_and_loaded,
    tiny_causal_lm,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    inputs as token_inputs,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    tiny_backbone as backbone,
)

# The tiny Gemma, Gemma 2 and Gemma 3 are `TINY`'s "gemma", "gemma2" and
# "gemma3": random weights, the norms' scales included (keras-hub starts
# them at zero, which would hide a norm applied in the wrong place).
GEMMA2 = TINY["gemma2"].config


def inputs(**kwargs):
    """`keras_hub_models.inputs` over the Gemma models' vocabulary, as int32
    token ids."""
    return token_inputs(vocabulary_size=GEMMA_VOCABULARY, dtype="int32", **kwargs)


@pytest.mark.parametrize("name", ["gemma", "gemma2", "gemma3"])
def test_backbone_outputs_equal_keras_hubs(name):
    original = backbone(name)
    swapped = swap_attention(original)
    cls = type(original)
    assert isinstance(swapped, cls) and type(swapped) is not cls
    ours = Gemma3Attention if name == "gemma3" else GemmaAttention
    assert all(type(a) is ours for a in attention_layers(swapped))
    assert_outputs_equal(swapped, original, inputs(), 9)


@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
@pytest.mark.parametrize(
    "change",
    [{"attention_logit_soft_cap": None}, {"sliding_window_size": 64}],
    ids=["soft_cap", "window"],
)
def test_the_soft_cap_and_the_window_change_the_outputs(name, change):
    # What the comparisons here see: without either, keras-hub's own model
    # gives other outputs.
    x = inputs()
    difference = outputs(backbone(name), x, 9) - outputs(backbone(name, **change), x, 9)
    assert np.abs(difference).max() > 1e-2


@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
@pytest.mark.parametrize(
    "options",
    [{"chunk_size": 16}, {"flash_attention": True, "chunk_size": 4}],
    ids=["chunk_size", "flash_attention"],
)
def test_soft_cap_and_window_on_the_chunked_path(name, options):
    original = backbone(name)
    swapped = swap_attention(original, **options)
    assert_outputs_equal(swapped, original, inputs(length=40, real=35), 35)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_gemma2_window_alternates_and_the_soft_cap_reaches_every_layer():
    swapped = swap_attention(backbone("gemma2", num_layers=3))
    layers = attention_layers(swapped)
    assert [a.get_config()["use_sliding_window_attention"] for a in layers] == [
        True,
        False,
        True,
    ]
    assert [a.get_config()["sliding_window_size"] for a in layers] == [3] * 3
    assert {a.get_config()["logit_soft_cap"] for a in layers} == {0.5}


def test_gemma3_bidirectional_window_is_keras_hubs():
    # keras-hub's bidirectional window of 4: one key before the query, two
    # after (not the symmetric band of a causal window).
    original = backbone(
        "gemma3", use_bidirectional_attention=True, sliding_window_size=4
    )
    swapped = swap_attention(original)
    x = inputs()
    expected = assert_outputs_equal(swapped, original, x, 9)
    symmetric = backbone(
        "gemma3", use_bidirectional_attention=True, sliding_window_size=7
    )
    assert np.abs(outputs(symmetric, x, 9) - expected).max() > 1e-2


@pytest.mark.parametrize("name", ["gemma", "gemma2", "gemma3"])
def test_greedy_generate_gives_keras_hubs_tokens(name):
    original = tiny_causal_lm(name, num_layers=2)
    swapped = swap_attention(original)
    assert type(swapped) is type(original)
    # Prompts of 5 and 3 tokens: Gemma 3 keeps the longer prompt's cache
    # entries while the shorter one's row generates (`cache_update_mask`).
    prompt = inputs(length=10, real=5)
    prompt["padding_mask"][1, 3:] = 0
    if name == "gemma3":
        prompt["images"] = np.zeros((2, 0, 16, 16, 3), "float32")
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


@pytest.mark.skipif(
    tuple(int(part) for part in keras_hub.__version__.split(".")[:2]) < (0, 26),
    reason="keras-hub's Gemma 3 cache is a pair from 0.26 (stacked before)",
)
def test_gemma3_cache_is_keras_hubs_pair():
    original = tiny_causal_lm("gemma3", num_layers=1)
    swapped = swap_attention(original)
    layer = attention_layers(swapped.backbone)[0]
    shape = (2, 6, GEMMA["num_key_value_heads"], GEMMA["head_dim"])
    cache = (keras.ops.zeros(shape), keras.ops.zeros(shape))
    x = keras.random.normal((2, 1, GEMMA["hidden_dim"]), seed=2)
    mask = DecoderMask(keras.ops.ones((2, 6), "int32"))
    keep = np.array([[True], [False]])
    expected = original.backbone.transformer_layers[0].attention(
        x,
        attention_mask=np.array([[[1, 1, 1, 0, 0, 0]]] * 2, "int32"),
        cache=cache,
        cache_update_index=2,
        cache_update_mask=keep,
    )
    output, new_cache = layer(
        x,
        attention_mask=mask,
        cache=cache,
        cache_update_index=2,
        cache_update_mask=keep,
    )
    assert isinstance(new_cache, tuple) and len(new_cache) == 2
    for got, want in zip(new_cache, expected[1], strict=True):
        got, want = numpy(got), numpy(want)
        assert got.shape == shape
        np.testing.assert_allclose(got, want, atol=2e-5)
        assert np.abs(got[0, 2]).max() > 0 and np.all(got[1] == 0)
    np.testing.assert_allclose(numpy(output)[0], numpy(expected[0])[0], atol=2e-5)


def test_variable_paths_and_weight_order():
    for name in ("gemma", "gemma2", "gemma3"):
        original = backbone(name, num_layers=1)
        swapped = swap_attention(original)
        assert [w.path for w in swapped.weights] == [w.path for w in original.weights]
    # Gemma 3: keras-hub builds both norms after the value's projection, so
    # its weight lists transfer as they are.
    names = [w.path.split("/")[-2] for w in attention_layers(swapped)[0].weights]
    assert names == [
        "query",
        "key",
        "value",
        "query_norm",
        "key_norm",
        "attention_output",
    ]
    for weight in swapped.weights:
        weight.assign(np.zeros(weight.shape, "float32"))
    swapped.set_weights(original.get_weights())
    x = inputs()
    np.testing.assert_allclose(
        outputs(swapped, x, 9), outputs(original, x, 9), atol=2e-5
    )


@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
def test_keras_hubs_weight_files_load(name, tmp_path):
    # keras-hub's `.weights.h5` (its presets' format) names the attention's
    # sublayers by attribute (`query_dense`, `query_norm`, ...): ours match.
    original = backbone(name)
    path = str(tmp_path / "original.weights.h5")
    original.save_weights(path)
    swapped = swap_attention(backbone(name, num_layers=original.num_layers))
    for weight in swapped.weights:
        weight.assign(np.zeros(weight.shape, "float32"))
    swapped.load_weights(path)
    assert_outputs_equal(swapped, original, inputs(), 9)


@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
def test_saves_and_loads_in_safe_mode_with_our_attention(name, tmp_path):
    swapped = swap_attention(backbone(name), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(a.chunk_size == 16 for a in attention_layers(loaded))


def test_lora_and_quantization_apply_after_the_swap():
    assert_lora_applies(
        swap_attention(backbone("gemma3", num_layers=1)), attention="attention"
    )
    reference = backbone("gemma2", num_layers=1)
    assert_quantizes_like_keras_hubs(swap_attention(reference), reference, inputs(), 9)


def test_blocks_hand_the_attention_the_mask_parts():
    for name in ("gemma2", "gemma3"):
        # (x, padding mask, [Gemma 3's vision mask,] cache, cache update index)
        arguments = (None, None, 0) if name == "gemma3" else (None, 0)
        assert_hands_the_mask_parts(
            swap_attention(backbone(name)),
            *arguments,
            method="_compute_attention_mask",
        )


def test_keras_hubs_window_method_gives_its_band():
    # keras-hub's tests read the window through `_mask_sliding_window`; a
    # bidirectional layer's (an embedding model's) is square, without a
    # cache.
    full = keras.ops.ones((1, 6, 6), "bool")
    cases = [
        ("gemma2", False, (0, 2)),
        ("gemma3", False, (0, 2)),
        ("gemma3", True, (0,)),
    ]
    for name, bidirectional, indices in cases:
        overrides = {"sliding_window_size": 4}
        if bidirectional:
            overrides["use_bidirectional_attention"] = True
        original = backbone(name, **overrides).transformer_layers[0].attention
        swapped = swap_attention(backbone(name, **overrides))
        ours = swapped.transformer_layers[0].attention
        for index in indices:
            mask = full[:, index:]
            np.testing.assert_array_equal(
                numpy(ours._mask_sliding_window(mask, index)),
                numpy(original._mask_sliding_window(mask, index)),
            )


def test_swapped_class_and_an_unsupported_scale():
    cls = swapped_class(keras_hub.models.GemmaBackbone)
    model = cls(**GEMMA2, attention_options={"flash_attention": False})
    assert model.get_config()["attention_options"] == {"flash_attention": False}
    with pytest.raises(ValueError, match="query_head_dim_normalize=False"):
        GemmaAttention(
            head_dim=8,
            num_query_heads=2,
            num_key_value_heads=1,
            query_head_dim_normalize=False,
        )
