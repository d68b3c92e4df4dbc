import json

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.tasks.common import TimeBudget, write_metrics
from keras_attention.tasks.translate import run_translate, translate_texts
from tests.tasks.callbacks import Record, StopAt

TINY = {"num_train": 600, "batch_size": 32, "beam_width": 2, "verbose": 0}


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("dates")
    cli.main(
        [
            "translate",
            "--data",
            "dates",
            "--model",
            "transformer",
            "--epochs",
            "1",
            "--num-train",
            "600",
            "--batch-size",
            "32",
            "--beam",
            "2",
            "--out",
            str(out),
        ]
    )
    return out


def test_translate_writes_metrics_plots_and_model(trained_dir):
    metrics = json.loads((trained_dir / "metrics.json").read_text())
    for key in (
        "exact_match",
        "bleu",
        "chrf",
        "beam2_bleu",
        "by_length",
        "model",
        "data",
        "train_seconds",
        "epochs",
    ):
        assert key in metrics
    assert 0 <= metrics["exact_match"] <= 1 and 0 <= metrics["bleu"] <= 100
    assert metrics["epochs"] == 1 and metrics["test_pairs"] == 2000
    for name in ("model.keras", "attention_0.png", "score_by_length.png"):
        assert (trained_dir / name).stat().st_size > 0


def test_loaded_model_translates_text(trained_dir, capsys):
    cli.main(
        [
            "translate",
            "--load",
            str(trained_dir / "model.keras"),
            "3 March 2021",
            "tue 04/05/99",
            "--beam",
            "1",
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    model = keras.saving.load_model(trained_dir / "model.keras")
    assert translate_texts(model, ["3 March 2021", "tue 04/05/99"]) == lines[-2:]


def test_interrupted_training_resumes_without_losing_finished_epochs(tmp_path):
    options = dict(TINY, data="dates", model="rnn-luong-general", epochs=3)
    with pytest.raises(KeyboardInterrupt):
        run_translate(tmp_path, callbacks=[StopAt(2)], **options)
    record = Record()
    metrics = run_translate(tmp_path, callbacks=[record], **options)
    assert record.epochs == [2]  # epochs 0 and 1 were restored, not redone
    assert metrics["epochs"] == 3
    again = run_translate(tmp_path, **options)  # finished: evaluated, not retrained
    assert again["bleu"] == metrics["bleu"]


def test_malformed_tsv_is_reported_with_its_line(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Hallo\tHello\nkaputt\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        run_translate(tmp_path / "out", data=str(path), **TINY)


def test_unknown_model_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="rnn-bahdanau"):
        run_translate(tmp_path, model="gpt", **TINY)


def test_time_budget_stops_before_an_epoch_that_would_overrun():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.zeros((8, 2), "float32")
    short = model.fit(x, x[:, :1], epochs=5, verbose=0, callbacks=[TimeBudget(0.0)])
    assert len(short.epoch) == 1
    long = model.fit(x, x[:, :1], epochs=3, verbose=0, callbacks=[TimeBudget(3600)])
    assert len(long.epoch) == 3


def test_metrics_json_keeps_the_order_of_length_buckets(tmp_path):
    buckets = {"1-5": {"bleu": 1.0}, "6-8": {"bleu": 2.0}, "12-14": {"bleu": 3.0}}
    write_metrics(tmp_path, {"bleu": 2.0, "by_length": buckets})
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert list(metrics["by_length"]) == ["1-5", "6-8", "12-14"]
    assert list(metrics) == sorted(metrics)
