"""keras-hub's Qwen 2, Qwen 3 and their MoE models with our attention: the
same outputs and greedy tokens as keras-hub's own models (with the sliding
window shorter than the sequence, random projection biases and query/key
norms), saving, LoRA, and the MoE load-balancing loss."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from keras_attention.integrations.keras_hub import (  # noqa: E402
    qwen,
    swap_attention,
    swapped_class,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    DECODER,
    GENERATE_CANNOT_WINDOW,
    QWEN_WINDOW,
    TINY,
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_weights_are_keras_hubs,
    attention_layers,
    greedy_tokens,
    greedy_without_cache,
    inputs,
    numpy,
    outputs,
    saved_and_loaded,
    tiny_causal_lm,
    unfused_qwen_attention,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    tiny_backbone as backbone,
)

WINDOW = QWEN_WINDOW
# name (the models' names in `TINY`): our attention. Their tiny backbones'
# weights are random, biases and norm scales included: a bias or norm left
# out or misplaced shows in the outputs, and the generated tokens depend on
# the window.
MODELS = {
    "qwen": qwen.QwenAttention,
    "qwen3": qwen.Qwen3Attention,
    "qwen_moe": qwen.QwenMoeAttention,
    "qwen3_moe": qwen.Qwen3MoeAttention,
}


@pytest.fixture
def unfused(monkeypatch):
    """keras-hub's Qwen attention on its unfused path, the only one that
    applies the window (`unfused_qwen_attention`)."""
    unfused_qwen_attention(monkeypatch)


@pytest.mark.parametrize("name", list(MODELS))
def test_backbone_outputs_equal_keras_hubs_windowed_outputs(name, unfused):
    original = backbone(name)
    swapped = swap_attention(original)
    assert isinstance(swapped, type(original)) and type(swapped) is not type(original)
    assert all(type(a) is MODELS[name] for a in attention_layers(swapped))
    assert_weights_are_keras_hubs(swapped, original)
    assert_outputs_equal(swapped, original, inputs(), 9)


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
    difference = np.abs(outputs(swapped, x, 9) - outputs(full, x, 9))
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
    # (x, padding mask, attention mask, cache, cache update index)
    assert_hands_the_mask_parts(swap_attention(backbone("qwen3")), None, None, None)


@pytest.mark.parametrize("name", ["qwen", "qwen3"])
def test_the_chunked_path_skips_tiles_outside_the_window(name, unfused):
    original = backbone(name)
    swapped = swap_attention(original, chunk_size=4)
    assert_outputs_equal(swapped, original, inputs(length=24, real=21), 21)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def causal_lms(name, **overrides):
    original = tiny_causal_lm(name, **overrides)
    swapped = swap_attention(original)
    assert type(swapped) is type(original)
    return original, swapped


@pytest.mark.parametrize("name", list(MODELS))
def test_windowed_greedy_generate_equals_keras_hubs_decoding(name, unfused):
    # The window (4) is shorter than the generated 16 tokens. keras-hub's
    # own `generate` cannot run Qwen 2's window in a compiled function
    # (GENERATE_CANNOT_WINDOW): the reference is then its forward pass,
    # token by token, without a cache.
    original, swapped = causal_lms(name)
    prompt = inputs(length=16, real=5)
    got = greedy_tokens(swapped, prompt)
    if name in GENERATE_CANNOT_WINDOW:
        expected = greedy_without_cache(original, prompt, 5)
    else:
        expected = greedy_tokens(original, prompt)
    np.testing.assert_array_equal(got, expected)
    if name in ("qwen", "qwen3"):  # (the MoE models' attention is theirs)
        # The window changes the tokens: the comparison sees it.
        full = tiny_causal_lm(name, **without_window(name))
        assert not np.array_equal(greedy_without_cache(full, prompt, 5), expected)


def test_qwen_greedy_generate_without_window_gives_keras_hubs_tokens():
    original, swapped = causal_lms("qwen", use_sliding_window_attention=False)
    prompt = inputs(length=16, real=5)
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


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
    assert len(expected) == DECODER["num_layers"]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("name", ["qwen", "qwen3"])
def test_saves_and_loads_in_safe_mode_with_our_attention(name, tmp_path):
    swapped = swap_attention(backbone(name), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(type(a) is MODELS[name] for a in attention_layers(loaded))


def test_lora_applies_after_the_swap():
    swapped = swap_attention(backbone("qwen3"))
    lora = assert_lora_applies(swapped)
    assert not any("layernorm/scale" in p for p in lora)
    x = inputs()
    assert np.isfinite(numpy(swapped(x))).all()


def test_swapped_classes_take_keras_hubs_constructors():
    for name in MODELS:
        cls = swapped_class(getattr(keras_hub.models, TINY[name].backbone))
        model = cls(**TINY[name].config, attention_options={"chunk_size": 8})
        assert model.get_config()["attention_options"] == {"chunk_size": 8}, name
