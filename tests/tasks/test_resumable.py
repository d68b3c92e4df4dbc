import io
import os
import re
import signal
import sys

import keras
import numpy as np
import pytest

from keras_attention.tasks import resumable
from keras_attention.tasks.resumable import (
    DamagedCheckpointError,
    TrainingInterrupted,
    fit_resumable,
    read_epoch_log,
)
from keras_attention.utils import files
from keras_attention.utils.files import DiskFullError
from tests.tasks.callbacks import Record, StopAt


def diverging_task():
    """Training pulls the output towards +1 while validation wants -1, so
    the validation loss is best after the first epoch and worse after it."""
    dense = keras.layers.Dense(1, kernel_initializer="zeros")
    model = keras.Sequential([keras.Input((3,)), dense])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    x = np.ones((16, 3), "float32")
    return model, (x, np.ones((16, 1))), (x, -np.ones((16, 1)))


def test_best_epoch_before_an_interruption_is_kept(tmp_path):
    model, train, valid = diverging_task()
    options = {"epochs": 8, "validation_data": valid, "patience": 2, "verbose": 0}
    x, y = train
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(2)], **options)
    model, _, _ = diverging_task()
    record = Record()
    history = fit_resumable(model, x, tmp_path, y=y, callbacks=[record], **options)
    # Resumed at epoch 2; epochs 2 and 3 did not beat epoch 0: stopped.
    assert record.epochs == [2, 3]
    assert history["epochs"] == 4 and history["best_epoch"] == 1
    assert len(history["val_loss"]) == 4
    assert history["val_loss"][0] == min(history["val_loss"])
    # The model holds the weights of epoch 0, saved before the interruption.
    loss = model.evaluate(*valid, verbose=0)
    assert loss == pytest.approx(history["val_loss"][0], rel=1e-5)
    logged = read_epoch_log(tmp_path / "checkpoints" / "epochs.csv")
    assert [row["epoch"] for row in logged] == [0, 1, 2, 3]
    assert history["train_seconds"] == pytest.approx(
        sum(row["seconds"] for row in logged), abs=0.1
    )


# The line `EpochLines` prints for an epoch of `diverging_task`.
EPOCH_LINE = re.compile(
    r"\[keras-attention\] epoch (\d+)/(\d+): loss \S+, val_loss \S+ \([0-9.]+ s\)"
)


def test_a_log_file_gets_one_line_per_epoch(tmp_path, capsys):
    """Standard output that is not a terminal (a log file, a pipe; here
    pytest's capture) gets one line per epoch, numbered in the whole
    training after a resume, and none of the bar's redraws."""
    model, (x, y), valid = diverging_task()
    options = {"epochs": 4, "validation_data": valid}
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(2)], **options)
    model, _, _ = diverging_task()
    fit_resumable(model, x, tmp_path, y=y, **options)
    out = capsys.readouterr().out
    assert "\r" not in out and "\b" not in out
    assert "Epoch" not in out and "step" not in out
    lines = [line for line in out.splitlines() if "] epoch " in line]
    numbers = [EPOCH_LINE.fullmatch(line).groups() for line in lines]
    assert numbers == [("1", "4"), ("2", "4"), ("3", "4"), ("4", "4")]


class Terminal(io.StringIO):
    """Standard output that says it is a terminal."""

    def isatty(self):
        return True


def test_a_terminal_gets_keras_live_bar(tmp_path, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    model, (x, y), valid = diverging_task()
    fit_resumable(model, x, tmp_path, 2, valid, y=y)
    shown = terminal.getvalue()
    assert "Epoch 2/2" in shown and "\r" in shown
    assert "] epoch " not in shown


def test_an_explicit_verbose_is_keras_own(tmp_path, capsys):
    model, (x, y), valid = diverging_task()
    fit_resumable(model, x, tmp_path, 2, valid, y=y, verbose=2)
    out = capsys.readouterr().out
    assert "Epoch 2/2" in out and "] epoch " not in out


class ScriptedScore(keras.callbacks.Callback):
    """Adds `val_macro_f1` from a script to each epoch's logs, and keeps the
    weights each epoch ended with."""

    def __init__(self, scores):
        super().__init__()
        self.scores, self.weights = scores, {}

    def on_epoch_end(self, epoch, logs=None):
        logs["val_macro_f1"] = self.scores[epoch]
        self.weights[epoch] = self.model.get_weights()[0].copy()


def test_a_higher_is_better_monitor_keeps_its_best_epoch_across_a_resume(tmp_path):
    scores = [0.2, 0.5, 0.4, 0.3, 0.9, 0.9]
    model, (x, y), valid = diverging_task()
    options = {
        "epochs": 6,
        "validation_data": valid,
        "patience": 2,
        "monitor": "val_macro_f1",
        "verbose": 0,
    }
    first = ScriptedScore(scores)
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(
            model,
            x,
            tmp_path,
            y=y,
            epoch_metrics=[first],
            callbacks=[StopAt(2)],
            **options,
        )
    model, _, _ = diverging_task()
    second, record = ScriptedScore(scores), Record()
    history = fit_resumable(
        model, x, tmp_path, y=y, epoch_metrics=[second], callbacks=[record], **options
    )
    # The best score (0.5, epoch 1) came before the interruption; epochs 2
    # and 3 scored lower although their validation loss fell or rose alike:
    # stopped there, with epoch 1's weights.
    assert record.epochs == [2, 3]
    assert history["best_epoch"] == 2
    assert history["val_macro_f1"] == scores[:4]
    np.testing.assert_array_equal(model.get_weights()[0], first.weights[1])


def test_monitor_must_name_a_validation_figure(tmp_path):
    model, (x, y), valid = diverging_task()
    with pytest.raises(ValueError, match="validation figure.*'loss'"):
        fit_resumable(
            model,
            x,
            tmp_path,
            y=y,
            epochs=1,
            validation_data=valid,
            patience=1,
            monitor="loss",
            verbose=0,
        )


def test_a_finished_run_loads_its_final_weights_instead_of_training(tmp_path):
    model, (x, y), valid = diverging_task()
    options = {"epochs": 2, "validation_data": valid, "verbose": 0}
    first = fit_resumable(model, x, tmp_path, y=y, **options)
    assert not list((tmp_path / "checkpoints").glob("state-*"))
    again, _, _ = diverging_task()
    record = Record()
    second = fit_resumable(again, x, tmp_path, y=y, callbacks=[record], **options)
    assert record.epochs == []
    assert second == first
    np.testing.assert_array_equal(again.get_weights()[0], model.get_weights()[0])


def test_log_lines_beyond_the_backup_are_dropped_on_resume(tmp_path):
    """A kill after an epoch's log line but before its checkpoint, or a line
    cut short (logs written before lines were written whole), must leave one
    line per epoch."""
    model, (x, y), valid = diverging_task()
    options = {"epochs": 4, "validation_data": valid, "verbose": 0}
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(2)], **options)
    log = tmp_path / "checkpoints" / "epochs.csv"
    lines = log.read_text().splitlines(keepends=True)
    # Epoch 2 logged but not checkpointed, then a line cut short.
    log.write_text("".join([*lines, lines[-1].replace("1,", "2,", 1), "3,0.5"]))
    model, _, _ = diverging_task()
    record = Record()
    history = fit_resumable(model, x, tmp_path, y=y, callbacks=[record], **options)
    assert record.epochs == [2, 3]
    assert [row["epoch"] for row in read_epoch_log(log)] == [0, 1, 2, 3]
    assert history["epochs"] == 4 and len(history["loss"]) == 4


class SignalAt(keras.callbacks.Callback):
    """Sends this process `number` at the end of batch `batch` of `epoch`."""

    def __init__(self, epoch, batch, number=signal.SIGTERM):
        super().__init__()
        self.at, self.number = (epoch, batch), number

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            os.kill(os.getpid(), self.number)


class Batches(keras.callbacks.Callback):
    """Counts the batches trained in each epoch."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def on_train_batch_end(self, batch, logs=None):
        self.counts[self.epoch] = self.counts.get(self.epoch, 0) + 1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


def batched_task():
    """16 batches of 4 per epoch."""
    model, (x, y), valid = diverging_task()
    x, y = np.ones((64, 3), "float32"), np.ones((64, 1))
    return model, x, y, valid


@pytest.mark.parametrize(
    "number, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)]
)
def test_a_signal_saves_the_batch_in_progress_and_the_run_resumes_there(
    tmp_path, number, status
):
    options = {"epochs": 3, "validation_data": None, "verbose": 0, "batch_size": 4}
    model, x, y, _ = batched_task()
    with pytest.raises(TrainingInterrupted) as stopped:
        fit_resumable(
            model, x, tmp_path, y=y, callbacks=[SignalAt(1, 5, number)], **options
        )
    name = signal.Signals(number).name
    state = tmp_path / "checkpoints" / "state-e0001-b000006.weights.h5"
    assert stopped.value.exit_status == status
    assert str(stopped.value) == (
        f"stopped by {name} in epoch 2, after batch 6 of 16; saved {state}; the "
        "same command resumes from there"
    )
    assert signal.getsignal(number) is not None  # handlers put back
    weights = model.get_weights()
    assert [row["epoch"] for row in read_epoch_log(state.parent / "epochs.csv")] == [0]

    model, x, y, _ = batched_task()
    batches, record = Batches(), Record()
    history = fit_resumable(
        model, x, tmp_path, y=y, callbacks=[batches, record], **options
    )
    # The rest of epoch 1 (10 batches), then epoch 2 whole.
    assert batches.counts == {1: 10, 2: 16}
    assert history["epochs"] == 3 and len(history["loss"]) == 3
    logged = read_epoch_log(state.parent / "epochs.csv")
    assert [row["epoch"] for row in logged] == [0, 1, 2]
    assert not list(state.parent.glob("state-*"))
    # The resumed run started from the saved weights, not from scratch.
    assert not np.allclose(weights[0], 0)


def test_a_damaged_checkpoint_falls_back_to_the_one_before(tmp_path, capsys):
    options = {"epochs": 4, "validation_data": None, "verbose": 0}
    model, (x, y), _ = diverging_task()
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(3)], **options)
    folder = tmp_path / "checkpoints"
    newest = folder / "state-e0003-b000000.weights.h5"
    assert sorted(p.name for p in folder.glob("state-*")) == [
        "state-e0002-b000000.weights.h5",
        newest.name,
    ]
    newest.write_bytes(newest.read_bytes()[:500])  # a power cut mid-write
    model, _, _ = diverging_task()
    record = Record()
    history = fit_resumable(model, x, tmp_path, y=y, callbacks=[record], **options)
    assert record.epochs == [2, 3]
    assert history["epochs"] == 4
    out = capsys.readouterr().out
    assert f"{newest} is damaged (truncated file" in out
    assert "resuming from the checkpoint before it, after epoch 2" in out


def test_with_every_checkpoint_damaged_the_error_names_the_file_and_restart(
    tmp_path,
):
    options = {"epochs": 3, "validation_data": None, "verbose": 0}
    model, (x, y), _ = diverging_task()
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(2)], **options)
    for state in (tmp_path / "checkpoints").glob("state-*.h5"):
        state.write_bytes(b"\0" * 100)
    model, _, _ = diverging_task()
    with pytest.raises(DamagedCheckpointError) as error:
        fit_resumable(model, x, tmp_path, y=y, **options)
    newest = tmp_path / "checkpoints" / "state-e0002-b000000.weights.h5"
    assert str(error.value).startswith(f"{newest} is damaged (")
    assert str(error.value).endswith(
        "and no earlier checkpoint is left; run the same command with --restart "
        "to train afresh in this folder"
    )


def test_a_damaged_final_checkpoint_names_restart(tmp_path):
    options = {"epochs": 1, "validation_data": None, "verbose": 0}
    model, (x, y), _ = diverging_task()
    fit_resumable(model, x, tmp_path, y=y, **options)
    final = tmp_path / "checkpoints" / "final.weights.h5"
    final.write_bytes(final.read_bytes()[:-200])
    with pytest.raises(DamagedCheckpointError, match="--restart"):
        fit_resumable(model, x, tmp_path, y=y, **options)


def test_too_little_space_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "free_bytes", lambda folder: 200_000)
    model, (x, y), _ = diverging_task()
    record = Record()
    with pytest.raises(DiskFullError) as error:
        fit_resumable(model, x, tmp_path, 2, None, y=y, callbacks=[record], verbose=0)
    assert record.epochs == []
    message = str(error.value)
    assert message.startswith(f"not enough space in {tmp_path / 'checkpoints'} for ")
    assert (
        "training (checkpoints of 48 B): it needs about 1.0 MB and 200.0 kB are "
        in (message)
    )


def test_a_disk_that_fills_during_training_keeps_the_last_checkpoint(
    tmp_path, monkeypatch
):
    """Room for the first epoch's files only: the second epoch's checkpoint
    is refused in one line, the first survives, and the run resumes from it
    once there is room."""
    options = {"epochs": 3, "validation_data": None, "verbose": 0}
    writes = []
    real = files.free_bytes

    def filling(folder):
        writes.append(folder)
        # The check before training, the epoch log and the checkpoint of
        # epoch 0, the log of epoch 1; then the disk is full.
        return real(folder) if len(writes) <= 4 else 0

    monkeypatch.setattr(files, "free_bytes", filling)
    model, (x, y), _ = diverging_task()
    with pytest.raises(DiskFullError, match="for writing state-e0002-b000000"):
        fit_resumable(model, x, tmp_path, y=y, **options)
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [
        "epochs.csv",
        "state-e0001-b000000.weights.h5",
    ]
    monkeypatch.setattr(files, "free_bytes", real)
    model, _, _ = diverging_task()
    record = Record()
    history = fit_resumable(model, x, tmp_path, y=y, callbacks=[record], **options)
    assert record.epochs == [1, 2]
    assert [row["epoch"] for row in read_epoch_log(folder / "epochs.csv")] == [0, 1, 2]
    assert history["epochs"] == 3


def test_an_unreadable_log_line_keeps_the_epochs_before_it(tmp_path, capsys):
    log = tmp_path / "epochs.csv"
    log.write_text("epoch,loss,seconds\n0,0.5,1.0\nepoch,loss,seconds\n2,0.3,1.0\n")
    assert read_epoch_log(log) == [{"epoch": 0, "loss": 0.5, "seconds": 1.0}]
    assert "line 3 cannot be read ('epoch,loss,seconds')" in capsys.readouterr().out


def test_checkpoint_size_counts_weights_and_optimizer_state():
    model, _, _ = diverging_task()
    # 3 weights and a bias; the optimizer is not built yet: Adam's two
    # slots per weight are assumed.
    assert resumable.checkpoint_bytes(model) == 4 * 4 * 3
    model.optimizer.build(model.trainable_variables)
    built = resumable.checkpoint_bytes(model)
    assert built == 4 * 4 + sum(
        int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
        for v in model.optimizer.variables
    )


def test_a_resumed_run_restores_the_optimizer_state(tmp_path):
    """Adam's moments and step count come back: the steps counted at the end
    are those of every epoch, before and after the interruption."""
    options = {"epochs": 3, "validation_data": None, "verbose": 0, "batch_size": 4}
    model, x, y, _ = batched_task()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(2)], **options)
    saved = [np.array(v) for v in model.optimizer.variables]
    model, x, y, _ = batched_task()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    restored = []

    class Capture(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if not restored:
                restored.extend(np.array(v) for v in self.model.optimizer.variables)

    fit_resumable(model, x, tmp_path, y=y, callbacks=[Capture()], **options)
    assert len(restored) == len(saved) > 2
    for before, after in zip(saved, restored, strict=True):
        np.testing.assert_allclose(after, before)
    assert int(model.optimizer.iterations) == 3 * 16
