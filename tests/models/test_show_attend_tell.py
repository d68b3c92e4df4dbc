import keras
import numpy as np
import pytest

from keras_attention.models import ShowAttendTell
from keras_attention.models.show_attend_tell import DoublyStochasticPenalty
from tests.layer_test import assert_saved_model_matches
from tests.models.model_cases import CAPTION_VOCABULARY as VOCABULARY
from tests.models.model_cases import IMAGE_SHAPE, captioner

# Detached NumPy on every backend (torch tensors that need grad refuse
# np.asarray).
numpy = keras.ops.convert_to_numpy


LOCATIONS = 4 * 4  # two pooling stages: a 4x4 grid


def batch(size=3, length=4, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.random((size, *IMAGE_SHAPE)).astype("float32")
    tokens = rng.integers(4, VOCABULARY, (size, length)).astype("int32")
    tokens[:, 0] = 2
    tokens[-1, 2:] = 0  # a shorter caption
    return {"images": images, "decoder_token_ids": tokens}


@pytest.mark.parametrize("attention", [True, False])
def test_logits_shape(attention):
    inputs = batch()
    logits = captioner(attention=attention)(inputs)
    assert logits.shape == (3, 4, VOCABULARY)


def test_attention_weights_sum_to_one_over_locations():
    model = captioner()
    inputs = batch()
    weights = numpy(
        model.attention_weights(inputs["images"], inputs["decoder_token_ids"])
    )
    assert weights.shape == (3, 4, LOCATIONS)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert model.grid_shape == (4, 4)


@pytest.mark.parametrize("beam_width", [1, 3])
def test_generate_returns_the_attention_of_every_word(beam_width):
    model = captioner()
    images = batch()["images"]
    tokens, weights = model.generate(
        images, max_length=5, beam_width=beam_width, return_attention=True
    )
    tokens, weights = numpy(tokens), numpy(weights)
    assert tokens.shape == (3, 5) and tokens.dtype == np.int32
    assert weights.shape == (3, 5, LOCATIONS)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    # Re-reading the chosen tokens gives the search's own steps: the first
    # token's logits come from the initial state, whatever was generated.
    again = model.generate(images, max_length=5, beam_width=beam_width)
    np.testing.assert_array_equal(numpy(again), tokens)


def test_greedy_generation_follows_the_teacher_forced_argmax():
    model = captioner()
    images = batch()["images"]
    tokens = numpy(model.generate(images, max_length=4))
    decoder_ids = np.concatenate([np.full((3, 1), 2), tokens[:, :-1]], axis=1)
    logits = numpy(model({"images": images, "decoder_token_ids": decoder_ids}))
    first = logits[:, 0].argmax(-1)
    np.testing.assert_array_equal(tokens[:, 0], first)
    for row in range(3):
        for t in range(1, 4):
            if tokens[row, t - 1] in (0, 3):
                break
            assert tokens[row, t] == logits[row, t].argmax()


def test_doubly_stochastic_penalty_counts_real_steps_only():
    rng = np.random.default_rng(0)
    weights = rng.random((2, 3, 4)).astype("float32")
    weights /= weights.sum(-1, keepdims=True)
    token_ids = np.array([[2, 5, 6], [2, 7, 0]])
    layer = DoublyStochasticPenalty(0.5)
    logits = np.ones((2, 3, 5), "float32")
    out = layer(logits, weights, token_ids)
    np.testing.assert_array_equal(numpy(out), logits)
    coverage = [weights[0].sum(0), weights[1, :2].sum(0)]
    expected = 0.5 * sum(((1 - c) ** 2).sum() for c in coverage) / 6
    np.testing.assert_allclose(float(layer.losses[0]), expected, rtol=1e-5)


def test_the_penalty_enters_the_training_loss():
    inputs = batch()
    targets = np.roll(inputs["decoder_token_ids"], -1, axis=1)
    losses = {}
    for strength in (0.0, 1.0):
        keras.utils.set_random_seed(0)
        model = captioner(doubly_stochastic=strength)
        model.compile(
            "sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        losses[strength] = model.evaluate(inputs, targets, verbose=0)
    assert losses[1.0] > losses[0.0] + 1.0


def test_gate_scales_the_context_into_zero_one():
    model = captioner()
    gate = model.cell.gate_dense
    # beta_t = sigmoid(w^T h + b): one sigmoid unit of the decoder state.
    assert isinstance(gate, keras.layers.Dense) and gate.units == 1
    assert gate.activation is keras.activations.sigmoid
    assert tuple(gate.kernel.shape) == (model.units, 1)
    inputs = batch()
    states = model.initial_cache(inputs["images"])
    embedded = model.embedding(inputs["decoder_token_ids"][:, 0])
    output, _, _ = model.cell.step(embedded, states)
    # Closing the gate removes the context from the output.
    gate.bias.assign(np.full((1,), -1e4, "float32"))
    closed, _, _ = model.cell.step(embedded, states)
    context = numpy(closed)[:, model.units :]
    np.testing.assert_allclose(context, 0.0, atol=1e-6)
    assert np.abs(numpy(output)[:, model.units :]).max() > 1e-4


@pytest.mark.parametrize("attention", [True, False])
def test_save_and_load_in_safe_mode(tmp_path, attention):
    pytest.importorskip("keras_hub", reason="the tokenizer is keras-hub's")
    from keras_attention.data import train_word_piece

    tokenizer = train_word_piece(["a bag above a shirt"] * 5, 20, lowercase=True)
    model = captioner(attention=attention, tokenizer=tokenizer)
    inputs = batch()
    loaded = assert_saved_model_matches(model, inputs, tmp_path)
    np.testing.assert_array_equal(
        numpy(loaded.generate(inputs["images"])),
        numpy(model.generate(inputs["images"])),
    )
    assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_under_xla(policy):
    keras.config.set_dtype_policy(policy)
    model = captioner()
    inputs = batch()
    targets = np.roll(inputs["decoder_token_ids"], -1, axis=1)
    model.compile(
        "adam",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    history = model.fit(inputs, targets, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    tokens, weights = model.generate(inputs["images"], return_attention=True)
    np.testing.assert_allclose(numpy(weights).astype("float32").sum(-1), 1.0, atol=1e-2)


def test_bad_image_shape_is_a_clear_error():
    model = captioner()
    with pytest.raises(
        ValueError, match=r"\(batch, 16, 16, 1\); received \(2, 8, 8, 1\)"
    ):
        model.generate(np.zeros((2, 8, 8, 1), "float32"))
    with pytest.raises(ValueError, match=r"received \(16, 16, 1\)"):
        model.generate(np.zeros((16, 16, 1), "float32"))
    with pytest.raises(ValueError, match="expected shape=\\(None, 16, 16, 1\\)"):
        model({"images": np.zeros((2, 8, 8, 1)), "decoder_token_ids": np.ones((2, 3))})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_shape": (18, 16, 1)}, "multiples of 4"),
        ({"image_shape": (16, 16)}, "height, width, channels"),
        ({"encoder_filters": ()}, "at least one stage"),
        ({"encoder_filters": (4, 0)}, "encoder_filters"),
        ({"doubly_stochastic": -1.0}, "doubly_stochastic"),
        ({"dropout": 1.5}, "dropout"),
        ({"units": 0}, "units"),
    ],
)
def test_bad_config_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        captioner(**kwargs)


def test_no_attention_model_has_no_attention_weights():
    model = captioner(attention=False)
    inputs = batch()
    with pytest.raises(ValueError, match="attention=False"):
        model.attention_weights(inputs["images"], inputs["decoder_token_ids"])


@pytest.mark.slow
@pytest.mark.needs_package("dataset-fashion-mnist")
def test_a_tiny_model_overfits_a_handful_of_scenes():
    """The model learns: eight real scenes, one caption each, memorized well
    enough that greedy decoding reproduces most captions word for word."""
    from keras_attention.data import (
        compose_scenes,
        encode_captions,
        load_fashion_mnist,
        train_word_piece,
    )
    from keras_attention.tasks.caption import words_of

    images, labels = load_fashion_mnist("test")
    scenes = compose_scenes(images[:500], labels[:500], 8, max_items=2, seed=0)
    captions = [c[0] for c in scenes.captions]
    tokenizer = train_word_piece(captions * 20, 100, lowercase=True)
    ids = encode_captions([[c] for c in captions], tokenizer, 12)[:, 0]
    targets = ids[:, 1:]
    model = ShowAttendTell(
        tokenizer.vocabulary_size(),
        encoder_filters=(8, 16, 32),
        units=64,
        embedding_dim=16,
        attention_units=16,
        dropout=0.0,
        max_caption_length=11,
        tokenizer=tokenizer,
    )
    model.compile(
        keras.optimizers.Adam(3e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    # 400 steps on the same batch of the eight scenes, as 8 epochs of 50
    # copies in order rather than 400 epochs of one step (Keras' cost per
    # epoch was most of this test's time).
    copies = 50
    model.fit(
        {
            "images": np.tile(scenes.images, (copies, 1, 1, 1)),
            "decoder_token_ids": np.tile(ids[:, :-1], (copies, 1)),
        },
        np.tile(targets, (copies, 1)),
        sample_weight=np.tile(targets != 0, (copies, 1)).astype("float32"),
        batch_size=8,
        epochs=8,
        shuffle=False,
        verbose=0,
    )
    generated = [
        words_of(tokenizer, row) for row in numpy(model.generate(scenes.images))
    ]
    assert sum(g == c for g, c in zip(generated, captions, strict=True)) >= 7, list(
        zip(generated, captions, strict=True)
    )
