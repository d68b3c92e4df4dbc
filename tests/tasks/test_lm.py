import json
import math

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.models import GPT, LSTMLanguageModel
from keras_attention.tasks.common import ArgumentError
from keras_attention.tasks.lm import build_model, matched_lstm_units, run_lm
from keras_attention.tasks.lm_generation import continue_texts, make_sampler
from tests.tasks.callbacks import Record, StopAt
from tests.tasks.outputs import assert_keras_archive, assert_picture

# Small models on short windows: a run is a few seconds of training.
TINY = {
    "num_train": 200,
    "batch_size": 8,
    "steps_per_epoch": 3,
    "verbose": 0,
    "hidden_dim": 32,
    "num_heads": 2,
    "num_layers": 1,
    "intermediate_dim": 64,
    "sequence_length": 64,
}


def write_corpus(path, documents=600, seed=0):
    """A text file of short generated sayings separated by `%` lines."""
    rng = np.random.default_rng(seed)
    words = ("cat", "dog", "bird", "fish", "sees", "likes", "eats", "the", "a")
    sayings = [
        " ".join(rng.choice(words, rng.integers(3, 9))).capitalize() + f" ({i})."
        for i in range(documents)
    ]
    path.write_text("\n%\n".join(sayings), encoding="utf-8")
    return path


@pytest.mark.slow
def test_lm_trains_writes_its_outputs_and_continues_prompts(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "sayings.txt")
    out = tmp_path / "run"
    options = ["--epochs", "2", "--steps-per-epoch", "3", "--batch-size", "8"]
    # One narrow block, whose XLA programs compile faster than the default
    # GPT's (842,496 parameters: test_the_lstm_matches_the_parameters_of_the_gpt;
    # that the command passes no sizes by default: tests/test_cli.py). The
    # module's slow tests measured 87 -> 48 s of CPU on the 2-core machine.
    options += ["--width", "32", "--heads", "2", "--blocks", "1"]
    cli.main(["lm", "--data", str(corpus), *options, "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "gpt" and metrics["data"] == str(corpus)
    assert metrics["epochs"] == 2 and metrics["train_documents"] == 540
    sizes = {"hidden_dim": 32, "num_heads": 2, "num_layers": 1}
    small = build_model("gpt", 128, 256, intermediate_dim=128, **sizes)
    assert metrics["parameters"] == small.count_params()
    # After 6 batches the model is far from sure, and below uniform (128
    # characters): measured 91.5 with this narrow model.
    assert 3 < metrics["perplexity"] < 128
    assert metrics["bits_per_character"] == pytest.approx(
        math.log2(metrics["perplexity"])
    )
    assert metrics["train_characters"] == 2 * 3 * 8 * 256
    assert_keras_archive(out / "model.keras", "GPT")
    assert_picture(out / "loss.png")
    samples = (out / "samples.txt").read_text(encoding="utf-8")
    assert samples.count("== greedy, prompt ") == 4
    assert samples.count("== top_p, prompt ") == 4
    assert "== top_p, prompt 'The '\nThe " in samples
    assert len(metrics["samples"]) == 8
    capsys.readouterr()

    # --load: the same continuation as from Python, then two prompts.
    path = str(out / "model.keras")
    cli.main(["lm", "--load", path, "--prompt", "Q: Why", "--sampler", "greedy"])
    printed = capsys.readouterr().out
    model = keras.saving.load_model(path)
    expected = continue_texts(model, ["Q: Why"], sampler="greedy")[0]
    assert printed == f"{expected}\n" and expected.startswith("Q: Why")
    cli.main(["lm", "--load", path, "--prompt", "A", "--prompt", "B", "--length", "9"])
    texts = capsys.readouterr().out.split("\n%\n")
    assert [text[0] for text in texts] == ["A", "B"]
    assert all(len(text.rstrip("\n")) <= 9 for text in texts)


@pytest.mark.slow
def test_interrupted_training_resumes_without_losing_finished_epochs(tmp_path):
    options = dict(TINY, model="lstm", epochs=3)
    with pytest.raises(KeyboardInterrupt):
        run_lm(tmp_path, callbacks=[StopAt(2)], **options)
    record = Record()
    metrics = run_lm(tmp_path, callbacks=[record], **options)
    assert record.epochs == [2]  # epochs 0 and 1 were restored, not redone
    assert metrics["epochs"] == 3
    again = run_lm(tmp_path, **options)  # finished: evaluated, not retrained
    assert again["perplexity"] == metrics["perplexity"]
    assert_keras_archive(tmp_path / "model.keras", "LSTMLanguageModel")


def test_the_lstm_matches_the_parameters_of_the_gpt():
    gpt = build_model("gpt", 128, 256)
    lstm = build_model("lstm", 128, 256)
    assert isinstance(gpt, GPT) and isinstance(lstm, LSTMLanguageModel)
    assert gpt.count_params() == 842_496
    assert abs(lstm.count_params() - gpt.count_params()) < 0.005 * gpt.count_params()
    for target in (10_000, 842_496, 3_000_000):
        units = matched_lstm_units(target, 128, 2)
        counts = [
            LSTMLanguageModel(128, hidden_dim=u, num_layers=2).count_params()
            for u in (units - 1, units, units + 1)
        ]
        assert abs(counts[1] - target) == min(abs(c - target) for c in counts)


def test_sizes_that_the_data_cannot_fill_are_refused(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n%\n".join(f"Saying number {i}." for i in range(60)))
    options = {**TINY, "data": str(corpus)}
    with pytest.raises(ArgumentError, match="num_train 99,999 is more than the 54"):
        run_lm(tmp_path / "run", **{**options, "num_train": 99_999})
    with pytest.raises(ArgumentError, match="batch size 512 is larger"):
        run_lm(tmp_path / "run", **{**options, "num_train": None, "batch_size": 512})
    with pytest.raises(ValueError, match="'gpt', 'lstm'"):
        run_lm(tmp_path, model="transformer", **TINY)
    with pytest.raises(ValueError, match="sampler"):
        make_sampler("beam")


def test_continuing_text_needs_the_tokenizer_and_room():
    model = GPT(128, max_length=8, hidden_dim=8, num_heads=2, num_layers=1)
    with pytest.raises(ValueError, match="no tokenizer"):
        continue_texts(model, ["hi"])
    model = build_model("gpt", 128, 8, tokenizer=_tokenizer(), hidden_dim=8)
    with pytest.raises(ArgumentError, match="prompt of 8 characters"):
        continue_texts(model, ["12345678"])
    with pytest.raises(ArgumentError, match="length of 9 characters is more"):
        continue_texts(model, ["hi"], max_length=9)
    (text,) = continue_texts(model, ["hi"], sampler="greedy")
    assert text.startswith("hi") and len(text) <= 8
    tokens = np.asarray(model.generate(np.array([[3, 104, 105]]), 8))
    assert tokens[0, :3].tolist() == [3, 104, 105]


def _tokenizer():
    from keras_attention.data.language_modeling import character_tokenizer

    return character_tokenizer()
