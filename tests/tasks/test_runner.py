import json
import os

import keras
import numpy as np
import pytest

from keras_attention.tasks.runner import TrainingOptions, finish_run, train_or_load
from tests.tasks.callbacks import Record


def tiny_build(jit_compile):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=jit_compile)
    return model


def tiny_fit_arguments(model):
    x = np.ones((8, 3), "float32")
    return {
        "train_data": x,
        "y": np.ones((8, 1)),
        "validation_data": None,
    }


def test_a_run_is_trained_saved_and_then_loaded_instead_of_trained(tmp_path, capsys):
    exported = []
    model, history = train_or_load(
        str(tmp_path),
        "tiny",
        None,
        tiny_build,
        tiny_fit_arguments,
        TrainingOptions(epochs=2, verbose=0),
        export=exported.append,
        announce=lambda m: f"tiny model of {m.count_params()} parameters",
    )
    assert history["epochs"] == 2 and len(history["loss"]) == 2
    assert exported == [model]
    assert "tiny model of 4 parameters" in capsys.readouterr().out
    saved = json.loads((tmp_path / "history.json").read_text())
    assert saved == history
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoints",
        "history.json",
        "model.keras",
    ]

    def must_not_build(jit_compile):
        raise AssertionError("a finished run was built again")

    loaded, loaded_history = train_or_load(
        str(tmp_path),
        "tiny",
        None,
        must_not_build,
        tiny_fit_arguments,
        TrainingOptions(epochs=2),
    )
    assert loaded_history == history
    x = np.ones((2, 3), "float32")
    np.testing.assert_array_equal(
        loaded.predict(x, verbose=0), model.predict(x, verbose=0)
    )
    assert "already trained" in capsys.readouterr().out


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="a TensorFlow graph or XLA"
)
@pytest.mark.parametrize(
    "model_key, jit_compile, compiled",
    [
        ("classify/han", None, False),  # measured faster as a graph on a CPU
        ("classify/han", True, True),  # --xla forces it
        ("classify/transformer", None, True),
        ("translate/transformer", False, False),  # --no-xla
        (None, None, True),
    ],
)
def test_xla_is_what_was_measured_faster_on_a_cpu_unless_forced(
    tmp_path, capsys, model_key, jit_compile, compiled
):
    built = []

    def build(jit_compile):
        built.append(jit_compile)
        return tiny_build(jit_compile)

    model, _ = train_or_load(
        str(tmp_path),
        "tiny",
        None,
        build,
        tiny_fit_arguments,
        TrainingOptions(epochs=1, jit_compile=jit_compile, verbose=0),
        model_key=model_key,
    )
    assert built == [compiled] and model.jit_compile is compiled
    line = next(
        line for line in capsys.readouterr().out.splitlines() if "building" in line
    )
    assert ("no XLA" not in line) is compiled
    if model_key == "classify/han" and jit_compile is None:
        assert "measured faster as a TensorFlow graph" in line


def test_the_same_seed_builds_the_same_model(tmp_path):
    first, _ = train_or_load(
        str(tmp_path / "a"),
        "tiny",
        None,
        tiny_build,
        tiny_fit_arguments,
        TrainingOptions(epochs=1, seed=3, verbose=0),
    )
    second, _ = train_or_load(
        str(tmp_path / "b"),
        "tiny",
        None,
        tiny_build,
        tiny_fit_arguments,
        TrainingOptions(epochs=1, seed=3, verbose=0),
    )
    for a, b in zip(first.get_weights(), second.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_finish_run_writes_the_metrics_and_prints_the_summary(tmp_path, capsys):
    metrics = finish_run(str(tmp_path), {"accuracy": 0.5}, "tiny: accuracy 0.5")
    assert metrics == {"accuracy": 0.5}
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["accuracy"] == pytest.approx(0.5)
    assert written["backend"] == keras.backend.backend()
    assert f"tiny: accuracy 0.5; wrote {tmp_path}" in capsys.readouterr().out


def test_a_training_without_a_step_saves_nothing_and_the_next_run_trains(tmp_path):
    import tensorflow as tf

    def no_full_batch(model):
        x, y = np.ones((8, 3), "float32"), np.ones((8, 1), "float32")
        data = tf.data.Dataset.from_tensor_slices((x, y))
        batches = data.batch(100, drop_remainder=True)
        return {"train_data": batches, "validation_data": None}

    with pytest.raises(RuntimeError, match="epoch 1 had no full batch"):
        train_or_load(
            str(tmp_path),
            "tiny",
            None,
            tiny_build,
            no_full_batch,
            TrainingOptions(epochs=3, verbose=0),
        )
    assert list(tmp_path.iterdir()) == []

    _, history = train_or_load(
        str(tmp_path),
        "tiny",
        None,
        tiny_build,
        tiny_fit_arguments,
        TrainingOptions(epochs=2, verbose=0),
    )
    assert history["epochs"] == 2 and len(history["loss"]) == 2
    assert (tmp_path / "model.keras").exists()


def test_a_damaged_model_file_is_rebuilt_from_the_final_weights(tmp_path, capsys):
    options = TrainingOptions(epochs=2, verbose=0)
    model, history = train_or_load(
        str(tmp_path), "tiny", None, tiny_build, tiny_fit_arguments, options
    )
    saved = tmp_path / "model.keras"
    saved.write_bytes(saved.read_bytes()[:300])
    record = Record()
    rebuilt, again = train_or_load(
        str(tmp_path),
        "tiny",
        None,
        tiny_build,
        tiny_fit_arguments,
        options.replace(callbacks=(record,)),
    )
    out = capsys.readouterr().out
    assert f"{saved} or {tmp_path / 'history.json'} cannot be read (" in out
    assert "training had finished; loading" in out
    assert record.epochs == [] and again == history
    np.testing.assert_array_equal(rebuilt.get_weights()[0], model.get_weights()[0])
    keras.saving.load_model(saved)  # written again, whole


def test_a_kill_while_writing_keeps_the_previous_metrics(tmp_path, monkeypatch):
    finish_run(str(tmp_path), {"accuracy": 0.5}, "first")

    def killed(descriptor):
        raise KeyboardInterrupt  # after the new file is written, before its rename

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        finish_run(str(tmp_path), {"accuracy": 0.9}, "second")
    monkeypatch.undo()
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["accuracy"] == pytest.approx(0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_training_options_take_their_fields_and_leave_a_tasks_own():
    given = {"options": TrainingOptions(seed=3), "epochs": 2, "callbacks": None}
    options, rest = TrainingOptions.take({**given, "units": 16})
    assert options == TrainingOptions(epochs=2, seed=3)
    assert rest == {"units": 16}
    callback = keras.callbacks.Callback()
    options, _ = TrainingOptions.take({"callbacks": [callback]})
    assert options.callbacks == (callback,)


def test_a_comparison_runs_every_name_and_seed_and_writes_its_summary(tmp_path, capsys):
    from keras_attention.tasks import runner

    class Tiny(runner.Task):
        command = "tiny"
        epochs = 1

        def __init__(self, name):
            self.model = name

        def load(self, run):
            self.seed = run.options.seed

        def build(self, run, jit_compile):
            return tiny_build(jit_compile)

        def fit_arguments(self, run, model):
            return tiny_fit_arguments(model)

        def report(self, run, model, history):
            return {"model": self.model, "seed": self.seed}, f"{self.model} done"

    drawn = []
    results, summary = runner.compare(
        str(tmp_path),
        Tiny,
        ["a", "b"],
        TrainingOptions(verbose=0),
        seeds=[0, 1],
        summarize=lambda results: {
            name: runner.spread([r["seed"] for r in runs])
            for name, runs in results.items()
        },
        plots=[lambda results, folder: drawn.append(folder)],
    )
    assert [r["seed"] for r in results["b"]] == [0, 1]
    assert summary["a"] == {"values": [0, 1], "mean": 0.5, "std": 0.5}
    assert json.loads((tmp_path / "comparison.json").read_text()) == summary
    assert (tmp_path / "b" / "seed1" / "metrics.json").exists()
    assert drawn == [str(tmp_path)]
    # A task without its own announcement gets the runner's.
    assert "training 4 parameters for up to 1 epochs" in capsys.readouterr().out
