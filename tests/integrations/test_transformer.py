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
from tests.integrations.keras_hub_models import (  # noqa: E402
    VOCABULARY,
    assert_greedy_tokens_are_keras_hubs,
    assert_hands_the_mask_parts,
    assert_lora_applies,
    assert_outputs_equal,
    assert_quantizes_like_keras_hubs,
    assert_weights_are_keras_hubs,
    attention_layers,
    numpy,
    outputs,
    randomize,
    saved_and_loaded,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    inputs as token_inputs,
)

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
    randomize(
        model,
        0.5,
        which=lambda weight: len(weight.shape) >= 2 or weight.path.endswith("bias"),
    )
    return model


def inputs(name="gpt2", length=12, real=9, batch=2, seed=1):
    """`keras_hub_models.inputs`, with the segment ids of the encoders that
    take them."""
    x = token_inputs(length=length, real=real, batch=batch, seed=seed)
    if name in WITH_SEGMENTS:
        x["segment_ids"] = np.zeros((batch, length), "int32")
    return x


@pytest.mark.parametrize("name", list(BACKBONES))
def test_backbone_outputs_equal_keras_hubs(name):
    original = backbone(name)
    swapped = swap_attention(original)
    assert isinstance(swapped, type(original)) and type(swapped) is not type(original)
    assert all(
        isinstance(a, CachedMultiHeadAttention) for a in attention_layers(swapped)
    )
    assert_weights_are_keras_hubs(swapped, original)
    x = inputs(name)
    assert_outputs_equal(swapped, original, x, 9)
    expected, got = original(x), swapped(x)
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
    difference = outputs(model, x, 9) - outputs(model, unpadded, 9)
    # Causal: the first 9 positions never see the padding; an encoder's do.
    assert (np.abs(difference).max() > 1e-3) == (name == "bert")


def test_decoder_blocks_hand_the_attention_the_mask_parts():
    swapped = swap_attention(backbone("gpt2"))
    # (x, padding mask, attention mask, use_causal_mask, cache, cache update
    # index)
    assert_hands_the_mask_parts(swapped, None, True, None, None)
    compute_mask = swapped.transformer_layers[0]._compute_self_attention_mask
    x = keras.ops.ones((2, 5, SIZES["hidden_dim"]))
    padding = keras.ops.ones((2, 5), "int32")
    mask = compute_mask(x, padding, None, False, None, None)
    assert isinstance(mask, DecoderMask) and not mask.causal
    assert compute_mask(x, None, None, False, None, None) is None


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
    assert_outputs_equal(swapped, original, inputs(name, length=40, real=33), 33)
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
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt, real=5)


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
    loaded = saved_and_loaded(swapped, tmp_path, inputs(name))
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(
        isinstance(a, CachedMultiHeadAttention) and a.chunk_size == 16
        for a in attention_layers(loaded)
    )


@pytest.mark.parametrize(
    "name, attention",
    [("gpt2", "self_attention"), ("bert", "self_attention_layer")],
)
def test_lora_applies_after_the_swap(name, attention):
    swapped = swap_attention(backbone(name))
    assert_lora_applies(swapped, attention)
    outputs(swapped, inputs(name))  # (and the model runs with them)


def test_quantization_applies_after_the_swap():
    quantized, reference = swap_attention(backbone("gpt2")), backbone("gpt2")
    assert_quantizes_like_keras_hubs(quantized, reference, inputs(), 9)


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
    assert_greedy_tokens_are_keras_hubs(
        swapped, original, prompt, real=3, key="decoder_token_ids"
    )
