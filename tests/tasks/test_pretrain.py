import json

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.data.bible import BIBLE_PACKAGE
from keras_attention.data.messages import MESSAGE_PACKAGES
from keras_attention.models import TransformerClassifier, TransformerTextEncoder
from keras_attention.tasks.pretrain import (
    MaskedLanguageModel,
    fixed_masked_dataset,
    load_extra_texts,
    mask_generator,
    masked_dataset,
    run_pretrain,
)
from keras_attention.tasks.runner import compile_with_adam
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst
from tests import test_cli
from tests.tasks.outputs import assert_keras_archive, assert_picture
from tests.tasks.test_classify import keyword_reviews, write_csv
from tests.test_cli import _error

VOCABULARY_SIZE, MASK_ID, LENGTH = 40, 39, 12


def counting_texts(num_texts, seed):
    """Runs of consecutive token ids, `s, s+1, s+2, ...`: a masked token is
    its neighbour plus or minus one, which only the context tells."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(4, MASK_ID - LENGTH, size=num_texts)
    return (starts[:, None] + np.arange(LENGTH)).astype("int32")


def tiny_mlm(dropout=0.0):
    encoder = TransformerTextEncoder(
        VOCABULARY_SIZE,
        max_length=LENGTH,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=dropout,
    )
    return MaskedLanguageModel(encoder)


@pytest.mark.slow
def test_masked_token_accuracy_rises_on_counting_sequences():
    keras.utils.set_random_seed(0)
    generator = mask_generator(VOCABULARY_SIZE, MASK_ID, LENGTH)
    train = masked_dataset(counting_texts(512, 0), generator, 32, shuffle=True)
    held_out = fixed_masked_dataset(counting_texts(128, 1), generator, 64)
    model = compile_with_adam(
        tiny_mlm(), jit_compile=False, reduction="mean_with_sample_weight"
    )
    before = model.evaluate(held_out, return_dict=True, verbose=0)["accuracy"]
    model.optimizer.learning_rate.assign(1e-2)
    model.fit(train, epochs=15, verbose=0, shuffle=False)
    after = model.evaluate(held_out, return_dict=True, verbose=0)["accuracy"]
    # Chance is 1 in 40; the neighbours give the answer away.
    assert before < 0.15
    assert after > 0.45, (before, after)


def test_masks_follow_bert():
    generator = mask_generator(VOCABULARY_SIZE, MASK_ID, 256)
    assert generator.mask_selection_rate == 0.15
    assert generator.mask_selection_length == 39
    assert (generator.mask_token_rate, generator.random_token_rate) == (0.8, 0.1)
    [(inputs, mask_ids, weights)] = list(
        masked_dataset(counting_texts(8, 0), generator, 8).take(1)
    )
    positions = np.asarray(inputs["mask_positions"])
    weights = np.asarray(weights)
    original = counting_texts(8, 0)
    # The targets are the original tokens at the masked positions.
    picked = np.take_along_axis(original, positions, axis=1)
    np.testing.assert_array_equal(
        np.asarray(mask_ids)[weights > 0], picked[weights > 0]
    )


def test_held_out_masks_are_drawn_from_the_seed():
    generator = mask_generator(VOCABULARY_SIZE, MASK_ID, LENGTH)
    texts = counting_texts(16, 0)

    def masks(seed):
        [(inputs, mask_ids, _)] = list(fixed_masked_dataset(texts, generator, 16, seed))
        return np.asarray(inputs["token_ids"]), np.asarray(mask_ids)

    for a, b in zip(masks(3), masks(3), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(masks(3)[0], masks(4)[0])


def test_head_is_tied_to_the_encoder_embedding_and_saves_in_safe_mode(tmp_path):
    model = tiny_mlm()
    inputs = {
        "token_ids": counting_texts(2, 0),
        "mask_positions": np.array([[1, 3], [0, 5]], "int32"),
    }
    logits = model(inputs)
    assert logits.shape == (2, 2, VOCABULARY_SIZE)
    # The output projection is the token embedding: no (hidden, vocabulary)
    # kernel of its own.
    head = model.get_layer("mlm_head")
    assert head.token_embedding.embedding is model.encoder.token_embedding
    assert not any("output_kernel" in w.path for w in model.weights)
    path = tmp_path / "mlm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, MaskedLanguageModel)
    np.testing.assert_allclose(loaded(inputs), logits, atol=1e-5)
    loaded_head = loaded.get_layer("mlm_head")
    assert loaded_head.token_embedding.embedding is loaded.encoder.token_embedding


def test_pretrained_encoder_weights_reach_the_classifier():
    model = tiny_mlm()
    rng = np.random.default_rng(1)
    for weight in model.encoder.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32"))
    classifier = TransformerClassifier.from_pretrained_encoder(model.encoder, 2)
    for weight in model.encoder.weights:
        # Same layer names and paths in both models.
        [twin] = [w for w in classifier.weights if w.path == weight.path]
        np.testing.assert_array_equal(twin.numpy(), weight.numpy())


@pytest.mark.slow
def test_cli_pretrains_then_classifies_from_the_encoder(tmp_path):
    data = write_csv(tmp_path / "reviews.csv", keyword_reviews(300))
    extra = tmp_path / "extra.txt"
    extra.write_text(
        "\n%\n".join(" ".join(row[0].split()[:8]) for row in keyword_reviews(40, 1))
    )
    pretrained = tmp_path / "pretrain"
    small = ["--batch-size", "16", "--no-xla"]
    args = ["pretrain", "--data", data, "--add-text", str(extra), "--epochs", "1"]
    cli.main([*args, *small, "--out", str(pretrained)])
    metrics = json.loads((pretrained / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["extra_train_texts"] == 40
    assert 0 <= metrics["mlm_accuracy"] <= 1 and np.isfinite(metrics["mlm_loss"])
    assert_picture(pretrained / "loss.png")
    assert_keras_archive(pretrained / "encoder.keras", "TransformerTextEncoder")
    # Finished: a re-run evaluates again without training.
    cli.main([*args, *small, "--out", str(pretrained)])
    assert json.loads((pretrained / "metrics.json").read_text()) == metrics

    out = tmp_path / "classify"
    cli.main(
        ["classify", "--data", data, "--encoder", str(pretrained / "encoder.keras")]
        + ["--learning-rate", "3e-4", "--epochs", "1", *small, "--out", str(out)]
    )
    result = json.loads((out / "metrics.json").read_text())
    assert result["encoder"] == str(pretrained / "encoder.keras")
    assert result["learning_rate"] == 3e-4
    classifier = keras.saving.load_model(out / "model.keras")
    learning_rate = keras.ops.convert_to_numpy(classifier.optimizer.learning_rate)
    np.testing.assert_allclose(learning_rate, 3e-4, rtol=1e-6)
    encoder = keras.saving.load_model(pretrained / "encoder.keras")
    assert classifier.tokenizer.get_vocabulary() == encoder.tokenizer.get_vocabulary()
    assert encoder.tokenizer.get_vocabulary()[-1] == "[MASK]"


@pytest.mark.slow
def test_an_encoder_shorter_than_the_length_buckets_pretrains(tmp_path):
    """The default buckets (64 and 128 tokens) are kept where they fit: an
    encoder of 48 tokens pretrains in batches of 48 (before, it refused the
    buckets; classify from such an encoder: examples/pretraining_curve.py's
    tiny form, slow tier)."""
    data = write_csv(tmp_path / "reviews.csv", keyword_reviews(64))
    pretrained = run_pretrain(
        tmp_path,
        data=data,
        epochs=1,
        batch_size=16,
        jit_compile=False,
        hidden_dim=8,
        num_heads=2,
        num_layers=1,
        intermediate_dim=16,
        max_length=48,
    )
    assert np.isfinite(pretrained["mlm_loss"])
    assert keras.saving.load_model(tmp_path / "encoder.keras").max_length == 48


@pytest.mark.slow
def test_continued_pretraining_starts_from_the_saved_model(tmp_path):
    data = write_csv(tmp_path / "reviews.csv", keyword_reviews(200))
    small = ["--data", data, "--epochs", "1", "--batch-size", "8", "--no-xla"]
    first, continued = tmp_path / "first", tmp_path / "continued"
    cli.main(["pretrain", *small, "--width", "16", "--heads", "2", "--out", str(first)])
    # A step too small to move the weights, on packed rows where the first
    # run had one text a row: the continued model is the saved one.
    cli.main(
        ["pretrain", *small, "--continue-from", str(first / "model.keras")]
        + ["--pack", "--learning-rate", "1e-9", "--out", str(continued)]
    )
    before = json.loads((first / "metrics.json").read_text())
    after = json.loads((continued / "metrics.json").read_text())
    assert after["continued_from"] == str(first / "model.keras")
    assert before["continued_from"] is None
    assert after["encoder_parameters"] == before["encoder_parameters"]
    # The head came too: same held-out masks, same loss.
    np.testing.assert_allclose(after["mlm_loss"], before["mlm_loss"], rtol=1e-4)
    vocabulary = (first / "vocabulary.txt").read_text()
    assert (continued / "vocabulary.txt").read_text() == vocabulary
    old = keras.saving.load_model(first / "encoder.keras")
    new = keras.saving.load_model(continued / "encoder.keras")
    assert new.tokenizer.get_vocabulary() == old.tokenizer.get_vocabulary()
    for old_weight, new_weight in zip(old.weights, new.weights, strict=True):
        assert old_weight.path == new_weight.path
        np.testing.assert_allclose(new_weight.numpy(), old_weight.numpy(), atol=1e-5)


def test_continued_pretraining_refuses_sizes_of_its_own():
    from keras_attention.tasks.common import ArgumentError
    from keras_attention.tasks.pretrain import Pretraining

    with pytest.raises(
        ArgumentError, match=r"own sizes and length; received hidden_dim=8"
    ):
        Pretraining(continue_from="runs/pretrain/model.keras", hidden_dim=8)


def test_pretrain_is_a_subcommand_with_help_for_every_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "pretrain" in capsys.readouterr().out
    test_cli.test_every_option_has_help_and_its_default("pretrain")


@pytest.fixture(scope="module")
def saved_encoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pretrained")
    tiny_mlm().encoder.save(folder / "encoder.keras")
    tiny_mlm().save(folder / "mlm.keras")
    return folder


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pretrain", "--add-text", "genesis"], "'genesis' is neither a built-in"),
        (
            ["pretrain", "--add-text", "bible", "--add-text", "bible"],
            "--add-text names a text twice: bible, bible",
        ),
        (
            ["pretrain", "--width", "30", "--heads", "4"],
            "--heads 4 does not divide the width 30: each head takes width / heads",
        ),
        (
            ["classify", "--encoder", "{dir}/encoder.keras", "--blocks", "2"],
            "--encoder brings its own sizes; --width, --heads and --blocks are for",
        ),
        (["pretrain", "--learning-rate", "0"], "expected a positive number; got '0'"),
        (["pretrain", "--load", "x.keras"], "unrecognized arguments: --load"),
        (
            ["pretrain", "--data", "fortunes", "--add-text", "fortunes"],
            "--add-text fortunes holds the held-out fortunes of --data fortunes",
        ),
        (["classify", "--encoder", "{dir}/none.keras"], "no such file"),
        (["classify", "--encoder", "{dir}"], "did you mean '{dir}/encoder.keras'"),
        (
            ["classify", "--encoder", "{dir}/mlm.keras"],
            "holds a MaskedLanguageModel model; `keras-attention classify "
            "--encoder` reads TransformerTextEncoder",
        ),
        (
            ["classify", "--model", "bilstm", "--encoder", "{dir}/encoder.keras"],
            "--encoder starts a Transformer; it needs --model transformer",
        ),
        (
            ["classify", "--load", "{dir}/encoder.keras"],
            "holds a TransformerTextEncoder model; `keras-attention classify` reads",
        ),
        (
            ["pretrain", "--continue-from", "{dir}/encoder.keras"],
            "holds a TransformerTextEncoder model; `keras-attention pretrain "
            "--continue-from` reads MaskedLanguageModel",
        ),
        (
            ["pretrain", "--continue-from", "{dir}/mlm.keras", "--blocks", "2"],
            "--continue-from brings its own sizes; --width, --heads and --blocks "
            "are for a new encoder",
        ),
        (["pretrain", "--continue-from", "{dir}/none.keras"], "no such file"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(
    argv, message, saved_encoder, tmp_path, capsys
):
    argv = [arg.format(dir=saved_encoder) for arg in argv]
    status, line = _error([*argv, "--out", str(tmp_path / "out")], capsys)
    assert status == 2
    assert message.format(dir=saved_encoder) in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("bible", marks=pytest.mark.needs_package(BIBLE_PACKAGE)),
        pytest.param("messages", marks=pytest.mark.needs_package(*MESSAGE_PACKAGES)),
    ],
)
def test_built_in_extra_texts_are_passages_of_at_most_120_words(name):
    from keras_attention.data.messages import messages_by_package

    texts = load_extra_texts(name)
    assert len(texts) > 1000
    assert max(len(text.split()) for text in texts) <= 120
    if name == "messages":
        # Every English message, in order, joined within its package.
        words = [
            word
            for pairs in messages_by_package().values()
            for english, _, _ in pairs
            for word in english.split()
        ]
        assert " ".join(texts).split() == words


def test_the_pretraining_model_builds_its_training_state_first():
    # On TensorFlow its first training step is traced once, not twice
    # (tests/utils/test_keras_internals.py).
    assert issubclass(MaskedLanguageModel, BuildsTrainingStateFirst)
