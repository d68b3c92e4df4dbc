import json
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

from keras_attention import cli
from keras_attention.data.fashion_pairs import load_item_cells
from keras_attention.evaluation.image_quality import train_feature_classifier
from keras_attention.models import sample_images
from keras_attention.tasks.gan import ablation, item_classifier_path, run_gan
from keras_attention.tasks.resumable import read_epoch_log
from tests.evaluation.cached_classifier import cache_untrained_classifier
from tests.tasks.callbacks import Record, StopAt

# Every test here trains or starts processes: the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

TINY = {
    "data": "digits",
    "width": 8,
    "latent_dim": 16,
    "batch_size": 64,
    "fid_samples": 300,
}


@pytest.fixture(scope="session")
def gan_run(tmp_path_factory):
    """A 2-epoch run with a weight average, stopped at the start of its
    second epoch (a crash) and run again: its folder and the epochs the
    second run trained."""
    out = tmp_path_factory.mktemp("gan")
    with pytest.raises(KeyboardInterrupt):
        run_gan(str(out), epochs=2, ema_decay=0.9, callbacks=[StopAt(1)], **TINY)
    record = Record()
    run_gan(str(out), epochs=2, ema_decay=0.9, callbacks=[record], **TINY)
    return out, record.epochs


@pytest.fixture(scope="session")
def gan_dir(gan_run):
    return gan_run[0]


@pytest.mark.xdist_group("gan_dir")
def test_interrupted_training_resumes(gan_run):
    out, resumed_epochs = gan_run
    assert resumed_epochs == [1]
    logged = read_epoch_log(out / "checkpoints" / "epochs.csv")
    assert [row["epoch"] for row in logged] == [0, 1]


@pytest.mark.xdist_group("gan_dir")
def test_gan_writes_metrics_plots_and_models(gan_dir):
    metrics = json.loads((gan_dir / "metrics.json").read_text())
    for key in ("fid", "inception_score", "fid_real_floor", "train_seconds"):
        assert np.isfinite(metrics[key]), key
    assert metrics["model"] == "sagan" and metrics["epochs"] == 2
    assert metrics["nan_free"] and metrics["steps"] == 2 * (1797 // 64)
    # The real images measured against the reference set the floor.
    assert metrics["fid_real_floor"] < metrics["fid"]
    history = json.loads((gan_dir / "history.json").read_text())
    assert len(history["fid"]) == len(history["d_loss"]) == 2
    assert metrics["fid_per_epoch"] == [round(v, 3) for v in history["fid"]]
    for name in ("samples.png", "losses.png", "attention.png", "classifier.keras"):
        assert (gan_dir / name).exists(), name
    assert sorted(p.name for p in (gan_dir / "samples").iterdir()) == [
        "epoch_001.png",
        "epoch_002.png",
    ]


@pytest.mark.xdist_group("gan_dir")
def test_saved_generator_is_the_trained_one(gan_dir):
    generator = keras.saving.load_model(gan_dir / "model.keras", safe_mode=True)
    gan = keras.saving.load_model(gan_dir / "gan.keras", safe_mode=True)
    assert generator.name == "ema_generator"
    np.testing.assert_array_equal(
        sample_images(generator, 6, seed=2), gan.sample(6, seed=2)
    )


@pytest.mark.xdist_group("gan_dir")
def test_loaded_generator_writes_samples_and_attention(gan_dir, tmp_path, capsys):
    cli.main(
        [
            "gan",
            "--load",
            str(gan_dir / "model.keras"),
            "--samples",
            "16",
            "--out",
            str(tmp_path),
        ]
    )
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / "samples.png"), str(tmp_path / "attention.png")]
    assert Image.open(tmp_path / "attention.png").size[0] > 100


@pytest.mark.xdist_group("gan_dir")
def test_rerun_of_a_finished_run_evaluates_without_training(gan_dir):
    before = json.loads((gan_dir / "metrics.json").read_text())
    record = Record()
    again = run_gan(str(gan_dir), epochs=2, ema_decay=0.9, callbacks=[record], **TINY)
    assert record.epochs == []
    assert again["fid"] == pytest.approx(before["fid"], rel=1e-4)


@pytest.fixture(scope="session")
def conditional_ablation(tmp_path_factory):
    """The ablation of a class-conditional GAN, 1 epoch per variant: its
    folder and results. One run shows both the ablation and the conditional
    GAN (they were two tests of 34 s and 23 s on the 2-core machine, each
    training its own runs)."""
    out = tmp_path_factory.mktemp("ablation")
    results = ablation(str(out), seeds=(0,), epochs=1, conditional=True, **TINY)
    return out, results


@pytest.mark.xdist_group("conditional_ablation")
def test_conditional_gan_draws_a_row_per_class(conditional_ablation):
    out, results = conditional_ablation
    metrics = results["attention"][0]
    assert metrics["conditional"] and np.isfinite(metrics["fid"])
    grid = Image.open(out / "attention-seed0" / "samples.png")
    assert grid.size[1] > grid.size[0]  # ten rows of eight


@pytest.mark.xdist_group("conditional_ablation")
def test_ablation_compares_fid_with_and_without_attention(conditional_ablation):
    tmp_path, results = conditional_ablation
    summary = json.loads((tmp_path / "comparison.json").read_text())
    assert set(summary) == {"attention", "no-attention"}
    assert summary["no-attention"]["fid"] == [results["no-attention"][0]["fid"]]
    assert results["no-attention"][0]["model"] == "sagan-no-attention"
    assert (tmp_path / "comparison.png").exists()
    assert (tmp_path / "fid_curves.png").exists()
    # One classifier measures both.
    assert sorted(p.name for p in tmp_path.glob("*.keras")) == ["classifier.keras"]
    assert not (tmp_path / "attention-seed0" / "classifier.keras").exists()


def test_folder_without_classes_trains_unmeasured_and_refuses_conditional(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(40):
        Image.fromarray(rng.integers(0, 256, (10, 10), "uint8")).save(
            folder / f"{i}.png"
        )
    with pytest.raises(ValueError, match="one subfolder per class"):
        run_gan(
            str(tmp_path / "out"), data=str(folder), conditional=True, batch_size=16
        )
    metrics = run_gan(
        str(tmp_path / "out"),
        data=str(folder),
        image_size=8,
        epochs=1,
        **{k: v for k, v in TINY.items() if k != "data"} | {"batch_size": 16},
    )
    assert "fid" not in metrics and metrics["train_images"] == 40


@pytest.mark.needs_package("dataset-fashion-mnist")
def test_long_range_set_reports_the_agreement_of_its_two_items(tmp_path):
    # A quick classifier of single items, cached where the run looks for it
    # (the run's own trains 5 epochs on 10,000 items). Measured: 2,000 items
    # for 2 epochs, held-out accuracy 0.695 in 20 s; 1,000 items (0.46 and
    # 0.55 on two seeds) or one epoch (0.57) leave no margin above 0.5.
    out = tmp_path / "run"
    # And an untrained FID classifier: training it on the 64x64 canvases took
    # 30 s of this test's 100 s on the 2-core machine, and the digits runs
    # above train the FID classifier and measure with it; here the FID need
    # only be computed.
    cache_untrained_classifier(str(out / "classifier.keras"), (64, 64, 1))
    cells, labels = load_item_cells()
    _, accuracy = train_feature_classifier(
        cells[:2000],
        labels[:2000],
        10,
        item_classifier_path(str(out / "classifier.keras")),
        epochs=2,
    )
    assert accuracy > 0.5
    cli.main(
        [
            "gan",
            "--data",
            "fashion-pairs",
            "--num-train",
            "320",
            "--batch-size",
            "32",
            "--epochs",
            "1",
            "--steps-per-epoch",
            "2",
            "--width",
            "4",
            "--attention-resolution",
            "32",
            "--fid-samples",
            "160",
            "--no-xla",
            "--out",
            str(out),
        ]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"] == "fashion-pairs" and metrics["steps"] == 2
    assert metrics["item_classifier_held_out_accuracy"] == accuracy
    for key in ("long_range_agreement", "long_range_agreement_chance"):
        assert 0.0 <= metrics[key] <= 1.0, key
    # Real pairs agree far above chance (their classifier errs alone).
    real, chance = (
        metrics["long_range_agreement_real"],
        metrics["long_range_agreement_real_chance"],
    )
    assert real > 0.3 and chance < 0.2
    assert np.isfinite(metrics["fid"])
    generator = keras.saving.load_model(out / "model.keras", safe_mode=True)
    assert generator.output_shape == (None, 64, 64, 1)
