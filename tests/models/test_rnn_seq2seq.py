import keras
import numpy as np
import pytest

from keras_attention.models import RNNSeq2Seq
from keras_attention.models.rnn_seq2seq import ATTENTIONS, CELLS
from tests.layer_test import assert_saved_model_matches
from tests.models.model_cases import tiny_rnn_seq2seq as tiny
from tests.models.seq2seq_cases import exact_match, reversal_pairs

# Detached NumPy on every backend (torch tensors that need grad refuse
# np.asarray).
numpy = keras.ops.convert_to_numpy


# The attentions and cells trained under XLA, each attention once (Bahdanau's
# with the GRU: the learning test), each cell with half of them: the LSTM,
# whose state is two tensors, with a content-based score, the location-based
# one and none. (Each attention with both cells, nine runs, took twice the
# time and reached no other code.)
VARIANTS = [
    ("luong-dot", "gru"),
    ("luong-concat", "gru"),
    ("luong-general", "lstm"),
    ("location", "lstm"),
    ("none", "lstm"),
]


def compiled(model):
    model.compile(
        keras.optimizers.Adam(5e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
        jit_compile=True,
    )
    return model


@pytest.mark.slow
def test_bahdanau_model_learns_to_reverse():
    # 2,000 examples in batches of 64: the last batch is smaller, so this also
    # trains an XLA-compiled recurrent loop over a dynamic batch size.
    inputs, target, weight = reversal_pairs(2000)
    model = compiled(tiny())
    model.fit(inputs, target, sample_weight=weight, epochs=8, batch_size=64, verbose=0)
    test_inputs, test_target, _ = reversal_pairs(200, seed=1)
    generated = model.generate(test_inputs["encoder_token_ids"], max_length=9)
    assert exact_match(generated, test_target) > 0.9
    beam = model.generate(test_inputs["encoder_token_ids"], max_length=9, beam_width=3)
    assert exact_match(beam, test_target) > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("attention, cell", VARIANTS)
def test_every_variant_trains_under_xla_and_decodes(attention, cell):
    # Two full batches: one compiled train step (the dynamic batch size of a
    # last, smaller batch is test_bahdanau_model_learns_to_reverse's).
    inputs, target, weight = reversal_pairs(64)
    model = compiled(tiny(attention, decoder_cell=cell))
    history = model.fit(
        inputs, target, sample_weight=weight, epochs=2, batch_size=32, verbose=0
    )
    assert np.all(np.isfinite(history.history["loss"]))
    tokens = numpy(model.generate(inputs["encoder_token_ids"][:4], max_length=5))
    assert tokens.shape == (4, 5) and tokens.dtype == np.int32


def test_the_variants_cover_every_attention_and_cell():
    trained = {*VARIANTS, ("bahdanau", "gru")}
    assert {attention for attention, _ in trained} == set(ATTENTIONS)
    assert {cell for _, cell in trained} == set(CELLS)


@pytest.mark.parametrize("attention", ["bahdanau", "luong-general"])
def test_decode_step_matches_teacher_forcing(attention):
    inputs, _, _ = reversal_pairs(3)
    model = tiny(attention)
    logits = numpy(model(inputs))
    cache = model.initial_cache(inputs["encoder_token_ids"], 9)
    for t in range(4):
        step_logits, cache = model.decode_step(
            inputs["decoder_token_ids"][:, t], cache, t
        )
        np.testing.assert_allclose(numpy(step_logits), logits[:, t], atol=1e-5)


def test_attention_weights_are_distributions_over_real_source_tokens():
    inputs, _, _ = reversal_pairs(4)
    model = tiny()
    weights = numpy(
        model.attention_weights(
            inputs["encoder_token_ids"], inputs["decoder_token_ids"]
        )
    )
    assert weights.shape == (4, 9, 8)
    np.testing.assert_allclose(numpy(weights).sum(-1), 1.0, atol=1e-5)
    padded = inputs["encoder_token_ids"] == 0
    assert np.all(weights[np.broadcast_to(padded[:, None], weights.shape)] == 0)


@pytest.mark.slow
def test_save_and_load_keep_outputs_and_translations(tmp_path):
    inputs, target, weight = reversal_pairs(64)
    model = compiled(tiny("luong-concat"))
    model.fit(inputs, target, sample_weight=weight, epochs=1, verbose=0)
    loaded = assert_saved_model_matches(model, inputs, tmp_path, atol=1e-5)
    np.testing.assert_array_equal(
        loaded.generate(inputs["encoder_token_ids"][:5], max_length=6),
        model.generate(inputs["encoder_token_ids"][:5], max_length=6),
    )


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_forward_and_generate(policy):
    keras.config.set_dtype_policy(policy)
    inputs, _, _ = reversal_pairs(4)
    model = tiny()
    logits = numpy(model(inputs)).astype("float32")
    assert np.all(np.isfinite(logits))
    assert numpy(model.generate(inputs["encoder_token_ids"], 4)).shape == (4, 4)


def test_bad_configs_raise_clear_errors():
    with pytest.raises(ValueError, match="attention"):
        tiny("monotonic")
    with pytest.raises(ValueError, match="decoder_cell"):
        tiny(decoder_cell="rnn")
    with pytest.raises(ValueError, match="units"):
        RNNSeq2Seq(10, 10, units=0)
    with pytest.raises(ValueError, match="no attention"):
        tiny("none").attention_weights(np.ones((1, 3)), np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        tiny().generate(np.ones((3,), "int32"))
