"""examples/sagan_long_range.py: a study cut off part-way resumes each run
from its last measurement, under the settings it was started with."""

import importlib.util
import json
import os

import h5py
import keras
import numpy as np
import pytest

from tests.evaluation.cached_classifier import cache_untrained_classifier

SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "..", "examples", "sagan_long_range.py"
)


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("sagan_long_range", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_args(study, out, steps):
    # 32x32 canvases (`--cell-size 16`, the study's CPU size): the resume test
    # below trains the GAN twice, and at 64x64 each training compiled and ran
    # for about 50 s on the 2-core machine.
    return study.parse_args(
        [
            "--out",
            str(out),
            "--cell-size",
            "16",
            "--steps",
            str(steps),
            "--eval-every",
            "2",
            "--width",
            "8",
            "--attention-resolution",
            "16",
            "--batch-size",
            "8",
            "--num-pairs",
            "64",
            "--num-measured",
            "16",
        ]
    )


def _write_record(study, args, variant="attention", seed=0, **settings):
    record = {
        "variant": variant,
        "seed": seed,
        "settings": {**study.run_settings(args), **settings},
        "evaluations": [],
    }
    with open(study.run_path(args, variant, seed), "w") as f:
        json.dump(record, f)


def test_a_run_resumes_only_under_its_own_settings(study, tmp_path):
    args = _tiny_args(study, tmp_path, steps=4)
    assert study.read_run(args, "attention", 0) is None
    _write_record(study, args)
    assert study.read_run(args, "attention", 0)["settings"]["width"] == 8
    _write_record(study, args, width=16, ema_decay=0.99)
    with pytest.raises(SystemExit) as error:
        study.read_run(args, "attention", 0)
    message = str(error.value)
    assert "\n" not in message
    assert "--width 8 (it has 16)" in message
    assert "--ema-decay 0.999 (it has 0.99)" in message


def test_a_damaged_record_is_named_in_one_line(study, tmp_path):
    args = _tiny_args(study, tmp_path, steps=4)
    with open(study.run_path(args, "no-attention", 1), "w") as f:
        f.write('{"variant": "no-att')
    with pytest.raises(SystemExit, match=r"no-attention-seed1\.json cannot be read"):
        study.read_run(args, "no-attention", 1)


def _cache_untrained_classifiers(args):
    """The measures' classifiers, cached as the study caches them, so that
    the test trains only the GAN (the figures need not mean anything)."""
    cell = args.cell_size
    for name, shape in (
        ("classifier", (2 * cell, 2 * cell, 1)),
        ("classifier_items", (cell, cell, 1)),
    ):
        cache_untrained_classifier(os.path.join(args.out, f"{name}.keras"), shape)


def _optimizer_iterations(path):
    """The step counts of the optimizers saved in a weights file."""
    found = []
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, item: (
                found.append(int(np.asarray(item[()]).ravel()[0]))
                if isinstance(item, h5py.Dataset)
                and "optimizer" in name
                and name.endswith("vars/0")
                else None
            )
        )
    return found


@pytest.mark.slow
@pytest.mark.needs_package("dataset-fashion-mnist")
def test_a_run_cut_off_resumes_from_its_checkpoint(study, tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("one backend is enough for the script's bookkeeping")
    variant, seed = "attention", 0
    first = _tiny_args(study, tmp_path, steps=2)
    _cache_untrained_classifiers(first)
    study.train_one(first, variant, seed, deadline=0)
    record = study.read_run(first, variant, seed)
    assert [e["step"] for e in record["evaluations"]] == [2]
    assert study.finished(first, record)
    assert record["checkpoint"] == study.checkpoint_name(variant, seed, 2)

    # A larger --steps extends the finished run from its checkpoint.
    longer = _tiny_args(study, tmp_path, steps=4)
    assert not study.finished(longer, record)
    study.train_one(longer, variant, seed, deadline=0)
    resumed = study.read_run(longer, variant, seed)
    assert [e["step"] for e in resumed["evaluations"]] == [2, 4]
    assert resumed["evaluations"][0] == record["evaluations"][0]
    assert resumed["evaluations"][1]["seconds"] > record["evaluations"][0]["seconds"]
    checkpoint = os.path.join(tmp_path, study.checkpoint_name(variant, seed, 4))
    assert resumed["checkpoint"] == os.path.basename(checkpoint)
    assert not os.path.exists(
        os.path.join(tmp_path, study.checkpoint_name(variant, seed, 2))
    )
    # Both optimizers went on from step 2: a run trained afresh would be at 2.
    assert _optimizer_iterations(checkpoint) == [4, 4]


def test_attention_works_at_half_the_canvas_side_unless_told(study, tmp_path):
    assert study.parse_args(["--out", str(tmp_path)]).attention_resolution == 32
    half = study.parse_args(["--out", str(tmp_path), "--cell-size", "16"])
    assert (half.cell_size, half.attention_resolution) == (16, 16)
    told = ["--cell-size", "16", "--attention-resolution", "8"]
    assert study.parse_args(told).attention_resolution == 8
    with pytest.raises(SystemExit):
        study.parse_args(["--cell-size", "8"])


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Generator:
    """What `Measure` asks of the GAN: samples and its weights."""

    stop_training = False

    def sample(self, count, seed):
        return np.zeros((count, 4, 4, 1), "float32")

    def save_weights(self, path):
        with open(path, "w") as f:
            f.write("weights")


def test_measurements_leave_compilation_out_and_stop_before_the_deadline(
    study, tmp_path, monkeypatch
):
    """A run's seconds start at the end of its first step (XLA compiles
    there), and a deadline stops it after the last measurement whose next
    interval would not fit."""
    clock = _Clock()
    monkeypatch.setattr(study.time, "time", clock)
    args = _tiny_args(study, tmp_path, steps=8)
    record = {"variant": "attention", "seed": 0, "evaluations": []}
    measure = study.Measure(
        args,
        record,
        quality=lambda images: {"fid": 1.0, "inception_score": 1.0},
        agreement=lambda images: {"agreement": 0.5, "chance": 0.1},
        path=study.run_path(args, "attention", 0),
        deadline=125.0,
    )
    generator = _Generator()
    measure.set_model(generator)
    logs = {"d_loss": 1.0, "g_loss": 0.0}
    # The first step ends at 100 s (it compiled), step 2 at 110 s, step 3 at
    # 115 s.
    for clock.now in (100.0, 110.0, 115.0):
        measure.on_train_batch_end(0, logs)
    assert [e["seconds"] for e in record["evaluations"]] == [10.0]
    assert not generator.stop_training
    # Step 4 at 130 s: its 20 s interval again would end past the deadline.
    clock.now = 130.0
    measure.on_train_batch_end(0, logs)
    assert [e["seconds"] for e in record["evaluations"]] == [10.0, 30.0]
    assert generator.stop_training
    assert record["checkpoint"] == study.checkpoint_name("attention", 0, 4)
    assert sorted(os.listdir(tmp_path)) == [
        "attention-seed0-step4.weights.h5",
        "attention-seed0.json",
    ]


def _run(steps, fid, agreement, chance):
    return {
        "evaluations": [
            {
                "step": step,
                "fid": fid + step,
                "long_range_agreement": agreement,
                "long_range_agreement_chance": chance,
            }
            for step in steps
        ]
    }


def test_the_summary_pairs_seeds_at_the_steps_every_run_reached(study):
    seeds = [0, 1, 2]
    runs = {("attention", s): _run([2, 4], 10 + s, 0.5, 0.1 + 0.1 * s) for s in seeds}
    runs.update(
        {("no-attention", s): _run([2, 4, 6], 20 + 2 * s, 0.3, 0.1) for s in seeds}
    )
    summary = study.summarize(runs, seeds)
    assert list(summary) == ["2", "4"]
    attention = summary["4"]["attention"]
    assert attention["fid"]["values"] == [14, 15, 16]
    assert attention["fid"]["mean"] == pytest.approx(15.0)
    low, high = attention["fid"]["interval"]
    assert low < 15.0 < high
    np.testing.assert_allclose(
        attention["agreement_above_chance"]["values"], [0.4, 0.3, 0.2]
    )
    difference = summary["4"]["attention_minus_no_attention"]
    # Per seed: (14, 15, 16) - (24, 26, 28).
    assert difference["fid"]["mean"] == pytest.approx(-11.0)
    assert difference["long_range_agreement"]["mean"] == pytest.approx(0.2)
    assert difference["agreement_above_chance"]["mean"] == pytest.approx(0.1)
