"""`keras-attention lm --pack`: GPT trained on rows packed with whole
documents (`keras_attention.data.packing`)."""

import json
import math

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.data.packing import pack_documents
from keras_attention.tasks.common import ArgumentError
from keras_attention.tasks.lm import build_model, packed_perplexity, run_lm
from tests.tasks.outputs import assert_picture
from tests.tasks.test_lm import TINY, write_corpus


def test_packed_perplexity_reads_each_document_alone():
    keras.utils.set_random_seed(0)
    model = build_model(
        "gpt", 128, 16, hidden_dim=16, num_heads=2, num_layers=1, intermediate_dim=32
    )
    rng = np.random.default_rng(0)
    documents = [rng.integers(32, 127, n) for n in (5, 9, 3, 12, 20, 7)]
    packed = pack_documents(documents, 16)
    padded = pack_documents(documents, 16, layout="padded")
    assert len(packed["token_ids"]) < len(padded["token_ids"])
    # Each document alone, from token ids only (no segment ids): the same
    # cross-entropy over the same targets.
    logits = model.predict_on_batch(padded["token_ids"])
    log_probs = logits - np.log(np.sum(np.exp(logits), axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, padded["targets"][..., None], -1)[..., 0]
    alone = math.exp(-np.sum(picked * padded["weights"]) / padded["weights"].sum())
    assert packed_perplexity(model, packed, batch_size=2) == pytest.approx(
        alone, rel=1e-4
    )


def test_the_lstm_is_not_packed(tmp_path):
    corpus = write_corpus(tmp_path / "sayings.txt", documents=60)
    with pytest.raises(ArgumentError, match="packing needs the model gpt"):
        run_lm(tmp_path / "run", data=str(corpus), model="lstm", pack=True, **TINY)


@pytest.mark.slow
def test_lm_pack_trains_on_packed_rows_and_reports_them(tmp_path):
    corpus = write_corpus(tmp_path / "sayings.txt")
    out = tmp_path / "run"
    # A tiny GPT (its rows stay 256 characters): the figures below do not
    # depend on the model's size.
    options = ["--epochs", "1", "--steps-per-epoch", "3", "--batch-size", "4"]
    options += ["--width", "32", "--heads", "2", "--blocks", "1"]
    cli.main(["lm", "--data", str(corpus), "--pack", *options, "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["packed"] is True and metrics["model"] == "gpt"
    assert metrics["parameters"] < 30_000  # the sizes asked, not GPT's 0.84 M
    # Sayings of about 40 characters fill rows of 256 almost whole.
    assert 0 <= metrics["padding_fraction"] < 0.05
    assert metrics["train_characters"] == 3 * 4 * 256
    assert metrics["train_tokens"] == round(
        metrics["train_characters"] * (1 - metrics["padding_fraction"])
    )
    assert metrics["tokens_per_second"] == pytest.approx(
        metrics["train_tokens"] / metrics["train_seconds"], rel=0.01
    )
    assert 3 < metrics["perplexity"] < 128
    assert len(metrics["samples"]) == 8

    # Without --pack: windows of the stream, hardly any padding.
    plain = tmp_path / "plain"
    cli.main(["lm", "--data", str(corpus), *options, "--out", str(plain)])
    metrics = json.loads((plain / "metrics.json").read_text())
    assert metrics["packed"] is False and metrics["padding_fraction"] < 0.02
    assert metrics["tokens_per_second"] > 0


@pytest.mark.slow
@pytest.mark.needs_package("fortunes")
def test_the_packing_benchmark_writes_its_figures(tmp_path):
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
    spec = importlib.util.spec_from_file_location(
        "packing_benchmark", os.path.join(path, "packing.py")
    )
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    assert benchmark.main(["--quick", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "packing.json").read_text())
    assert results["suite"] == "packing" and results["machine"]["cores"] >= 1
    (seed,) = results["seeds"]
    for name in ("padded", "packed"):
        figures = seed[name]
        assert len(figures["tokens_per_second"]) == results["config"]["rounds"] - 1
        assert 1 < figures["perplexity"] < 128
        assert figures["train_tokens"] > 0
    assert seed["packed"]["padding_fraction"] < seed["padded"]["padding_fraction"]
    assert seed["packed"]["batch_size"] < seed["padded"]["batch_size"]
    assert set(results["summary"]) == {"speedup", "padded", "packed"}
    assert_picture(tmp_path / "packing.png")
