"""keras-hub's models on its generic blocks (GPT-2, OPT; BERT, RoBERTa,
XLM-RoBERTa, DistilBERT, ELECTRA, ALBERT) with our attention: the same
outputs and greedy tokens as keras-hub's own models, the masks handed as
such, saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402
from keras_attention.integrations.keras_hub.transformer import (  # noqa: E402
    CachedMultiHeadAttention,
    mask_arguments,
)

VOCABULARY = 50
SIZES = {"num_layers": 2, "num_heads": 4, "hidden_dim": 16, "intermediate_dim": 32}
BACKBONES = {
    "gpt2": ("GPT2Backbone", {"vocabulary_size": VOCABULARY}),
    "opt": ("OPTBackbone", {"vocabulary_size": VOCABULARY}),
    "bert": ("BertBackbone", {"vocabulary_size": VOCABULARY}),
    "roberta": ("RobertaBackbone", {"vocabulary_size": VOCABULARY}),
    "xlm_roberta": ("XLMRobertaBackbone", {"vocabulary_size": VOCABULARY}),
    "distil_bert": ("DistilBertBackbone", {"vocabulary_size": VOCABULARY}),
    "electra": ("ElectraBackbone", {"vocab_size": VOCABULARY, "embedding_dim": 8}),
    "albert": (
        "AlbertBackbone",
        {"vocabulary_size": VOCABULARY, "embedding_dim": 8, "num_groups": 1},
    ),
}
WITH_SEGMENTS = ("bert", "electra", "albert")


def backbone(name, **overrides):
    """A tiny backbone whose kernels and biases are drawn from N(0, 0.5):
    keras-hub's small initializers leave the attention too little say in
    the outputs (a greedy decoder then repeats its last token whatever it
    attends to)."""
    keras.utils.set_random_seed(0)
    cls, arguments = BACKBONES[name] if name in BACKBONES else ("BartBackbone", {})
    config = {**SIZES, "max_sequence_length": 64, "dropout": 0.0, **arguments}
    if name == "bart":
        config["vocabulary_size"] = VOCABULARY
    model = getattr(keras_hub.models, cls)(**{**config, **overrides})
    rng = np.random.default_rng(0)
    for weight in model.weights:
        if len(weight.shape) >= 2 or weight.path.endswith("bias"):
            weight.assign(rng.normal(0, 0.5, weight.shape).astype(weight.dtype))
    return model


def inputs(name="gpt2", length=12, real=9, batch=2, seed=1):
    rng = np.random.default_rng(seed)
    padding = np.zeros((batch, length), "int32")
    padding[:, :real] = 1
    x = {
        "token_ids": rng.integers(1, VOCABULARY, (batch, length)),
        "padding_mask": padding,
    }
    if name in WITH_SEGMENTS:
        x["segment_ids"] = np.zeros((batch, length), "int32")
    return x


def blocks(model):
    layers = model.transformer_layers
    return [b for b in layers for b in (b if isinstance(b, list) else [b])]


def attention_layers(model):
    return [block._self_attention_layer for block in blocks(model)]


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def sequence(outputs):
    return numpy(outputs["sequence_output"] if isinstance(outputs, dict) else outputs)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_backbone_outputs_equal_keras_hubs(name):
    original = backbone(name)
    swapped = swap_attention(original)
    assert isinstance(swapped, type(original)) and type(swapped) is not type(original)
    assert all(
        isinstance(a, CachedMultiHeadAttention) for a in attention_layers(swapped)
    )
    assert [w.path for w in swapped.weights] == [w.path for w in original.weights]
    assert [w.shape for w in swapped.weights] == [w.shape for w in original.weights]
    x = inputs(name)
    expected, got = original(x), swapped(x)
    np.testing.assert_allclose(
        sequence(got)[:, :9], sequence(expected)[:, :9], atol=2e-5
    )
    if isinstance(expected, dict) and "pooled_output" in expected:
        np.testing.assert_allclose(
            numpy(got["pooled_output"]),
            numpy(expected["pooled_output"]),
            atol=2e-5,
        )


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_the_padding_changes_the_outputs_the_comparison_sees(name):
    model = swap_attention(backbone(name))
    x = inputs(name)
    unpadded = dict(x, padding_mask=np.ones_like(x["padding_mask"]))
    difference = sequence(model(x))[:, :9] - sequence(model(unpadded))[:, :9]
    # Causal: the first 9 positions never see the padding; an encoder's do.
    assert (np.abs(difference).max() > 1e-3) == (name == "bert")


def test_decoder_blocks_hand_the_attention_the_mask_parts():
    block = swap_attention(backbone("gpt2")).transformer_layers[0]
    x = keras.ops.ones((2, 5, SIZES["hidden_dim"]))
    padding = keras.ops.ones((2, 5), "int32")
    mask = block._compute_self_attention_mask(x, padding, None, True, None, None)
    assert isinstance(mask, DecoderMask) and mask.causal
    assert mask.padding_mask is padding and mask.attention_mask is None
    mask = block._compute_self_attention_mask(x, padding, None, False, None, None)
    assert isinstance(mask, DecoderMask) and not mask.causal
    assert block._compute_self_attention_mask(x, None, None, False, None, None) is None


def test_the_encoders_padding_is_the_key_mask():
    padding = keras.ops.convert_to_tensor([[1, 1, 0], [1, 0, 0]], "int32")
    query = keras.ops.ones((2, 3, 4))
    arguments = mask_arguments(padding[:, None, :], query, None)
    assert list(arguments) == ["key_mask"]
    np.testing.assert_array_equal(numpy(arguments["key_mask"]), padding == 1)
    dense = keras.ops.ones((2, 3, 3), "int32")
    assert list(mask_arguments(dense, query, None)) == ["attention_mask"]


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_long_inputs_take_the_chunked_path(name):
    original = backbone(name)
    swapped = swap_attention(original, chunk_size=8)
    x = inputs(name, length=40, real=33)
    np.testing.assert_allclose(
        sequence(swapped(x))[:, :33], sequence(original(x))[:, :33], atol=2e-5
    )
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


@pytest.mark.parametrize(
    "name, task", [("gpt2", "GPT2CausalLM"), ("opt", "OPTCausalLM")]
)
def test_greedy_generate_gives_keras_hubs_tokens(name, task):
    cls = getattr(keras_hub.models, task)
    original = cls(backbone=backbone(name), preprocessor=None)
    swapped = swap_attention(original)
    assert type(swapped) is cls
    prompt = inputs(name, length=16, real=5)
    for model in (original, swapped):
        model.compile(sampler="greedy")
    expected = original.generate(prompt, stop_token_ids=None)["token_ids"]
    got = swapped.generate(prompt, stop_token_ids=None)["token_ids"]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(expected[:, 5:], prompt["token_ids"][:, 5:])


def test_text_classifier_outputs_equal_keras_hubs():
    original = keras_hub.models.BertTextClassifier(
        backbone=backbone("bert"), num_classes=3, preprocessor=None
    )
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.BertTextClassifier
    x = inputs("bert")
    np.testing.assert_allclose(numpy(swapped(x)), numpy(original(x)), atol=2e-5)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_saves_and_loads_in_safe_mode_with_our_attention(name, tmp_path):
    swapped = swap_attention(backbone(name), chunk_size=16)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(
        isinstance(a, CachedMultiHeadAttention) and a.chunk_size == 16
        for a in attention_layers(loaded)
    )
    x = inputs(name)
    np.testing.assert_array_equal(sequence(loaded(x)), sequence(swapped(x)))


@pytest.mark.parametrize(
    "name, attention",
    [("gpt2", "self_attention"), ("bert", "self_attention_layer")],
)
def test_lora_applies_after_the_swap(name, attention):
    swapped = swap_attention(backbone(name))
    swapped.enable_lora(2)
    lora = [w.path for w in swapped.trainable_weights]
    assert any(f"{attention}/query/lora_kernel_a" in p for p in lora)
    assert any(f"{attention}/value/lora_kernel_b" in p for p in lora)
    x = inputs(name)
    sequence(swapped(x))


def test_quantization_applies_after_the_swap():
    quantized, reference = swap_attention(backbone("gpt2")), backbone("gpt2")
    try:
        reference.quantize("int8")
    except TypeError as error:  # keras-hub 0.23's embedding under Keras 3.15
        pytest.skip(f"keras-hub's own model does not quantize here: {error}")
    quantized.quantize("int8")
    x = inputs()
    np.testing.assert_allclose(
        sequence(quantized(x))[:, :9], sequence(reference(x))[:, :9], atol=1e-4
    )


def bart_inputs(encoder_real=7, decoder_length=8, decoder_real=5, seed=2):
    rng = np.random.default_rng(seed)
    encoder_padding = np.zeros((2, 10), "int32")
    encoder_padding[:, :encoder_real] = 1
    decoder_padding = np.zeros((2, decoder_length), "int32")
    decoder_padding[:, :decoder_real] = 1
    return {
        "encoder_token_ids": rng.integers(1, VOCABULARY, (2, 10)),
        "encoder_padding_mask": encoder_padding,
        "decoder_token_ids": rng.integers(1, VOCABULARY, (2, decoder_length)),
        "decoder_padding_mask": decoder_padding,
    }


def test_bart_outputs_equal_keras_hubs():
    original = backbone("bart")
    swapped = swap_attention(original)
    assert [w.path for w in swapped.weights] == [w.path for w in original.weights]
    attention = [b._self_attention_layer for b in swapped.encoder_transformer_layers]
    for block in swapped.decoder_transformer_layers:
        attention += [block._self_attention_layer, block._cross_attention_layer]
    assert all(isinstance(a, CachedMultiHeadAttention) for a in attention)
    x = bart_inputs()
    expected, got = original(x), swapped(x)
    for part, real in (("encoder", 7), ("decoder", 5)):
        np.testing.assert_allclose(
            numpy(got[f"{part}_sequence_output"])[:, :real],
            numpy(expected[f"{part}_sequence_output"])[:, :real],
            atol=2e-5,
        )


def test_bart_greedy_generate_gives_keras_hubs_tokens():
    original = keras_hub.models.BartSeq2SeqLM(
        backbone=backbone("bart"), preprocessor=None
    )
    swapped = swap_attention(original)
    prompt = bart_inputs(decoder_length=16, decoder_real=3)
    for model in (original, swapped):
        model.compile(sampler="greedy")
    expected = original.generate(prompt, stop_token_ids=None)["decoder_token_ids"]
    got = swapped.generate(prompt, stop_token_ids=None)["decoder_token_ids"]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(expected[:, 3:], prompt["decoder_token_ids"][:, 3:])
