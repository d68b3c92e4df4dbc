"""keras-hub's Qwen 2, Qwen 3 and their MoE models with our attention: the
same outputs and greedy tokens as keras-hub's own models (with the sliding
window shorter than the sequence, random projection biases and query/key
norms), saving, LoRA, and the MoE load-balancing loss."""

import re

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402
from keras_hub.src.models.qwen import qwen_attention  # noqa: E402
from keras_hub.src.models.qwen3 import qwen3_attention  # noqa: E402
from keras_hub.src.models.qwen3_moe import qwen3_moe_attention  # noqa: E402
from keras_hub.src.models.qwen_moe import qwen_moe_attention  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    qwen,
    swap_attention,
    swapped_class,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402

CONFIG = {
    "vocabulary_size": 50,
    "num_layers": 2,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "hidden_dim": 16,
    "intermediate_dim": 32,
}
WINDOW = 4
MOE = {"moe_intermediate_dim": 8, "num_experts": 4, "top_k": 2}
# name: (backbone, its arguments beyond CONFIG, causal LM, our attention)
MODELS = {
    "qwen": (
        "QwenBackbone",
        {"use_sliding_window_attention": True, "sliding_window_size": WINDOW},
        "QwenCausalLM",
        qwen.QwenAttention,
    ),
    "qwen3": (
        "Qwen3Backbone",
        {"head_dim": 6, "sliding_window_size": WINDOW},
        "Qwen3CausalLM",
        qwen.Qwen3Attention,
    ),
    "qwen_moe": (
        "QwenMoeBackbone",
        {
            "use_sliding_window_attention": True,
            "sliding_window_size": WINDOW,
            "shared_expert_intermediate_dim": 16,
            **MOE,
        },
        "QwenMoeCausalLM",
        qwen.QwenMoeAttention,
    ),
    "qwen3_moe": (
        "Qwen3MoeBackbone",
        {"head_dim": 6, "sliding_window_size": WINDOW, **MOE},
        "Qwen3MoeCausalLM",
        qwen.Qwen3MoeAttention,
    ),
}


@pytest.fixture
def unfused(monkeypatch):
    """keras-hub's Qwen attention on its unfused path on every backend: the
    only one that applies the sliding window (its fused branch, taken on JAX
    and PyTorch, returns before the window; keras-hub 0.32)."""
    for module in (
        qwen_attention,
        qwen3_attention,
        qwen_moe_attention,
        qwen3_moe_attention,
    ):
        monkeypatch.setattr(module, "fused_attention_op_available", lambda: False)


def backbone(name, **overrides):
    cls, arguments, _, _ = MODELS[name]
    keras.utils.set_random_seed(0)
    model = getattr(keras_hub.models, cls)(**{**CONFIG, **arguments, **overrides})
    # Random weights larger than keras-hub's initial ones (biases at 0, norm
    # scales at 1, kernels of deviation 0.02, under which greedy decoding
    # repeats one token): a bias or norm left out or misplaced shows in the
    # outputs, and the generated tokens depend on the window.
    rng = np.random.default_rng(0)
    for weight in model.weights:
        start = 1.0 if weight.path.endswith("scale") else 0.0
        noise = rng.normal(0.0, 0.3, tuple(weight.shape))
        weight.assign((start + noise).astype(weight.dtype))
    return model


def inputs(length=12, real=9, batch=2, seed=1):
    rng = np.random.default_rng(seed)
    padding = np.zeros((batch, length), "int32")
    padding[:, :real] = 1
    return {
        "token_ids": rng.integers(1, CONFIG["vocabulary_size"], (batch, length)),
        "padding_mask": padding,
    }


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def attention_layers(model):
    return [block._self_attention_layer for block in model.transformer_layers]


def paths(model):
    # The MoE blocks' experts are unnamed in keras-hub: numbered per model.
    return [
        re.sub(r"sparse_moe_block(_\d+)?/", "sparse_moe_block/", w.path)
        for w in model.weights
    ]


@pytest.mark.parametrize("name", list(MODELS))
def test_backbone_outputs_equal_keras_hubs_windowed_outputs(name, unfused):
    original = backbone(name)
    swapped = swap_attention(original)
    assert isinstance(swapped, type(original)) and type(swapped) is not type(original)
    attention = MODELS[name][3]
    assert all(type(a) is attention for a in attention_layers(swapped))
    assert paths(swapped) == paths(original)
    x = inputs()
    expected, got = numpy(original(x)), numpy(swapped(x))
    np.testing.assert_allclose(got[:, :9], expected[:, :9], atol=2e-5)


def without_window(name):
    """The arguments that turn the window of model `name` off."""
    if name in ("qwen", "qwen_moe"):
        return {"use_sliding_window_attention": False}
    return {"sliding_window_size": None}


@pytest.mark.parametrize("name", ["qwen", "qwen3"])
def test_the_window_shorter_than_the_inputs_is_applied(name, unfused):
    swapped = swap_attention(backbone(name))
    full = backbone(name, **without_window(name))
    assert all(a.sliding_window == WINDOW for a in attention_layers(swapped))
    x = inputs()
    difference = np.abs(numpy(swapped(x)) - numpy(full(x)))[:, :9]
    assert difference[:, :WINDOW].max() < 2e-5  # the window holds every key
    assert difference[:, WINDOW:].max() > 1e-2


def test_qwen3_weights_keep_keras_hubs_order():
    original = backbone("qwen3")
    swapped = swap_attention(original)
    names = [
        w.path.split("self_attention/")[1] for w in attention_layers(swapped)[0].weights
    ]
    assert names == [
        "query/kernel",
        "query_dense_layernorm/scale",
        "key/kernel",
        "key_dense_layernorm/scale",
        "value/kernel",
        "attention_output/kernel",
    ]
    kept = [w.path for w in attention_layers(original)[0].weights]
    assert [w.path for w in attention_layers(swapped)[0].weights] == kept


def test_qwen_has_biases_on_the_projections_but_not_the_output():
    names = [
        w.path.split("self_attention/")[1]
        for w in attention_layers(swap_attention(backbone("qwen")))[0].weights
    ]
    assert names == [
        "query/kernel",
        "query/bias",
        "key/kernel",
        "key/bias",
        "value/kernel",
        "value/bias",
        "attention_output/kernel",
    ]


def test_blocks_hand_the_attention_the_mask_parts():
    block = swap_attention(backbone("qwen3")).transformer_layers[0]
    x = keras.ops.ones((2, 5, CONFIG["hidden_dim"]))
    padding = keras.ops.ones((2, 5), "int32")
    mask = block._compute_self_attention_mask(x, padding, None, None, None)
    assert isinstance(mask, DecoderMask) and mask.causal
    assert mask.padding_mask is padding and mask.attention_mask is None


@pytest.mark.parametrize("name", ["qwen", "qwen3"])
def test_the_chunked_path_skips_tiles_outside_the_window(name, unfused):
    original = backbone(name)
    swapped = swap_attention(original, chunk_size=4)
    x = inputs(length=24, real=21)
    np.testing.assert_allclose(
        numpy(swapped(x))[:, :21], numpy(original(x))[:, :21], atol=2e-5
    )
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def greedy_without_cache(causal_lm, prompt, real):
    """Greedy tokens from full forward passes of `causal_lm` (no cache)."""
    tokens, padding = prompt["token_ids"].copy(), prompt["padding_mask"].copy()
    for position in range(real, tokens.shape[1]):
        logits = causal_lm({"token_ids": tokens, "padding_mask": padding})
        tokens[:, position] = np.argmax(numpy(logits)[:, position - 1], -1)
        padding[:, position] = 1
    return tokens


def causal_lms(name, **overrides):
    task = getattr(keras_hub.models, MODELS[name][2])
    original = task(backbone=backbone(name, **overrides), preprocessor=None)
    swapped = swap_attention(original)
    assert type(swapped) is task
    for model in (original, swapped):
        model.compile(sampler="greedy")
    return original, swapped


@pytest.mark.parametrize("name", list(MODELS))
def test_windowed_greedy_generate_equals_keras_hubs_decoding(name, unfused):
    # The window (4) is shorter than the generated 16 tokens. keras-hub's
    # own `generate` cannot run Qwen 2's window in a compiled function (its
    # `if cache_update_index` takes a tensor as a bool; keras-hub 0.32): the
    # reference is then its forward pass, token by token, without a cache.
    original, swapped = causal_lms(name)
    prompt = inputs(length=16, real=5)
    got = swapped.generate(prompt, stop_token_ids=None)["token_ids"]
    if name in ("qwen", "qwen_moe"):
        expected = greedy_without_cache(original, prompt, 5)
    else:
        expected = original.generate(prompt, stop_token_ids=None)["token_ids"]
    np.testing.assert_array_equal(got, expected)
    if name in ("qwen", "qwen3"):  # (the MoE models' attention is theirs)
        # The window changes the tokens: the comparison sees it.
        full = getattr(keras_hub.models, MODELS[name][2])(
            backbone=backbone(name, **without_window(name)), preprocessor=None
        )
        assert not np.array_equal(greedy_without_cache(full, prompt, 5), expected)


def test_qwen_greedy_generate_without_window_gives_keras_hubs_tokens():
    original, swapped = causal_lms("qwen", use_sliding_window_attention=False)
    prompt = inputs(length=16, real=5)
    expected = original.generate(prompt, stop_token_ids=None)["token_ids"]
    got = swapped.generate(prompt, stop_token_ids=None)["token_ids"]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(expected[:, 5:], prompt["token_ids"][:, 5:])


@pytest.mark.parametrize("name", ["qwen3_moe", "qwen_moe"])
def test_moe_load_balancing_loss_equals_keras_hubs(name, unfused):
    original = backbone(name)
    swapped = swap_attention(original)
    x = inputs(length=8, real=6)
    np.testing.assert_allclose(
        numpy(swapped(x, training=True))[:, :6],
        numpy(original(x, training=True))[:, :6],
        atol=2e-5,
    )
    expected = [float(numpy(loss)) for loss in original.losses]
    got = [float(numpy(loss)) for loss in swapped.losses]
    assert len(expected) == CONFIG["num_layers"]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("name", ["qwen", "qwen3"])
def test_saves_and_loads_in_safe_mode_with_our_attention(name, tmp_path):
    swapped = swap_attention(backbone(name), chunk_size=16)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    assert loaded.attention_options == {"chunk_size": 16}
    attention = MODELS[name][3]
    assert all(type(a) is attention for a in attention_layers(loaded))
    x = inputs()
    np.testing.assert_array_equal(numpy(loaded(x)), numpy(swapped(x)))


def test_lora_applies_after_the_swap():
    swapped = swap_attention(backbone("qwen3"))
    swapped.enable_lora(2)
    lora = [w.path for w in swapped.trainable_weights]
    assert any("self_attention/query/lora_kernel_a" in p for p in lora)
    assert any("self_attention/value/lora_kernel_b" in p for p in lora)
    assert not any("layernorm/scale" in p for p in lora)
    x = inputs()
    assert np.isfinite(numpy(swapped(x))).all()


def test_swapped_classes_take_keras_hubs_constructors():
    for name, (cls, arguments, _, _) in MODELS.items():
        cls = swapped_class(getattr(keras_hub.models, cls))
        model = cls(**CONFIG, **arguments, attention_options={"chunk_size": 8})
        assert model.get_config()["attention_options"] == {"chunk_size": 8}, name
