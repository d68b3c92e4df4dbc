"""keras-hub's T5Gemma and T5Gemma 2 with our attention: the same encoder
and decoder outputs, caches and greedy tokens as keras-hub's own models,
the windows (keras-hub's and the reference's), the chunked path in every
attention, T5Gemma 2's merged attention, saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
if not hasattr(keras_hub.models, "T5Gemma2Backbone"):
    # The file tests both families (and their shared adapter code).
    pytest.skip(
        f"keras-hub {keras_hub.__version__} has no T5Gemma 2",
        allow_module_level=True,
    )

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    family_of,
    swap_attention,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402
from keras_attention.integrations.keras_hub.t5gemma import (  # noqa: E402
    T5GemmaAttention,
)
from keras_attention.integrations.keras_hub.t5gemma2 import (  # noqa: E402
    T5Gemma2Attention,
    T5Gemma2MergedAttention,
)
from tests.conftest import trainable_gradients  # noqa: E402
from tests.integrations.keras_hub_models import (  # noqa: E402
    GEMMA_VOCABULARY,
    T5GEMMA,
    assert_lora_applies,
    assert_weights_are_keras_hubs,
    numpy,
    tiny_backbone,
    tiny_causal_lm,
)

NAMES = ["t5gemma", "t5gemma2"]


def inputs(encoder=10, decoder=9, encoder_real=(10, 7), decoder_real=(9, 6)):
    """Random token ids of a batch of two for the encoder and the decoder,
    each row's first `*_real` tokens real and the rest padding."""
    rng = np.random.default_rng(1)
    x = {}
    for part, length, real in (
        ("encoder", encoder, encoder_real),
        ("decoder", decoder, decoder_real),
    ):
        padding = (np.arange(length)[None] < np.array(real)[:, None]).astype("int32")
        token_ids = rng.integers(1, GEMMA_VOCABULARY, (2, length)).astype("int32")
        x[f"{part}_token_ids"] = token_ids * padding
        x[f"{part}_padding_mask"] = padding
    return x


def outputs(model, x):
    """The encoder's and the decoder's outputs at their real positions."""
    result = model(x)
    return [
        numpy(result[f"{part}_sequence_output"])[x[f"{part}_padding_mask"] == 1]
        for part in ("encoder", "decoder")
    ]


def assert_outputs_equal(swapped, original, x, atol=2e-5):
    expected = outputs(original, x)
    for got, want in zip(outputs(swapped, x), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=atol)
    return expected


def attention_layers(backbone):
    """Every attention layer of the backbone: the encoder's self-attentions,
    then per decoder block its self- and cross-attention (T5Gemma) or its
    merged attention (T5Gemma 2)."""
    layers = [block.self_attn for block in backbone.encoder_layers]
    for block in backbone.decoder_layers:
        if hasattr(block, "merged_attn"):
            layers.append(block.merged_attn)
        else:
            layers.extend([block.self_attn, block.cross_attn])
    return layers


@pytest.mark.parametrize("name", NAMES)
def test_outputs_weights_and_layers_are_keras_hubs(name):
    original = tiny_backbone(name)
    swapped = swap_attention(original)
    assert family_of(type(original)) is swapped.family
    assert isinstance(swapped, type(original)) and type(swapped) is not type(original)
    ours = {
        "t5gemma": {T5GemmaAttention},
        "t5gemma2": {T5Gemma2Attention, T5Gemma2MergedAttention},
    }[name]
    assert {type(a) for a in attention_layers(swapped)} == ours
    assert_weights_are_keras_hubs(swapped, original)
    assert_outputs_equal(swapped, original, inputs())


def test_t5gemma2_norms_follow_the_output_projection():
    # keras-hub builds the query/key norms after the output projection.
    swapped = swap_attention(tiny_backbone("t5gemma2"))
    for layer in attention_layers(swapped)[1:3]:
        names = [w.path.split("/")[-2] for w in layer.weights]
        assert names == [
            "query",
            "query",
            "key",
            "key",
            "value",
            "value",
            "attention_output",
            "attention_output",
            "query_norm",
            "key_norm",
        ]


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("t5gemma", {"decoder_layer_types": ["full_attention"] * 2}),
        ("t5gemma2", {"encoder_layer_types": ["full_attention"] * 2}),
        ("t5gemma2", {"decoder_layer_types": ["full_attention"] * 2}),
        ("t5gemma2", {"attn_logit_softcapping": None}),
    ],
    ids=["t5gemma_decoder_window", "encoder_window", "decoder_window", "soft_cap"],
)
def test_what_the_comparisons_see_changes_keras_hubs_outputs(name, change):
    x = inputs(encoder=12, decoder=12, encoder_real=(12, 12), decoder_real=(12, 12))
    changed = outputs(tiny_backbone(name, **change), x)
    difference = max(
        np.abs(a - b).max()
        for a, b in zip(outputs(tiny_backbone(name), x), changed, strict=True)
    )
    assert difference > 1e-2


@pytest.mark.parametrize("name", NAMES)
def test_every_attention_takes_the_chunked_path(name):
    original = tiny_backbone(name)
    swapped = swap_attention(original, chunk_size=8)
    x = inputs(encoder=40, decoder=36, encoder_real=(40, 33), decoder_real=(36, 30))
    assert_outputs_equal(swapped, original, x)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_blocks_hand_the_attention_the_mask_parts():
    x = keras.ops.ones((2, 5, 16))
    padding = keras.ops.ones((2, 5), "int32")
    for name in NAMES:
        backbone = swap_attention(tiny_backbone(name))
        mask = backbone.encoder_layers[0]._make_attention_mask(x, padding)
        assert isinstance(mask, DecoderMask) and not mask.causal
        assert mask.padding_mask is padding and mask.attention_mask is None
    decoder = swap_attention(tiny_backbone("t5gemma")).decoder_layers[0]
    own = decoder._make_self_attention_mask(x, padding)
    cross = decoder._make_cross_attention_mask(x, padding)
    assert isinstance(own, DecoderMask) and own.causal
    assert isinstance(cross, DecoderMask) and not cross.causal


@pytest.mark.parametrize("name", NAMES)
def test_greedy_generate_gives_keras_hubs_tokens_and_caches(name):
    original = tiny_causal_lm(name)
    swapped = swap_attention(original)
    assert type(swapped) is type(original)
    # Decoder prompts of 3 and 2 tokens; the second encoder row padded.
    prompt = inputs(decoder=12, decoder_real=(3, 2))
    prompt["decoder_token_ids"][:, 0] = 2
    x = {key: keras.ops.convert_to_tensor(value) for key, value in prompt.items()}
    expected_cache = original._build_cache(**x)[1]
    cache = swapped._build_cache(**x)[1]
    # keras-hub's structure: per decoder layer, its self- and cross-attention
    # caches `(B, layers, 2, S, N_kv, head_dim)`. The slots of padding
    # differ (a windowed padded query sees no key: zeros here), and no
    # query reads them (decoding overwrites the decoder's first).
    parts = ("decoder", "encoder")
    for got, want, part in zip(cache, expected_cache, parts, strict=True):
        assert tuple(got.shape) == tuple(want.shape)
        real = prompt[f"{part}_padding_mask"] == 1
        got, want = (numpy(c).transpose(0, 3, 1, 2, 4, 5)[real] for c in (got, want))
        np.testing.assert_allclose(got, want, atol=2e-5)
    tokens = {}
    for key, model in (("original", original), ("swapped", swapped)):
        model.compile(sampler="greedy")
        result = model.generate(prompt, stop_token_ids=None)
        tokens[key] = numpy(result["decoder_token_ids"])
    np.testing.assert_array_equal(tokens["swapped"], tokens["original"])
    assert not np.array_equal(
        tokens["original"][:, 3:], prompt["decoder_token_ids"][:, 3:]
    )


def test_t5gemma_paper_windows():
    # The decoder's `w` keys: keras-hub's model of window w - 1 (whose
    # decoder keeps w keys) where the encoder has no window.
    full_encoder = {"encoder_layer_types": ["full_attention"] * 2}
    original = tiny_backbone("t5gemma", sliding_window=2, **full_encoder)
    swapped = swap_attention(
        tiny_backbone("t5gemma", **full_encoder), sliding_window_keys="paper"
    )
    assert_outputs_equal(swapped, original, inputs())
    assert swapped.decoder_layers[0].self_attn.sliding_window == 3
    assert swapped.decoder_layers[1].self_attn.sliding_window is None
    with pytest.raises(ValueError, match="sliding_window_keys"):
        swap_attention(original, sliding_window_keys="hugging_face")


def test_t5gemma_paper_encoder_window_is_the_references_band():
    # The reference's encoder window: query i attends to keys |i - j| < 3.
    swapped = swap_attention(tiny_backbone("t5gemma"), sliding_window_keys="paper")
    ours = swapped.encoder_layers[0].self_attn
    reference = keras_hub.models.T5GemmaBackbone(**T5GEMMA).encoder_layers[0]
    reference = reference.self_attn
    for weight, value in zip(reference.weights, ours.weights, strict=True):
        weight.assign(value)
    x = keras.random.normal((2, 8, 16), seed=3)
    padding = np.ones((2, 8), "int32")
    padding[1, 6:] = 0
    positions = np.arange(8)
    band = np.abs(positions[:, None] - positions[None, :]) < 3
    allowed = band[None, None] & (padding[:, None, None, :] == 1)
    additive = np.where(allowed, 0.0, -1e9).astype("float32")
    want, _ = reference(x, attention_mask=additive)
    got, _ = ours(x, attention_mask=DecoderMask(padding, causal=False))
    np.testing.assert_allclose(numpy(got)[0], numpy(want)[0], atol=2e-5)
    np.testing.assert_allclose(numpy(got)[1, :6], numpy(want)[1, :6], atol=2e-5)


def test_int8_cache_is_refused_for_the_seq2seq_tasks():
    with pytest.raises(ValueError, match="cache_dtype='int8'"):
        swap_attention(tiny_causal_lm("t5gemma"), cache_dtype="int8")


@pytest.mark.parametrize("name", NAMES)
def test_saves_and_loads_in_safe_mode_with_our_attention(name, tmp_path):
    swapped = swap_attention(tiny_backbone(name), chunk_size=8)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    assert loaded.attention_options == {"chunk_size": 8}
    assert all(a.chunk_size == 8 for a in attention_layers(loaded))
    x = inputs()
    for got, want in zip(outputs(loaded, x), outputs(swapped, x), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("name", "attention"),
    [("t5gemma", "cross_attention"), ("t5gemma2", "merged_attention")],
)
def test_lora_and_quantization_apply_after_the_swap(name, attention):
    assert_lora_applies(swap_attention(tiny_backbone(name)), attention=attention)
    reference = tiny_backbone(name)
    swapped = swap_attention(reference)
    reference.quantize("int8")
    swapped.quantize("int8")
    assert_outputs_equal(swapped, reference, inputs(), atol=1e-4)


def test_t5gemma2_encoder_padding_holding_nan_reaches_no_output_or_gradient():
    # The merged attention calls the op itself: the encoder's padding is
    # zeroed before the cross projections, as our layer's call does.
    from keras_attention.integrations.keras_hub.t5gemma2 import MergedMask

    merged = swap_attention(tiny_backbone("t5gemma2")).decoder_layers[0].merged_attn
    rng = np.random.default_rng(0)
    width = T5GEMMA["decoder_hidden_dim"]
    decoder = rng.normal(size=(2, 5, width)).astype("float32")
    encoder = rng.normal(size=(2, 6, width)).astype("float32")
    encoder[:, 4:] = np.nan
    mask = MergedMask(np.ones((2, 5), "int32"), np.array([[1] * 4 + [0] * 2] * 2))

    def loss():
        output, _ = merged(decoder, encoder, attention_mask=mask)
        return keras.ops.sum(output)

    assert np.isfinite(numpy(loss()))
    gradients = trainable_gradients(merged.trainable_weights, loss)
    assert all(np.isfinite(g).all() for g in gradients)
