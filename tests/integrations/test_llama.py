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
from keras_attention.utils import keras_internals  # noqa: E402
from tests.integrations.keras_hub_models import (  # noqa: E402
    TINY,
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_packed_rows_are_each_document_alone,
    assert_quantizes_like_keras_hubs,
    assert_weights_are_keras_hubs,
    attention_layers,
    inputs,
    numpy,
    outputs,
    saved_and_loaded,
    tiny_backbone,
    tiny_causal_lm,
)

CONFIG = TINY["llama"].config


def backbone(name="llama", **overrides):
    """The tiny Llama (`llama` or `llama3`), with keras-hub's initial
    weights."""
    return tiny_backbone(name, **overrides)


@pytest.mark.parametrize("name", ["llama", "llama3"])
def test_backbone_outputs_equal_keras_hubs(name):
    original = backbone(name, rope_max_wavelength=500)
    swapped = swap_attention(original)
    cls = getattr(keras_hub.models, TINY[name].backbone)
    assert type(original) is cls
    assert isinstance(swapped, cls) and type(swapped) is not cls
    assert all(isinstance(a, LlamaAttention) for a in attention_layers(swapped))
    assert_outputs_equal(swapped, original, inputs(), 9)


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
    original = tiny_causal_lm("llama", num_layers=1)
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.LlamaCausalLM
    prompt = inputs(length=16, real=5)
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


def test_packed_documents_equal_each_document_alone():
    original = backbone()
    assert_packed_rows_are_each_document_alone(
        swap_attention(original, packed=True), original
    )


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(a.chunk_size == 16 for a in attention_layers(loaded))


def test_lora_applies_after_the_swap():
    assert_lora_applies(swap_attention(backbone()))


def test_quantization_applies_after_the_swap():
    reference = backbone(num_layers=1)
    assert_quantizes_like_keras_hubs(swap_attention(reference), reference, inputs(), 9)


def test_the_copy_is_compiled_as_the_original_was():
    """A user's compile (optimizer config, loss, sampler) survives the swap,
    not keras-hub's defaults; a model left uncompiled stays so, and `fit`
    asks for `compile` as the original's does (keras-hub's own tests, the
    task swapped, check it)."""
    causal_lm = tiny_causal_lm("llama")
    sampler = keras_hub.samplers.TopKSampler(k=3)
    accuracy = keras.metrics.SparseCategoricalAccuracy(name="hits")
    causal_lm.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=lambda y, p: keras.ops.mean(p),  # which no config can rebuild
        weighted_metrics=[accuracy],
        sampler=sampler,
    )
    swapped = swap_attention(causal_lm)
    assert isinstance(swapped.optimizer, keras.optimizers.SGD)
    assert swapped.optimizer is not causal_lm.optimizer
    assert swapped.loss is causal_lm.loss
    copied = keras_internals.compile_arguments(swapped)["weighted_metrics"][0]
    assert copied is not accuracy and copied.name == "hits"
    assert np.isclose(numpy(swapped.optimizer.learning_rate), 0.1)
    assert isinstance(swapped.sampler, keras_hub.samplers.TopKSampler)
    assert swapped.sampler is not sampler and swapped.sampler.k == 3
    uncompiled = type(causal_lm)(backbone(), preprocessor=None, compile=False)
    swapped = swap_attention(uncompiled)
    assert not swapped.compiled
    x = {"token_ids": np.ones((2, 5), "int32"), "padding_mask": np.ones((2, 5))}
    with pytest.raises(ValueError, match="compile"):
        swapped.fit(x, np.ones((2, 5), "int32"), verbose=0)
    reference = backbone()
    reference.compile(optimizer="sgd", loss="mse")
    assert isinstance(swap_attention(reference).optimizer, keras.optimizers.SGD)


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
    expected = outputs(original, x, 11)
    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    swapped = swap_attention(original, flash_attention=True)
    got = outputs(swapped, x, 11)
    assert {a.attention_path for a in attention_layers(swapped)} == {"jax_pallas"}
    np.testing.assert_allclose(got, expected, atol=2e-5)
