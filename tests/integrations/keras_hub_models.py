"""What tests/integrations' files share: the tiny keras-hub models of each
family (with random weights where keras-hub's initial ones would hide a
mistake), token inputs with padding, and the checks each family's tests make
of a swapped model against keras-hub's own model (outputs, weight order,
greedy tokens, saving, LoRA, quantization, the mask the blocks hand the
attention, the int8 cache).

Imported by the test files after their `pytest.importorskip("keras_hub")`;
it skips too where keras-hub is missing."""

import dataclasses
import re

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402

VOCABULARY = 50
# The decoder families' tiny size: grouped queries (4 heads, 2 key/value
# heads) of head size 4 where a family does not set `head_dim`.
DECODER = {
    "vocabulary_size": VOCABULARY,
    "num_layers": 2,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "hidden_dim": 16,
    "intermediate_dim": 32,
}
QWEN_WINDOW = 4
QWEN_MOE = {"moe_intermediate_dim": 8, "num_experts": 4, "top_k": 2}
# Qwen 3.5: DeltaNet layers 0 and 2, full attention on 1 and 3 (head size 8,
# rotary on its first 6 features), a window of 4 keys, tiny DeltaNet heads.
QWEN3_5 = {
    **DECODER,
    "num_layers": 4,
    "head_dim": 8,
    "layer_types": ["linear_attention", "full_attention"] * 2,
    "partial_rotary_factor": 0.75,
    "sliding_window_size": QWEN_WINDOW,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 4,
    "linear_value_head_dim": 4,
}
GEMMA_VOCABULARY = 48
GEMMA = {**DECODER, "vocabulary_size": GEMMA_VOCABULARY, "head_dim": 8}

# T5Gemma's and T5Gemma 2's tiny encoder-decoder.
T5GEMMA = {
    "vocabulary_size": GEMMA_VOCABULARY,
    **{
        f"{part}_{name}": value
        for part in ("encoder", "decoder")
        for name, value in {
            "hidden_dim": 16,
            "intermediate_dim": 32,
            "num_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        }.items()
    },
    "sliding_window": 3,
    "attention_bias": True,
    "query_pre_attn_scalar": 8,
    "attn_logit_softcapping": 0.5,
    "final_logit_softcapping": 30.0,
}


@dataclasses.dataclass(frozen=True)
class Tiny:
    """A tiny model of one keras-hub family.

    Args:
        backbone: its backbone's name in `keras_hub.models`.
        config: the backbone's arguments.
        causal_lm: its causal LM's name in `keras_hub.models`.
        deviation: the deviation of the random weights it is given (all of
            them, the norms' scales included), or None for keras-hub's
            initial weights.
        scales_at: the mean of the norms' random scales (the Qwen models'
            about 1, as keras-hub starts them; the others' about 0).
    """

    backbone: str
    config: dict
    causal_lm: str
    deviation: float | None = None
    scales_at: float = 0.0


# Random weights larger than keras-hub's initial ones (biases at 0, norm
# scales at 1 or, Gemma's, at 0, kernels of deviation 0.02, under which
# greedy decoding repeats one token): a bias or norm left out or misplaced
# shows in the outputs, and the generated tokens depend on the window.
TINY = {
    "llama": Tiny(
        "LlamaBackbone", {**DECODER, "max_sequence_length": 64}, "LlamaCausalLM"
    ),
    "llama3": Tiny(
        "Llama3Backbone", {**DECODER, "max_sequence_length": 64}, "Llama3CausalLM"
    ),
    "mistral": Tiny(
        "MistralBackbone", {**DECODER, "sliding_window": 3}, "MistralCausalLM", 0.3
    ),
    "mixtral": Tiny(
        "MixtralBackbone",
        {**DECODER, "num_experts": 4, "top_k": 2, "sliding_window": 3},
        "MixtralCausalLM",
        0.3,
    ),
    "phi3": Tiny("Phi3Backbone", DECODER, "Phi3CausalLM", 0.3),
    "qwen": Tiny(
        "QwenBackbone",
        {
            **DECODER,
            "use_sliding_window_attention": True,
            "sliding_window_size": QWEN_WINDOW,
        },
        "QwenCausalLM",
        0.3,
        scales_at=1.0,
    ),
    "qwen3": Tiny(
        "Qwen3Backbone",
        {**DECODER, "head_dim": 6, "sliding_window_size": QWEN_WINDOW},
        "Qwen3CausalLM",
        0.3,
        scales_at=1.0,
    ),
    "qwen_moe": Tiny(
        "QwenMoeBackbone",
        {
            **DECODER,
            "use_sliding_window_attention": True,
            "sliding_window_size": QWEN_WINDOW,
            "shared_expert_intermediate_dim": 16,
            **QWEN_MOE,
        },
        "QwenMoeCausalLM",
        0.3,
        scales_at=1.0,
    ),
    "qwen3_moe": Tiny(
        "Qwen3MoeBackbone",
        {**DECODER, "head_dim": 6, "sliding_window_size": QWEN_WINDOW, **QWEN_MOE},
        "Qwen3MoeCausalLM",
        0.3,
        scales_at=1.0,
    ),
    # GPT-OSS: biases on every projection, learned sinks, a window of 3 on
    # every other layer, a mixture of experts.
    "gpt_oss": Tiny(
        "GptOssBackbone",
        {**DECODER, "num_experts": 4, "top_k": 2, "sliding_window": 3},
        "GptOssCausalLM",
        0.3,
    ),
    "gemma": Tiny("GemmaBackbone", GEMMA, "GemmaCausalLM", 0.5),
    # Gemma 2: both soft caps, post norms, a window of 3 in layer 0.
    "gemma2": Tiny(
        "GemmaBackbone",
        {
            **GEMMA,
            "use_post_ffw_norm": True,
            "use_post_attention_norm": True,
            "attention_logit_soft_cap": 0.5,
            "final_logit_soft_cap": 30.0,
            "use_sliding_window_attention": True,
            "sliding_window_size": 3,
        },
        "GemmaCausalLM",
        0.5,
    ),
    # Gemma 3: five windowed layers (wavelength 10k) and a global one (1M,
    # scaled by 8), query/key norms, a soft cap.
    "gemma3": Tiny(
        "Gemma3Backbone",
        {
            **GEMMA,
            "num_layers": 6,
            "image_size": 16,
            "use_post_ffw_norm": True,
            "use_post_attention_norm": True,
            "attention_logit_soft_cap": 0.5,
            "use_sliding_window_attention": True,
            "sliding_window_size": 3,
            "global_rope_scaling_factor": 8.0,
        },
        "Gemma3CausalLM",
        0.5,
    ),
    # T5Gemma: an encoder and a decoder of two layers each, the first of
    # each windowed (3), soft caps, biases, a scale of 1 / sqrt(8).
    "t5gemma": Tiny("T5GemmaBackbone", T5GEMMA, "T5GemmaSeq2SeqLM", 0.5),
    # T5Gemma 2: the same sizes, a window of 4 (the encoder's is not
    # symmetric then), query/key norms, the decoder's merged attention.
    "t5gemma2": Tiny(
        "T5Gemma2Backbone",
        {**T5GEMMA, "sliding_window": 4},
        "T5Gemma2Seq2SeqLM",
        0.5,
    ),
    # Gemma 4: windows of 3 on two layers of three, global layers (2, 5)
    # of head size 16 with one key/value head taking the keys as values and
    # a partial rotary embedding, the last two layers sharing the keys and
    # values of layers 3 and 2, per-layer inputs, a soft cap; keras-hub's
    # norms scale by their weights (about 1), not 1 + weights.
    "gemma4": Tiny(
        "Gemma4Backbone",
        {
            **GEMMA,
            "num_layers": 6,
            "image_size": 16,
            "sliding_window_size": 3,
            "sliding_window_pattern": 3,
            "global_head_dim": 16,
            "num_global_key_value_heads": 1,
            "global_rope_partial_rotary_factor": 0.25,
            "num_kv_shared_layers": 2,
            "hidden_size_per_layer_input": 4,
            "attention_logit_soft_cap": 0.5,
        },
        "Gemma4CausalLM",
        0.5,
        scales_at=1.0,
    ),
    # SmolLM 3: rotary positions on layers 0 and 2, none (NoPE) on layer 1
    # and on layer 3 (every 4th), biases on the query, key and value.
    "smollm3": Tiny(
        "SmolLM3Backbone",
        {
            "vocabulary_size": VOCABULARY,
            "hidden_dim": 16,
            "intermediate_dim": 32,
            "num_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "attention_bias": True,
            "attention_dropout": 0.0,
            "rope_layer_enabled_list": [True, False, True, False],
            "layer_types": ["attention"] * 4,
            "mlp_bias": False,
            "layer_norm_epsilon": 1e-6,
            "max_position_embeddings": 64,
            "rope_theta": 10000.0,
            "partial_rotary_factor": 1.0,
        },
        "SmolLM3CausalLM",
        0.3,
    ),
    # Gemma 3n: windows of 3 on layers 0 and 2, layers 2 and 3 sharing the
    # keys and values of layers 0 and 1, query/key/value norms, AltUp and
    # Laurel blocks, no vision or audio tower.
    "gemma3n": Tiny(
        "Gemma3nBackbone",
        {
            "text_vocab_size": VOCABULARY,
            "text_hidden_size": 16,
            "num_hidden_layers": 4,
            "pad_token_id": 0,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": [32] * 4,
            "hidden_activation": "gelu_approximate",
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "sliding_window": 3,
            "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10_000.0,
            "max_position_embeddings": 64,
            "vocab_size_per_layer_input": VOCABULARY,
            "hidden_size_per_layer_input": 4,
            "altup_num_inputs": 2,
            "laurel_rank": 2,
            "num_kv_shared_layers": 2,
        },
        "Gemma3nCausalLM",
        0.3,
        scales_at=1.0,
    ),
    "qwen3_5": Tiny("Qwen3_5Backbone", QWEN3_5, "Qwen3_5CausalLM", 0.3),
    "qwen3_5_moe": Tiny(
        "Qwen3_5MoeBackbone",
        {
            **{k: v for k, v in QWEN3_5.items() if k != "intermediate_dim"},
            "moe_intermediate_dim": 8,
            "shared_expert_intermediate_size": 8,
            "num_experts": 4,
            "top_k": 2,
        },
        "Qwen3_5MoeCausalLM",
        0.3,
    ),
}
# keras-hub's own `generate` cannot run these models' window in a compiled
# function (Qwen 2's `if cache_update_index` takes a tensor as a bool;
# keras-hub 0.32): their reference tokens come from `greedy_without_cache`.
GENERATE_CANNOT_WINDOW = ("qwen", "qwen_moe")


def numpy(x):
    """`x` as a NumPy array (`keras.ops.convert_to_numpy`: `np.asarray`
    refuses PyTorch's tensors that require grad)."""
    return keras.ops.convert_to_numpy(x)


def randomize(model, deviation, scales_at=0.0, which=None, seed=0):
    """Gives `model`'s weights (those `which(weight)` takes, default all)
    random values of deviation `deviation`, about `scales_at` for the norms'
    scales (paths ending in `scale`) and about 0 for the rest."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if which is None or which(weight):
            mean = scales_at if weight.path.endswith("scale") else 0.0
            noise = rng.normal(mean, deviation, tuple(weight.shape))
            weight.assign(noise.astype(weight.dtype))


def tiny_backbone(name, **overrides):
    """The tiny backbone of family `name` (a key of `TINY`), its arguments
    updated with `overrides`, built after `keras.utils.set_random_seed(0)`
    and given its random weights."""
    tiny = TINY[name]
    keras.utils.set_random_seed(0)
    cls = getattr(keras_hub.models, tiny.backbone)
    model = cls(**{**tiny.config, **overrides})
    if tiny.deviation is not None:
        randomize(model, tiny.deviation, tiny.scales_at)
    return model


def tiny_causal_lm(name, **overrides):
    """keras-hub's causal LM of family `name` on `tiny_backbone(name,
    **overrides)`, without a preprocessor (it takes token ids)."""
    cls = getattr(keras_hub.models, TINY[name].causal_lm)
    return cls(backbone=tiny_backbone(name, **overrides), preprocessor=None)


def small_llama(num_layers=2, hidden_dim=64, vocabulary_size=100):
    """keras-hub's `LlamaCausalLM` (no preprocessor) of `num_layers` blocks
    of width `hidden_dim` (4 query heads, 2 key/value heads, a feed-forward
    twice as wide) with keras-hub's initial weights, drawn from the random
    state the caller seeds."""
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers,
        num_query_heads=4,
        num_key_value_heads=2,
        hidden_dim=hidden_dim,
        intermediate_dim=2 * hidden_dim,
    )
    return keras_hub.models.LlamaCausalLM(backbone, preprocessor=None)


def scale_embeddings(causal_lm, factor=20.0):
    """Multiplies `causal_lm`'s token embeddings by `factor`: larger
    embeddings than keras-hub's initial ones keep a tiny model's greedy
    tokens from collapsing onto one token."""
    embeddings = causal_lm.backbone.token_embedding.embeddings
    embeddings.assign(embeddings * factor)


def two_prompts(width=16):
    """Token ids `(2, width)` of a prompt of 4 tokens and one of 6, padded
    with 0, and their padding mask."""
    token_ids = np.zeros((2, width), "int32")
    token_ids[0, :4] = [5, 6, 7, 8]
    token_ids[1, :6] = [9, 10, 11, 12, 13, 14]
    return {"token_ids": token_ids, "padding_mask": token_ids != 0}


def inputs(
    length=12, real=9, batch=2, seed=1, vocabulary_size=VOCABULARY, dtype="int64"
):
    """Random token ids `(batch, length)`, of which the first `real` of each
    row are real (`padding_mask` 1) and the rest padding."""
    rng = np.random.default_rng(seed)
    padding = np.zeros((batch, length), "int32")
    padding[:, :real] = 1
    token_ids = rng.integers(1, vocabulary_size, (batch, length)).astype(dtype)
    return {"token_ids": token_ids, "padding_mask": padding}


def attention_layers(model):
    """The self-attention layer of each block of a backbone, keras-hub's or
    ours: keras-hub's blocks name it `_self_attention_layer` (Llama's
    relatives, its generic decoder and encoder), `self_attention_layer`
    (GPT-OSS), `attention` (Phi-3, Gemma) or `self_attn` (SmolLM 3);
    ALBERT's blocks come in a list. Qwen 3.5's DeltaNet blocks have none."""
    blocks = [
        block
        for entry in model.transformer_layers
        for block in (entry if isinstance(entry, list) else [entry])
        if getattr(block, "layer_type", None) != "linear_attention"
    ]
    names = (
        "_self_attention_layer",
        "self_attention_layer",
        "attention",
        "self_attn",
    )
    return [
        getattr(block, next(name for name in names if hasattr(block, name)))
        for block in blocks
    ]


def outputs(model, x, real=None):
    """`model(x)` as a NumPy array (an encoder's `sequence_output`), its
    first `real` positions (all without `real`)."""
    result = model(x)
    if isinstance(result, dict):
        result = result["sequence_output"]
    return numpy(result)[:, :real]


def assert_outputs_equal(swapped, original, x, real, atol=2e-5):
    """The swapped model's outputs on `x` are the original's on the first
    `real` positions (those after are padding, which the models may fill
    differently); returns the original's."""
    expected = outputs(original, x, real)
    np.testing.assert_allclose(outputs(swapped, x, real), expected, atol=atol)
    return expected


def weight_paths(model):
    """The paths of `model`'s weights, in order, with the counter keras-hub's
    unnamed layers take (`sparse_moe_block_<n>` of the mixtures of experts,
    `rms_normalization_<n>` of T5Gemma's final norms, which differ between
    two models of a process) left out."""
    unnamed = r"(sparse_moe_block|rms_normalization)(_\d+)?/"
    return [re.sub(unnamed, r"\1/", w.path) for w in model.weights]


def assert_weights_are_keras_hubs(swapped, original):
    """The swapped model's weights have the original's paths and shapes, in
    the original's order (so that keras-hub's weight lists and files load)."""
    assert weight_paths(swapped) == weight_paths(original)
    assert [w.shape for w in swapped.weights] == [w.shape for w in original.weights]


def assert_hands_the_mask_parts(
    backbone, *arguments, method="_compute_self_attention_mask"
):
    """The first block of a swapped `backbone`, asked for its mask
    (`method(x, padding_mask, *arguments)`, keras-hub's
    `_compute_self_attention_mask` or Gemma's `_compute_attention_mask`),
    hands the attention a causal `DecoderMask` of the padding as such, not
    keras-hub's dense mask."""
    compute_mask = getattr(backbone.transformer_layers[0], method)
    x = keras.ops.ones((2, 5, backbone.hidden_dim))
    padding = keras.ops.ones((2, 5), "int32")
    mask = compute_mask(x, padding, *arguments)
    assert isinstance(mask, DecoderMask) and mask.causal
    assert mask.padding_mask is padding and mask.attention_mask is None


def greedy_tokens(causal_lm, prompt, key="token_ids"):
    """`causal_lm`'s greedy `generate` of `prompt` (no stop token), as a
    NumPy array."""
    causal_lm.compile(sampler="greedy")
    return numpy(causal_lm.generate(prompt, stop_token_ids=None)[key])


def greedy_without_cache(causal_lm, prompt, real):
    """Greedy tokens from full forward passes of `causal_lm` (no cache),
    the prompt's first `real` tokens of each row kept."""
    tokens, padding = prompt["token_ids"].copy(), prompt["padding_mask"].copy()
    for position in range(real, tokens.shape[1]):
        logits = causal_lm({"token_ids": tokens, "padding_mask": padding})
        tokens[:, position] = np.argmax(numpy(logits)[:, position - 1], -1)
        padding[:, position] = 1
    return tokens


def assert_greedy_tokens_are_keras_hubs(
    swapped, original, prompt, real=None, key="token_ids"
):
    """The swapped causal LM's greedy tokens are the original's; with `real`
    (the prompt's length), that some were generated after it (not the
    padding left as it was). Returns the original's."""
    expected = greedy_tokens(original, prompt, key)
    np.testing.assert_array_equal(greedy_tokens(swapped, prompt, key), expected)
    if real is not None:
        assert not np.array_equal(expected[:, real:], prompt[key][:, real:])
    return expected


def saved_and_loaded(model, tmp_path, x):
    """`model` saved as a `.keras` file and loaded in safe mode: of the same
    class, with the same outputs on `x`."""
    path = str(tmp_path / "swapped.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model)
    np.testing.assert_array_equal(outputs(loaded, x), outputs(model, x))
    return loaded


def assert_packed_rows_are_each_document_alone(swapped, original, atol=2e-5):
    """A row packing two documents (ids 1 and 2 in the padding mask, then
    padding) through the swapped backbone (`packed=True`) gives each
    document's outputs from keras-hub's own backbone run on it alone."""
    rng = np.random.default_rng(3)
    first, second = (rng.integers(1, VOCABULARY, (1, n)) for n in (5, 4))
    row = {
        "token_ids": np.concatenate([first, second, np.zeros((1, 3), int)], 1),
        "padding_mask": np.array([[1] * 5 + [2] * 4 + [0] * 3], "int32"),
    }
    packed = outputs(swapped, row)
    for document, where in ((first, slice(0, 5)), (second, slice(5, 9))):
        alone = {"token_ids": document, "padding_mask": np.ones_like(document)}
        np.testing.assert_allclose(
            packed[:, where], outputs(original, alone), atol=atol, rtol=0
        )


def assert_lora_applies(model, attention="self_attention"):
    """`model.enable_lora(2)` gives the query and value projections of the
    layers named `attention` their LoRA kernels; returns the trainable
    weights' paths."""
    model.enable_lora(2)
    lora = [w.path for w in model.trainable_weights]
    assert any(f"{attention}/query/lora_kernel_a" in p for p in lora)
    assert any(f"{attention}/value/lora_kernel_b" in p for p in lora)
    return lora


def assert_quantizes_like_keras_hubs(swapped, reference, x, real, atol=1e-4):
    """`quantize("int8")` of the swapped model (of `reference`) gives the
    outputs of keras-hub's own quantized `reference`; skips where
    keras-hub's own model does not quantize."""
    try:
        reference.quantize("int8")
    except TypeError as error:  # keras-hub 0.23's embedding under Keras 3.15
        pytest.skip(f"keras-hub's own model does not quantize here: {error}")
    swapped.quantize("int8")
    assert_outputs_equal(swapped, reference, x, real, atol=atol)


def assert_int8_cache(causal_lm, token_ids):
    """The cache `causal_lm` builds for `token_ids` is our quantized pair:
    int8 values and int16 scale codes."""
    _, cache = causal_lm._build_cache(token_ids)
    values, scales = cache
    assert keras.backend.standardize_dtype(values.dtype) == "int8"
    assert keras.backend.standardize_dtype(scales.dtype) == "int16"
    return values, scales


def unfused_qwen_attention(monkeypatch):
    """keras-hub's Qwen attention on its unfused path on every backend: the
    only one that applies the sliding window (its fused branch, taken on JAX
    and PyTorch, returns before the window; keras-hub 0.32)."""
    from keras_hub.src.models.qwen import qwen_attention
    from keras_hub.src.models.qwen3 import qwen3_attention
    from keras_hub.src.models.qwen3_moe import qwen3_moe_attention
    from keras_hub.src.models.qwen_moe import qwen_moe_attention

    for module in (
        qwen_attention,
        qwen3_attention,
        qwen_moe_attention,
        qwen3_moe_attention,
    ):
        monkeypatch.setattr(module, "fused_attention_op_available", lambda: False)
