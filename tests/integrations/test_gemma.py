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

VOCABULARY = 48
GEMMA = {
    "vocabulary_size": VOCABULARY,
    "num_layers": 2,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "hidden_dim": 16,
    "intermediate_dim": 32,
    "head_dim": 8,
}
# Gemma 2: both soft caps, post norms, a window of 3 in layer 0.
GEMMA2 = {
    **GEMMA,
    "use_post_ffw_norm": True,
    "use_post_attention_norm": True,
    "attention_logit_soft_cap": 0.5,
    "final_logit_soft_cap": 30.0,
    "use_sliding_window_attention": True,
    "sliding_window_size": 3,
}
# Gemma 3: five windowed layers (wavelength 10k) and a global one (1M,
# scaled by 8), query/key norms, a soft cap.
GEMMA3 = {
    **GEMMA,
    "num_layers": 6,
    "image_size": 16,
    "use_post_ffw_norm": True,
    "use_post_attention_norm": True,
    "attention_logit_soft_cap": 0.5,
    "use_sliding_window_attention": True,
    "sliding_window_size": 3,
    "global_rope_scaling_factor": 8.0,
}
CONFIGS = {
    "gemma": (keras_hub.models.GemmaBackbone, GEMMA),
    "gemma2": (keras_hub.models.GemmaBackbone, GEMMA2),
    "gemma3": (keras_hub.models.Gemma3Backbone, GEMMA3),
}


def backbone(name, **overrides):
    """A tiny keras-hub backbone with random weights, the norms' scales
    included (keras-hub starts them at zero, which would hide a norm
    applied in the wrong place)."""
    cls, config = CONFIGS[name]
    keras.utils.set_random_seed(0)
    model = cls(**{**config, **overrides})
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))
    return model


def inputs(length=12, real=9, batch=2, seed=1):
    rng = np.random.default_rng(seed)
    padding = np.zeros((batch, length), "int32")
    padding[:, :real] = 1
    return {
        "token_ids": rng.integers(1, VOCABULARY, (batch, length)).astype("int32"),
        "padding_mask": padding,
    }


def outputs(model, x, real):
    return np.asarray(keras.ops.convert_to_numpy(model(x)))[:, :real]


def attention_layers(model):
    return [block.attention for block in model.transformer_layers]


@pytest.mark.parametrize("name", ["gemma", "gemma2", "gemma3"])
def test_backbone_outputs_equal_keras_hubs(name):
    original = backbone(name)
    swapped = swap_attention(original)
    cls = type(original)
    assert isinstance(swapped, cls) and type(swapped) is not cls
    ours = Gemma3Attention if name == "gemma3" else GemmaAttention
    assert all(type(a) is ours for a in attention_layers(swapped))
    x = inputs()
    np.testing.assert_allclose(
        outputs(swapped, x, 9), outputs(original, x, 9), atol=2e-5
    )


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
    x = inputs(length=40, real=35)
    np.testing.assert_allclose(
        outputs(swapped, x, 35), outputs(original, x, 35), atol=2e-5
    )
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
    np.testing.assert_allclose(
        outputs(swapped, x, 9), outputs(original, x, 9), atol=2e-5
    )
    symmetric = backbone(
        "gemma3", use_bidirectional_attention=True, sliding_window_size=7
    )
    assert np.abs(outputs(symmetric, x, 9) - outputs(original, x, 9)).max() > 1e-2


def causal_lm(name, **overrides):
    cls = (
        keras_hub.models.Gemma3CausalLM
        if name == "gemma3"
        else keras_hub.models.GemmaCausalLM
    )
    return cls(backbone=backbone(name, **overrides), preprocessor=None)


@pytest.mark.parametrize("name", ["gemma", "gemma2", "gemma3"])
def test_greedy_generate_gives_keras_hubs_tokens(name):
    original = causal_lm(name, num_layers=2)
    swapped = swap_attention(original)
    assert type(swapped) is type(original)
    # Prompts of 5 and 3 tokens: Gemma 3 keeps the longer prompt's cache
    # entries while the shorter one's row generates (`cache_update_mask`).
    prompt = inputs(length=10, real=5)
    prompt["padding_mask"][1, 3:] = 0
    if name == "gemma3":
        prompt["images"] = np.zeros((2, 0, 16, 16, 3), "float32")
    for model in (original, swapped):
        model.compile(sampler="greedy")
    numpy = keras.ops.convert_to_numpy
    expected = numpy(original.generate(prompt, stop_token_ids=None)["token_ids"])
    got = numpy(swapped.generate(prompt, stop_token_ids=None)["token_ids"])
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(expected[:, 5:], prompt["token_ids"][:, 5:])


@pytest.mark.skipif(
    tuple(int(part) for part in keras_hub.__version__.split(".")[:2]) < (0, 26),
    reason="keras-hub's Gemma 3 cache is a pair from 0.26 (stacked before)",
)
def test_gemma3_cache_is_keras_hubs_pair():
    original = causal_lm("gemma3", num_layers=1)
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
    numpy = keras.ops.convert_to_numpy
    for got, want in zip(new_cache, expected[1], strict=True):
        got, want = numpy(got), numpy(want)
        assert got.shape == shape
        np.testing.assert_allclose(got, want, atol=2e-5)
        assert np.abs(got[0, 2]).max() > 0 and np.all(got[1] == 0)
    np.testing.assert_allclose(numpy(output)[0], numpy(expected[0])[0], atol=2e-5)


def test_variable_paths_and_weight_order():
    for name in ("gemma", "gemma2"):
        original = backbone(name)
        swapped = swap_attention(original)
        assert [w.path for w in swapped.weights] == [w.path for w in original.weights]
    # Gemma 3: the same paths; our layer builds each norm right after its
    # projection, keras-hub both after the value's.
    original = backbone("gemma3", num_layers=1)
    swapped = swap_attention(original)
    assert sorted(w.path for w in swapped.weights) == sorted(
        w.path for w in original.weights
    )
    names = [w.path.split("/")[-2] for w in attention_layers(swapped)[0].weights]
    assert names == [
        "query",
        "query_norm",
        "key",
        "key_norm",
        "value",
        "attention_output",
    ]


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
    x = inputs()
    np.testing.assert_allclose(
        outputs(swapped, x, 9), outputs(original, x, 9), atol=2e-5
    )


@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
def test_saves_and_loads_in_safe_mode_with_our_attention(name, tmp_path):
    swapped = swap_attention(backbone(name), chunk_size=16)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(a.chunk_size == 16 for a in attention_layers(loaded))
    x = inputs()
    np.testing.assert_array_equal(outputs(loaded, x, 12), outputs(swapped, x, 12))


def test_lora_and_quantization_apply_after_the_swap():
    swapped = swap_attention(backbone("gemma3", num_layers=1))
    swapped.enable_lora(2)
    lora = [w.path for w in swapped.trainable_weights]
    assert any("attention/query/lora_kernel_a" in p for p in lora)
    assert any("attention/value/lora_kernel_b" in p for p in lora)
    reference = backbone("gemma2", num_layers=1)
    quantized = swap_attention(reference)
    try:
        reference.quantize("int8")
    except TypeError as error:  # keras-hub 0.23's embedding under Keras 3.15
        pytest.skip(f"keras-hub's own model does not quantize here: {error}")
    quantized.quantize("int8")
    x = inputs()
    np.testing.assert_allclose(
        outputs(quantized, x, 9), outputs(reference, x, 9), atol=1e-4
    )


def test_blocks_hand_the_attention_the_mask_parts():
    x = keras.ops.ones((2, 5, GEMMA["hidden_dim"]))
    padding = keras.ops.ones((2, 5), "int32")
    for name in ("gemma2", "gemma3"):
        block = swap_attention(backbone(name)).transformer_layers[0]
        arguments = (x, padding, None, 0)
        if name == "gemma3":
            arguments = (x, padding, None, None, 0)
        mask = block._compute_attention_mask(*arguments)
        assert isinstance(mask, DecoderMask) and mask.causal
        assert mask.padding_mask is padding and mask.attention_mask is None


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
                keras.ops.convert_to_numpy(ours._mask_sliding_window(mask, index)),
                keras.ops.convert_to_numpy(original._mask_sliding_window(mask, index)),
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
