"""keras-hub's Llama with our attention: the same outputs and greedy tokens
as keras-hub's own model, the mask's parts handed as such, packed rows,
saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    FAMILIES,
    swap_attention,
    swapped_class,
)
from keras_attention.integrations.keras_hub.llama import LlamaAttention  # noqa: E402
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402

CONFIG = {
    "vocabulary_size": 50,
    "num_layers": 2,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "hidden_dim": 16,
    "intermediate_dim": 32,
    "max_sequence_length": 64,
}


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def backbone(cls=None, **overrides):
    keras.utils.set_random_seed(0)
    cls = cls or keras_hub.models.LlamaBackbone
    return cls(**{**CONFIG, **overrides})


def inputs(length=12, real=9, batch=2, seed=1):
    rng = np.random.default_rng(seed)
    padding = np.zeros((batch, length), "int32")
    padding[:, :real] = 1
    return {
        "token_ids": rng.integers(1, CONFIG["vocabulary_size"], (batch, length)),
        "padding_mask": padding,
    }


def attention_layers(model):
    return [block._self_attention_layer for block in model.transformer_layers]


@pytest.mark.parametrize(
    "cls", ["LlamaBackbone", "Llama3Backbone"], ids=["llama", "llama3"]
)
def test_backbone_outputs_equal_keras_hubs(cls):
    cls = getattr(keras_hub.models, cls)
    original = backbone(cls, rope_max_wavelength=500)
    swapped = swap_attention(original)
    assert isinstance(swapped, cls) and type(swapped) is not cls
    assert all(isinstance(a, LlamaAttention) for a in attention_layers(swapped))
    x = inputs()
    expected, got = numpy(original(x)), numpy(swapped(x))
    np.testing.assert_allclose(got[:, :9], expected[:, :9], atol=2e-5)


def test_llama_31_frequency_adjustment_is_kept():
    adjusted = {
        "rope_frequency_adjustment_factor": 8.0,
        "rope_low_freq_factor": 1.0,
        "rope_high_freq_factor": 4.0,
        "rope_pretraining_sequence_length": 16,
        "rope_max_wavelength": 500,
    }
    original = backbone(**adjusted)
    x = inputs(length=40, real=40)
    np.testing.assert_allclose(
        numpy(swap_attention(original)(x)), numpy(original(x)), atol=2e-5
    )
    # The adjustment changes the outputs: the comparison above sees it.
    plain = backbone(rope_max_wavelength=500)
    assert np.abs(numpy(plain(x)) - numpy(original(x))).max() > 1e-3


def test_variable_paths_and_weight_order_are_keras_hubs():
    original = backbone()
    swapped = swap_attention(original)
    assert [w.path for w in swapped.weights] == [w.path for w in original.weights]
    assert [w.shape for w in swapped.weights] == [w.shape for w in original.weights]


def test_blocks_hand_the_attention_the_mask_parts():
    swapped = swap_attention(backbone())
    block = swapped.transformer_layers[0]
    x = keras.ops.ones((2, 5, CONFIG["hidden_dim"]))
    padding = keras.ops.ones((2, 5), "int32")
    mask = block._compute_self_attention_mask(x, padding, None, None, None)
    assert isinstance(mask, DecoderMask) and mask.causal
    assert mask.padding_mask is padding and mask.attention_mask is None


def test_long_inputs_take_the_chunked_path():
    original = backbone()
    swapped = swap_attention(original, chunk_size=8)
    x = inputs(length=40, real=33)
    np.testing.assert_allclose(
        numpy(swapped(x))[:, :33], numpy(original(x))[:, :33], atol=2e-5
    )
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_greedy_generate_gives_keras_hubs_tokens():
    original = keras_hub.models.LlamaCausalLM(
        backbone=backbone(num_layers=1), preprocessor=None
    )
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.LlamaCausalLM
    prompt = inputs(length=16, real=5)
    for model in (original, swapped):
        model.compile(sampler="greedy")
    expected = original.generate(prompt, stop_token_ids=None)["token_ids"]
    got = swapped.generate(prompt, stop_token_ids=None)["token_ids"]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(expected[:, 5:], prompt["token_ids"][:, 5:])


def test_packed_documents_equal_each_document_alone():
    original = backbone()
    swapped = swap_attention(original, packed=True)
    rng = np.random.default_rng(3)
    first, second = rng.integers(1, 50, (1, 5)), rng.integers(1, 50, (1, 4))
    row = {
        "token_ids": np.concatenate([first, second, np.zeros((1, 3), int)], 1),
        "padding_mask": np.array([[1] * 5 + [2] * 4 + [0] * 3], "int32"),
    }
    packed = numpy(swapped(row))
    for document, where in ((first, slice(0, 5)), (second, slice(5, 9))):
        alone = original(
            {"token_ids": document, "padding_mask": np.ones_like(document)}
        )
        np.testing.assert_allclose(packed[:, where], numpy(alone), atol=2e-5)


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(a.chunk_size == 16 for a in attention_layers(loaded))
    x = inputs()
    np.testing.assert_array_equal(numpy(loaded(x)), numpy(swapped(x)))


def test_lora_applies_after_the_swap():
    swapped = swap_attention(backbone())
    swapped.enable_lora(2)
    lora = [w.path for w in swapped.trainable_weights]
    assert any("self_attention/query/lora_kernel_a" in p for p in lora)
    assert any("self_attention/value/lora_kernel_b" in p for p in lora)


def test_quantization_applies_after_the_swap():
    reference = backbone(num_layers=1)
    quantized = swap_attention(reference)
    try:
        reference.quantize("int8")
    except TypeError as error:  # keras-hub 0.23's embedding under Keras 3.15
        pytest.skip(f"keras-hub's own model does not quantize here: {error}")
    quantized.quantize("int8")
    x = inputs()
    np.testing.assert_allclose(
        numpy(quantized(x))[:, :9], numpy(reference(x))[:, :9], atol=1e-4
    )


def test_swapped_class_is_the_constructor_for_keras_hubs_own_tests():
    cls = swapped_class(keras_hub.models.LlamaBackbone)
    assert swapped_class(cls) is cls
    model = cls(**CONFIG, attention_options={"flash_attention": False})
    assert model.get_config()["attention_options"] == {"flash_attention": False}


def test_other_families_are_refused_naming_those_taken():
    model = keras_hub.models.FNetBackbone(
        vocabulary_size=10,
        num_layers=1,
        hidden_dim=4,
        intermediate_dim=8,
        max_sequence_length=8,
    )
    names = ", ".join(f.name for f in FAMILIES)
    with pytest.raises(ValueError, match=f"takes the families {names}; received"):
        swap_attention(model)
    with pytest.raises(ValueError, match="takes a keras-hub Backbone or Task"):
        swap_attention(keras.Sequential([]))


@pytest.mark.skipif(keras.config.backend() != "jax", reason="the Pallas kernel, on JAX")
def test_on_a_gpu_the_swapped_blocks_take_the_fused_kernel(monkeypatch):
    """The causal mask and the padding reach the attention as such, so the
    fused kernel takes them (the device faked as a GPU: Pallas' interpreter
    runs it here), with keras-hub's outputs."""
    from keras_attention.ops import plan

    original = backbone()
    x = inputs(length=16, real=11)
    expected = numpy(original(x))
    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    swapped = swap_attention(original, flash_attention=True)
    got = numpy(swapped(x))
    assert {a.attention_path for a in attention_layers(swapped)} == {"jax_pallas"}
    np.testing.assert_allclose(got[:, :11], expected[:, :11], atol=2e-5)
