import keras
import numpy as np
import pytest

from keras_attention.models import Transformer
from tests.layer_test import assert_saved_model_matches
from tests.models.model_cases import tiny_transformer as tiny
from tests.models.seq2seq_cases import exact_match, reversal_pairs

# Detached NumPy on every backend (torch tensors that need grad refuse
# np.asarray).
numpy = keras.ops.convert_to_numpy


@pytest.mark.slow
def test_transformer_learns_to_reverse():
    inputs, target, weight = reversal_pairs(2000)
    model = tiny(hidden_dim=64, intermediate_dim=128, num_heads=4)
    # Decayed to zero: at a constant 2e-3 a late loss spike can leave the
    # model a few updates short of exact, depending on float rounding alone.
    decay = keras.optimizers.schedules.CosineDecay(2e-3, 12 * (2000 // 64))
    model.compile(
        keras.optimizers.Adam(decay),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
        jit_compile=True,
    )
    model.fit(inputs, target, sample_weight=weight, epochs=12, batch_size=64, verbose=0)
    test_inputs, test_target, _ = reversal_pairs(200, seed=1)
    generated = model.generate(test_inputs["encoder_token_ids"], max_length=9)
    assert exact_match(generated, test_target) > 0.9


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"normalize_first": True},
        {"input_positions": "learned"},
        {"share_embeddings": True},
        {"input_positions": None, "attention_positions": "rotary"},
        {"attention_positions": "alibi", "num_key_value_heads": 1},
        {"input_positions": None, "attention_positions": "relative"},
        {"chunk_size": 4, "num_key_value_heads": 1},
    ],
)
def test_cached_decode_step_matches_full_forward(options):
    inputs, _, _ = reversal_pairs(3)
    model = tiny(**options)
    logits = numpy(model(inputs))
    cache = model.initial_cache(inputs["encoder_token_ids"], 9)
    for t in range(5):
        step_logits, cache = model.decode_step(
            inputs["decoder_token_ids"][:, t], cache, t
        )
        np.testing.assert_allclose(numpy(step_logits), logits[:, t], atol=1e-4)


def test_beam_width_one_equals_greedy():
    inputs, _, _ = reversal_pairs(6)
    model = tiny()
    np.testing.assert_array_equal(
        model.generate(inputs["encoder_token_ids"], 7, beam_width=1),
        model.generate(inputs["encoder_token_ids"], 7, beam_width=1, jit_compile=False),
    )


def test_attention_weights_shape_and_padding():
    inputs, _, _ = reversal_pairs(2)
    weights = numpy(
        tiny().attention_weights(
            inputs["encoder_token_ids"], inputs["decoder_token_ids"]
        )
    )
    assert weights.shape == (2, 9, 8)
    np.testing.assert_allclose(numpy(weights).sum(-1), 1.0, atol=1e-5)
    padded = inputs["encoder_token_ids"] == 0
    assert np.all(weights[np.broadcast_to(padded[:, None], weights.shape)] == 0)


def test_save_and_load_keep_outputs(tmp_path):
    inputs, _, _ = reversal_pairs(4)
    model = tiny()
    loaded = assert_saved_model_matches(model, inputs, tmp_path, atol=1e-5)
    np.testing.assert_array_equal(
        loaded.generate(inputs["encoder_token_ids"], 5, beam_width=2),
        model.generate(inputs["encoder_token_ids"], 5, beam_width=2),
    )


BLOCK_OPTIONS = [
    pytest.param(
        {
            "input_positions": None,
            "attention_positions": "rotary",
            "num_key_value_heads": 1,
            "chunk_size": 4,
        },
        marks=pytest.mark.slow,
    ),
    pytest.param(
        {"attention_positions": "alibi", "num_key_value_heads": 1, "chunk_size": 4},
        marks=pytest.mark.slow,
    ),
    {"input_positions": None, "attention_positions": "relative"},
]


@pytest.mark.parametrize(
    "options", BLOCK_OPTIONS, ids=["rotary-gqa-chunked", "alibi-gqa-chunked", "t5"]
)
def test_blocks_get_the_attention_options_and_the_file_keeps_them(options, tmp_path):
    inputs, _, _ = reversal_pairs(4)
    model = tiny(**options)
    config = model.get_config()
    want = {
        "input_positions": "sinusoidal",
        "num_key_value_heads": None,
        "chunk_size": None,
        **options,
    }
    for name, value in want.items():
        assert config[name] == value
    assert "position_encoding" not in config
    for block in (*model.encoder_blocks, *model.decoder_blocks):
        assert block.attention_positions == options["attention_positions"]
        assert block.num_key_value_heads == want["num_key_value_heads"]
        assert block.chunk_size == want["chunk_size"]
        assert block.self_attention.attention_positions == block.attention_positions
    # Cross-attention reads the encoder's output, whose positions are its own.
    assert model.decoder_blocks[0].cross_attention.attention_positions is None
    heads = options.get("num_key_value_heads") or model.num_heads
    cache = model.initial_cache(inputs["encoder_token_ids"], 9)
    assert cache["self_attention"][0].shape[3] == heads
    loaded = assert_saved_model_matches(model, inputs, tmp_path, atol=1e-5)
    np.testing.assert_array_equal(
        loaded.generate(inputs["encoder_token_ids"], 5),
        model.generate(inputs["encoder_token_ids"], 5),
    )


def test_transformer_base_preset_has_the_paper_sizes():
    model = Transformer.from_preset(
        "transformer_base", source_vocabulary_size=100, target_vocabulary_size=100
    )
    assert (model.hidden_dim, model.num_heads, model.intermediate_dim) == (512, 8, 2048)
    assert len(model.encoder_blocks) == len(model.decoder_blocks) == 6


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_generate(policy):
    keras.config.set_dtype_policy(policy)
    inputs, _, _ = reversal_pairs(3)
    model = tiny()
    assert np.all(np.isfinite(numpy(model(inputs)).astype("float32")))
    assert numpy(
        model.generate(inputs["encoder_token_ids"], 4, beam_width=2)
    ).shape == (3, 4)


def test_bad_configs_raise_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        tiny(hidden_dim=30, num_heads=4)
    with pytest.raises(ValueError, match="joint vocabulary"):
        Transformer(10, 12, share_embeddings=True)
    with pytest.raises(ValueError, match="preset"):
        Transformer.from_preset("transformer_huge", source_vocabulary_size=5)
    with pytest.raises(ValueError, match="Unknown `input_positions`: 'rotary'"):
        tiny(input_positions="rotary")
    with pytest.raises(ValueError, match="Unknown `attention_positions`: 'learned'"):
        tiny(attention_positions="learned")
    with pytest.raises(ValueError, match="`num_key_value_heads` must divide"):
        tiny(num_key_value_heads=3)
    with pytest.raises(ValueError, match="`chunk_size` must be a positive integer"):
        tiny(chunk_size=0)


def test_generating_past_the_target_positions_is_refused():
    inputs, _, _ = reversal_pairs(2)
    model = tiny()
    with pytest.raises(ValueError, match="max_target_length=.*received max_length="):
        model.generate(inputs["encoder_token_ids"], model.max_target_length + 1)
