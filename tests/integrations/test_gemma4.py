"""keras-hub's Gemma 4 with our attention: the same outputs and greedy
tokens as keras-hub's own models (windows, global layers of their own head
size with keys as values and a partial rotary embedding, layers sharing
another's keys and values), its assistant draft and speculative decoding,
the chunked path, saving, weight order, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
pytest.importorskip("keras_hub.src.models.gemma4")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    family_of,
    swap_attention,
)
from keras_attention.integrations.keras_hub.gemma4 import (  # noqa: E402
    Gemma4Attention,
)
from keras_attention.integrations.keras_hub.gemma4_cache import (  # noqa: E402
    pack,
    unpack,
)
from keras_attention.integrations.keras_hub.generation import (  # noqa: E402
    cache_bytes,
    quantized_cache_class,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask  # noqa: E402
from keras_attention.layers.key_value_cache import dequantize_rows  # noqa: E402
from tests.integrations.keras_hub_models import (  # noqa: E402
    GEMMA_VOCABULARY,
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
    tiny_backbone,
    tiny_causal_lm,
)
from tests.integrations.keras_hub_models import (  # noqa: E402
    inputs as token_inputs,
)

# float32 sums over six blocks whose outputs reach about 4.
ATOL = 1e-4


def backbone(**overrides):
    return tiny_backbone("gemma4", **overrides)


def inputs(length=12, real=9, **kwargs):
    """Token ids and padding over Gemma's vocabulary, and the positions
    keras-hub's Gemma 4 backbone takes."""
    x = token_inputs(
        length=length,
        real=real,
        vocabulary_size=GEMMA_VOCABULARY,
        dtype="int32",
        **kwargs,
    )
    batch = x["token_ids"].shape[0]
    x["position_ids"] = np.tile(np.arange(length, dtype="int32"), (batch, 1))
    return x


def prompt(length=14, real=5, ragged=True, seed=1):
    """Prompts of `real` tokens and, `ragged`, one of 3 (keras-hub keeps the
    longer one's cache entries while the shorter one's row generates)."""
    x = token_inputs(
        length=length,
        real=real,
        vocabulary_size=GEMMA_VOCABULARY,
        dtype="int32",
        seed=seed,
    )
    if ragged:
        x["padding_mask"][1, 3:] = 0
    x["token_ids"][x["padding_mask"] == 0] = 0
    return x


def tiny_assistant():
    """keras-hub's assistant draft of three layers (two windowed, a global
    one), all sharing the target's keys and values, for the tiny target
    (hidden size 16), with random weights and token ordering."""
    keras.utils.set_random_seed(1)
    draft = keras_hub.models.Gemma4Backbone(
        vocabulary_size=GEMMA_VOCABULARY,
        image_size=16,
        num_layers=3,
        num_query_heads=4,
        num_key_value_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        head_dim=8,
        global_head_dim=16,
        num_global_key_value_heads=1,
        global_rope_partial_rotary_factor=0.25,
        sliding_window_size=3,
        sliding_window_pattern=3,
        num_kv_shared_layers=3,
    )
    assistant = keras_hub.models.Gemma4AssistantCausalLM(
        backbone=draft,
        backbone_hidden_size=16,
        num_centroids=4,
        centroid_intermediate_top_k=2,
        use_ordered_embeddings=True,
    )
    randomize(assistant, 0.5, 1.0, which=lambda w: "token_ordering" not in w.path)
    order = np.random.default_rng(3).permutation(GEMMA_VOCABULARY)
    assistant.token_ordering.assign(order.astype("float32"))
    return assistant


def test_backbone_outputs_and_weights_are_keras_hubs():
    original = backbone()
    assert family_of(type(original)).name == "Gemma 4"
    swapped = swap_attention(original)
    layers = attention_layers(swapped)
    assert all(type(a) is Gemma4Attention for a in layers)
    assert_weights_are_keras_hubs(swapped, original)
    assert_outputs_equal(swapped, original, inputs(), 9, atol=ATOL)
    # Layers 4 and 5 share the keys and values of 3 and 2 (no projections);
    # the global layers 2 and 5 have heads of 16, one key/value head, and
    # layer 2 takes its values from its keys.
    assert [a._options["shares_keys_values"] for a in layers] == [False] * 4 + [
        True
    ] * 2
    assert [a._options["values_from_keys"] for a in layers] == [
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    assert [(a.key_dim, a.num_key_value_heads) for a in layers][2::3] == [(16, 1)] * 2
    assert [a.sliding_window for a in layers] == [3, 3, None] * 2
    names = [w.path.split("/")[-2] for w in layers[2].weights]
    assert names == ["query", "key", "key_norm", "query_norm", "attention_output"]


@pytest.mark.parametrize(
    "change",
    [
        {"sliding_window_size": 64},
        {"num_kv_shared_layers": 0},
        {"global_rope_partial_rotary_factor": 1.0},
    ],
    ids=["window", "sharing", "partial_rotary"],
)
def test_what_the_comparisons_see_changes_keras_hubs_outputs(change):
    x = inputs()
    difference = outputs(backbone(), x, 9) - outputs(backbone(**change), x, 9)
    assert np.abs(difference).max() > 1e-2


def test_positions_reach_the_rotary_embedding():
    original = backbone()
    swapped = swap_attention(original)
    x = inputs()
    # Rotary scores see differences of positions: twice as far apart.
    x["position_ids"] = x["position_ids"] * 2
    expected = assert_outputs_equal(swapped, original, x, 9, atol=ATOL)
    assert np.abs(expected - outputs(original, inputs(), 9)).max() > 1e-2


def test_chunked_path_with_sharing_and_windows():
    original = backbone()
    swapped = swap_attention(original, chunk_size=8)
    x = inputs(length=40, real=35)
    # 40 positions: TensorFlow's float32 sums differ from keras-hub's by up
    # to 4e-4 on our standard path too (outputs reach 4.3).
    assert_outputs_equal(swapped, original, x, 35, atol=1e-3)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_packed_documents_equal_each_document_alone():
    # Two documents in a row (padding ids 1 and 2): each attends to its own
    # keys, the layers sharing keys and values too, with rotary positions
    # restarted at each document; keras-hub's positions run on.
    original = backbone()
    swapped = swap_attention(original, packed=True)
    rng = np.random.default_rng(3)
    first = rng.integers(1, GEMMA_VOCABULARY, (1, 5)).astype("int32")
    second = rng.integers(1, GEMMA_VOCABULARY, (1, 4)).astype("int32")
    row = {
        "token_ids": np.concatenate([first, second, np.zeros((1, 3), "int32")], 1),
        "padding_mask": np.array([[1] * 5 + [2] * 4 + [0] * 3], "int32"),
        "position_ids": np.arange(12, dtype="int32")[None],
    }
    packed = numpy(swapped(row))
    for document, where in ((first, slice(0, 5)), (second, slice(5, 9))):
        length = document.shape[1]
        alone = original(
            {
                "token_ids": document,
                "padding_mask": np.ones_like(document),
                "position_ids": np.arange(length, dtype="int32")[None],
            }
        )
        # Float32 sums in another order (the documents' mask): within 2e-4.
        np.testing.assert_allclose(packed[:, where], numpy(alone), atol=2e-4)
    # keras-hub's own model reads the row as one document.
    together = numpy(original({**row, "padding_mask": row["padding_mask"] > 0}))
    assert np.abs(together[:, 5:9] - packed[:, 5:9]).max() > 1e-2


def test_bidirectional_embedding_model_outputs_equal_keras_hubs():
    # Every query attends to all keys: sums over more terms, float32.
    original = backbone(use_bidirectional_attention=True)
    assert_outputs_equal(swap_attention(original), original, inputs(), 9, atol=5e-4)


def test_a_dense_mask_keeps_keras_hubs_window_and_images_both_ways():
    # keras-hub's mask where images attend both ways: (causal and window)
    # or same image. The swapped layer takes it as it is (no window again).
    original = backbone(use_vision_bidirectional_attention=True)
    swapped = swap_attention(original)
    block, ours = original.transformer_layers[0], swapped.transformer_layers[0]
    x = keras.random.normal((2, 8, 16), seed=1)
    padding = np.ones((2, 8), "int32")
    vision = np.zeros((2, 8), "int32")
    vision[:, 1:7] = 1
    mask = block._compute_attention_mask(x, padding, vision, None, 0)
    assert numpy(mask)[0, 1, 6]  # an image token 5 ahead, beyond the window
    dense = ours._compute_attention_mask(x, padding, vision, None, 0)
    assert not isinstance(dense, DecoderMask)
    expected, _ = block.attention(x, attention_mask=mask)
    got, _ = ours.attention(x, attention_mask=mask)
    np.testing.assert_allclose(numpy(got), numpy(expected), atol=2e-5)
    assert ours.attention.sliding_window == 3


def test_greedy_generate_gives_keras_hubs_tokens():
    original = tiny_causal_lm("gemma4")
    swapped = swap_attention(original)
    assert type(swapped) is type(original)
    assert_greedy_tokens_are_keras_hubs(swapped, original, prompt(), real=5)


def test_assistant_draft_step_equals_keras_hubs():
    assistant = tiny_assistant()
    swapped = swap_attention(assistant)
    assert type(swapped) is type(assistant)
    assert_weights_are_keras_hubs(swapped, assistant)
    layers = attention_layers(swapped.backbone)
    assert all(a._options["shares_keys_values"] for a in layers)
    # The target's cache (6 layers, max head size 16) read at layers 2
    # (global) and 3 (windowed), at position 9 of 14.
    rng = np.random.default_rng(5)
    cache = rng.normal(size=(2, 6, 2, 14, 2, 16)).astype("float32")
    embedding, hidden = rng.normal(size=(2, 2, 1, 16)).astype("float32")
    arguments = {"target_kv_source_full_idx": 2, "target_kv_source_local_idx": 3}
    expected = assistant.call_with_cache(embedding, hidden, cache, 9, **arguments)
    got = swapped.call_with_cache(embedding, hidden, cache, 9, **arguments)
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(numpy(ours), numpy(theirs), atol=2e-5)


def test_speculative_generate_with_the_assistant_gives_keras_hubs_tokens():
    original = tiny_causal_lm("gemma4")
    assistant = tiny_assistant()
    # Swapped first: keras-hub's `generate` keeps the assistant it was given
    # (its weights then count among the target's).
    swapped, swapped_assistant = swap_attention(original), swap_attention(assistant)
    # keras-hub's speculative sampler starts every row after the shortest
    # prompt (keras-hub 0.32): prompts of one length.
    x = prompt(ragged=False)
    expected = original.generate(x, stop_token_ids=None, assistant_model=assistant)
    expected = numpy(expected["token_ids"])
    got = swapped.generate(x, stop_token_ids=None, assistant_model=swapped_assistant)
    np.testing.assert_array_equal(numpy(got["token_ids"]), expected)
    # Greedy speculative decoding keeps the target's own greedy tokens.
    plain = numpy(original.generate(x, stop_token_ids=None)["token_ids"])
    np.testing.assert_array_equal(expected, plain)
    assert not np.array_equal(expected[:, 5:], x["token_ids"][:, 5:])


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=16)
    loaded = saved_and_loaded(swapped, tmp_path, inputs())
    assert loaded.attention_options == {"chunk_size": 16}
    assert all(a.chunk_size == 16 for a in attention_layers(loaded))


def test_keras_hubs_weight_files_load(tmp_path):
    original = backbone()
    path = str(tmp_path / "original.weights.h5")
    original.save_weights(path)
    swapped = swap_attention(backbone())
    for weight in swapped.weights:
        weight.assign(np.zeros(weight.shape, weight.dtype))
    swapped.load_weights(path)
    assert_outputs_equal(swapped, original, inputs(), 9, atol=ATOL)


def test_lora_and_quantization_apply_after_the_swap():
    assert_lora_applies(swap_attention(backbone()), attention="attention")
    reference = backbone()
    assert_quantizes_like_keras_hubs(
        swap_attention(reference), reference, inputs(), 9, atol=ATOL
    )


def test_blocks_hand_the_attention_the_mask_parts():
    assert_hands_the_mask_parts(
        swap_attention(backbone()), None, None, 0, method="_compute_attention_mask"
    )


def test_keras_hubs_window_method_gives_its_band():
    full = keras.ops.ones((1, 6, 6), "bool")
    original = backbone(sliding_window_size=4).transformer_layers[0].attention
    ours = swap_attention(backbone(sliding_window_size=4)).transformer_layers[0]
    for index in (0, 2):
        np.testing.assert_array_equal(
            numpy(ours.attention._mask_sliding_window(full[:, index:], index)),
            numpy(original._mask_sliding_window(full[:, index:], index)),
        )


def test_int8_cache_greedy_tokens_are_keras_hubs_and_its_bytes_fewer():
    original = tiny_causal_lm("gemma4")
    swapped = swap_attention(original, cache_dtype="int8")
    assert type(swapped) is quantized_cache_class(type(original))
    # Ragged prompts: the shorter row's steps keep the longer one's prompt
    # (keras-hub's `cache_update_mask`), in the packed cache too. The tiny
    # model's logits have near ties (gaps of 0.1 against int8 errors of
    # 0.03): prompts whose greedy tokens int8 does not flip on any backend.
    x = prompt(length=12, real=4, seed=10)
    assert_greedy_tokens_are_keras_hubs(swapped, original, x, real=4)
    _, cache = swapped._build_cache(x["token_ids"], padding_mask=x["padding_mask"])
    _, float_cache = original._build_cache(
        x["token_ids"], None, None, x["padding_mask"], None
    )
    # 6 layers, 2 key/value heads, head size 16 (the global layers'): int8
    # values and the scale code's 2 bytes per row, against 4 bytes a value.
    assert keras.backend.standardize_dtype(cache.dtype) == "int8"
    assert tuple(cache.shape) == (2, 6, 2, 12, 2, 16 + 2)
    ratio = cache_bytes(cache) / cache_bytes(float_cache)
    assert ratio == pytest.approx((16 + 2) / (16 * 4))
    # What it holds is the float cache's keys and values, quantized: the
    # global layer 2's one head of 16 and the windowed layer 0's two of 8.
    values, scales = unpack(cache)
    dequantized = numpy(dequantize_rows(values, scales))
    expected = numpy(float_cache)
    for layer, heads, size in ((0, 2, 8), (2, 1, 16)):
        got = dequantized[:, layer, :, :4, :heads, :size]
        want = expected[:, layer, :, :4, :heads, :size]
        assert 0 < np.abs(got - want).max() < 0.02 * np.abs(want).max()


def test_int8_cache_packs_every_scale_code():
    codes = np.array([-32768, -32767, -257, -256, -1, 0, 1, 255, 256, 32767])
    values = np.arange(-5, 5, dtype="int8").reshape(10, 1)
    packed = pack(values, codes.astype("int16"))
    got_values, got_codes = unpack(packed)
    np.testing.assert_array_equal(numpy(got_codes), codes)
    np.testing.assert_array_equal(numpy(got_values), values)


def test_int8_cache_refuses_speculative_decoding():
    swapped = swap_attention(tiny_causal_lm("gemma4"), cache_dtype="int8")
    assistant = swap_attention(tiny_assistant())
    with pytest.raises(ValueError, match="float cache"):
        swapped.generate(
            prompt(ragged=False), stop_token_ids=None, assistant_model=assistant
        )
