"""Training that survives what real machines do.

`fit_resumable` is `model.fit` for the training subcommands. Under
`<out>/checkpoints` it keeps:

- `state-eEEEE-bBBBBBB.weights.h5`: the model and its optimizer after `E`
  finished epochs and `B` batches of the next (B is 0 but for a run stopped
  by a signal), with `state-...json` beside a mid-epoch one (the epoch's
  batches and the seconds it had trained). The newest two are kept: a run
  that finds the newest damaged (a power cut, a full disk) resumes from the
  one before.
- `epochs.csv`: one line per finished epoch (its metrics and seconds).
- `best.weights.h5` (with early stopping): the weights of the epoch with the
  best validation loss so far.
- `final.weights.h5`: the weights training ended with, so that a run killed
  after training but before its caller saved the model does not train again.

Every file is written whole under another name and renamed
(`keras_attention.utils.files.written_whole`); space for the checkpoints is
checked before training starts and before every write.

SIGTERM (what a scheduler sends before preemption) and SIGINT (Ctrl-C) stop
training at the next batch: the model is saved with its position in the
epoch, and `TrainingInterrupted` says where; the same command resumes from
that batch, training the rest of the epoch (on a fresh shuffle of the data,
as after any resume) and then the remaining epochs. A second Ctrl-C stops at
once.
"""

import contextlib
import csv
import io
import json
import os
import re
import shutil
import signal
import sys
import threading
import time

import keras
import numpy as np

from keras_attention.tasks.common import phase
from keras_attention.tasks.epoch_callbacks import (
    EmptyEpochs,
    EpochSeconds,
    TimeBudget,
    numbers,
    progress,
)
from keras_attention.utils import keras_internals
from keras_attention.utils.files import (
    check_free_space,
    format_bytes,
    write_text,
    written_whole,
)

STATE = re.compile(r"^state-e(\d{4,})-b(\d{6,})\.weights\.h5$")
KEPT_STATES = 2
SIGNAL_EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by a signal after saving where it was; the same
    command resumes from there. `exit_status` is 128 + the signal's number
    (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message, signal_number):
        super().__init__(message)
        self.exit_status = SIGNAL_EXIT_STATUS.get(signal_number, 128 + signal_number)


class DamagedCheckpointError(RuntimeError):
    """A checkpoint that cannot be read, with no earlier one to fall back
    on."""

    exit_status = 1


# The epoch log


def read_epoch_log(path):
    """The rows of an `epochs.csv` as dicts of floats (epoch as int),
    without the columns a row could not fill; a row that cannot be read (a
    file damaged outside the run) ends the log there."""
    return _EpochLog(path).rows


class _EpochLog:
    """`epochs.csv`, rewritten whole after every epoch."""

    def __init__(self, path):
        self.path = path
        self.rows = []
        if not os.path.exists(path):
            return
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines(keepends=True)
        if not lines or not lines[0].endswith("\n"):
            return
        header = next(csv.reader(lines[:1]))
        for number, line in enumerate(lines[1:], start=2):
            if not line.endswith("\n"):
                break  # cut short by a kill (logs older than atomic writes)
            values = next(csv.reader([line]), [])
            try:
                # "NA": a column this epoch did not fill.
                row = {
                    key: int(value) if key == "epoch" else float(value)
                    for key, value in zip(header, values, strict=True)
                    if value != "NA"
                }
                if "epoch" not in row:
                    raise ValueError("no epoch")
            except ValueError:
                phase(
                    f"{path} line {number} cannot be read ({line.strip()[:40]!r}); "
                    "the log keeps the epochs before it"
                )
                break
            self.rows.append(row)

    def keep_epochs_before(self, epochs):
        """Drops the rows of epochs from `epochs` on (logged after the
        checkpoint the run resumes from); returns the rows kept."""
        kept = [row for row in self.rows if row["epoch"] < epochs]
        if len(kept) != len(self.rows):
            self.rows = kept
            self._write()
        return kept

    def append(self, epoch, logs):
        self.rows.append({"epoch": epoch, **numbers(logs)})
        self._write()

    def _write(self):
        columns = []
        for row in self.rows:
            columns += [key for key in sorted(row) if key not in columns]
        columns = ["epoch", *(key for key in columns if key != "epoch")]
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(columns)
        for row in self.rows:
            writer.writerow([_cell(row.get(key, "NA")) for key in columns])
        write_text(self.path, text.getvalue())


def _cell(value):
    if isinstance(value, str | int):
        return str(value)
    return repr(float(value))


# Checkpoints


class _State:
    """A checkpoint: `epochs` finished and `batches` of the next trained;
    `steps` and `seconds` describe that unfinished epoch."""

    def __init__(self, folder, epochs, batches, steps=None, seconds=0.0):
        self.folder, self.epochs, self.batches = folder, epochs, batches
        self.steps, self.seconds = steps, seconds

    @property
    def name(self):
        return f"state-e{self.epochs:04d}-b{self.batches:06d}"

    @property
    def path(self):
        return os.path.join(self.folder, f"{self.name}.weights.h5")

    @property
    def sidecar(self):
        return os.path.join(self.folder, f"{self.name}.json")

    def remove(self):
        for path in (self.path, self.sidecar):
            with contextlib.suppress(OSError):
                os.remove(path)

    def describe(self):
        if not self.batches:
            return f"after epoch {self.epochs}"
        of = f" of {self.steps}" if self.steps else ""
        return f"in epoch {self.epochs + 1}, after batch {self.batches}{of}"


class Checkpoints:
    """The checkpoints of one run folder (`<out>/checkpoints`)."""

    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.log = _EpochLog(os.path.join(folder, "epochs.csv"))
        self.best_path = os.path.join(folder, "best.weights.h5")
        self.final_path = os.path.join(folder, "final.weights.h5")
        for name in os.listdir(folder):
            if ".partial." in name:  # a write a kill cut short
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(folder, name))

    def states(self):
        """The checkpoints on disk, newest first."""
        found = []
        for name in os.listdir(self.folder):
            match = STATE.match(name)
            if match:
                found.append(_State(self.folder, *map(int, match.groups())))
        return sorted(found, key=lambda s: (s.epochs, s.batches), reverse=True)

    def newest_readable(self):
        """The newest checkpoint that reads whole, or None when there is
        none; a damaged one is reported and passed over. Raises
        `DamagedCheckpointError` when every checkpoint is damaged."""
        damaged = []
        for state in self.states():
            problem = unreadable(state.path)
            if problem is None:
                if damaged:
                    phase(
                        f"{damaged[0][0]} is damaged ({damaged[0][1]}); resuming "
                        f"from the checkpoint before it, {state.describe()}"
                    )
                if state.batches:
                    _read_sidecar(state)
                return state
            damaged.append((state.path, problem))
        if damaged:
            path, problem = damaged[0]
            raise DamagedCheckpointError(
                f"{path} is damaged ({problem}) and no earlier checkpoint is left; "
                "run the same command with --restart to train afresh in this folder"
            )
        return None

    def save(self, model, state, expected_bytes):
        """Writes `model`'s weights and optimizer as `state`, then drops the
        checkpoints older than the newest `KEPT_STATES`."""
        if state.batches:
            write_text(
                state.sidecar,
                json.dumps({"steps": state.steps, "seconds": state.seconds}),
            )
        self.save_weights(model, state.path, expected_bytes)
        for old in self.states()[KEPT_STATES:]:
            old.remove()

    def save_weights(self, model, path, expected_bytes):
        with written_whole(path, expected_bytes) as partial:
            model.save_weights(partial)

    def drop_states(self):
        for state in self.states():
            state.remove()


def unreadable(path):
    """Why the HDF5 file at `path` cannot be read whole (one line), or None
    when every one of its arrays reads."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            arrays = []
            f.visititems(
                lambda _, item: (
                    arrays.append(item) if isinstance(item, h5py.Dataset) else None
                )
            )
            for array in arrays:
                array[()]
    except Exception as error:  # noqa: BLE001 (any failure means damaged)
        message = str(error).strip().splitlines()
        text = message[0] if message else type(error).__name__
        # h5py: "Unable to synchronously open file (truncated file: ...)"
        inner = re.search(r"\((.*)\)$", text)
        return inner.group(1) if inner else text
    return None


def _read_sidecar(state):
    try:
        with open(state.sidecar) as f:
            record = json.load(f)
        state.steps = int(record["steps"]) if record.get("steps") else None
        state.seconds = float(record.get("seconds", 0.0))
    except (OSError, ValueError, KeyError, TypeError):
        state.steps = None


def checkpoint_bytes(model):
    """About the size of a checkpoint of `model` (weights and optimizer
    state; Adam's two moments where the optimizer is not built yet)."""
    weights = sum(_bytes(v) for v in model.weights)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        state = sum(_bytes(v) for v in optimizer.variables)
    else:
        state = 2 * sum(_bytes(v) for v in model.trainable_weights)
    return weights + state


def _bytes(variable):
    return int(np.prod(variable.shape)) * np.dtype(variable.dtype).itemsize


# Signals


class _StopRequests:
    """While active (in the main thread), SIGTERM and SIGINT are recorded for
    the training loop to act on at the next batch, instead of ending the
    process; a second SIGINT raises `KeyboardInterrupt` at once."""

    def __init__(self):
        self.signal_number = None
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for number in SIGNAL_EXIT_STATUS:
                self.previous[number] = signal.signal(number, self._record)
        return self

    def __exit__(self, *exc_info):
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def _record(self, number, frame):
        if self.signal_number is not None and number == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_number = number
        print(
            f"\n[keras-attention] {signal.Signals(number).name}: saving a checkpoint "
            "at the end of this batch, then stopping",
            file=sys.stderr,
            flush=True,
        )


class _RunCheckpoints(keras.callbacks.Callback):
    """Logs every epoch, saves its checkpoint (and the best weights), and
    acts on stop requests; restores `restore` when training begins."""

    def __init__(self, checkpoints, requests, expected_bytes, restore, monitor, best):
        super().__init__()
        self.checkpoints, self.requests = checkpoints, requests
        self.expected_bytes = expected_bytes
        self.restore = restore
        self.monitor = monitor
        # The best monitored figure so far; None: no best weights are kept
        # (no early stopping).
        self.best = best
        self.offset, self.carried_seconds = 0, 0.0
        if restore is not None and restore.batches:
            self.offset, self.carried_seconds = restore.batches, restore.seconds

    def on_train_begin(self, logs=None):
        if self.restore is not None:
            model = self.model
            # Keras' TensorFlow trainer builds the optimizer only when it
            # traces the first step: built here, its state loads too.
            optimizer = getattr(model, "optimizer", None)
            if optimizer is not None and not optimizer.built:
                optimizer.build(model.trainable_variables)
            model.load_weights(self.restore.path)
            self.restore = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.started = epoch, time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        number = self.requests.signal_number
        if number is None:
            return
        steps = self.params.get("steps")
        state = _State(
            self.checkpoints.folder,
            self.epoch,
            self.offset + batch + 1,
            steps=steps and self.offset + steps,
            seconds=self.carried_seconds + time.perf_counter() - self.started,
        )
        self.checkpoints.save(self.model, state, self.expected_bytes)
        self._stop(number, state)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        logs["seconds"] = logs.get("seconds", 0.0) + self.carried_seconds
        self.offset, self.carried_seconds = 0, 0.0
        self.checkpoints.log.append(epoch, logs)
        value = logs.get(self.monitor.name)
        if self.best is not None and self.monitor.better(value, self.best):
            self.best = float(value)
            self.checkpoints.save_weights(
                self.model, self.checkpoints.best_path, self.expected_bytes
            )
        state = _State(self.checkpoints.folder, epoch + 1, 0)
        self.checkpoints.save(self.model, state, self.expected_bytes)
        if self.requests.signal_number is not None:
            self._stop(self.requests.signal_number, state)

    def _stop(self, number, state):
        name = signal.Signals(number).name
        raise TrainingInterrupted(
            f"stopped by {name} {state.describe()}; saved {state.path}; the same "
            "command resumes from there",
            number,
        )


def fit_resumable(
    model,
    train_data,
    out_dir,
    epochs,
    validation_data,
    patience=None,
    monitor="val_loss",
    time_budget_minutes=None,
    callbacks=None,
    epoch_metrics=None,
    verbose="auto",
    **fit_kwargs,
):
    """`model.fit` that resumes where a killed, stopped or crashed run left
    off, with the history of every epoch, interrupted runs included (see the
    module's docstring for the files it keeps).

    A training in which an epoch had no full batch raises `RuntimeError`
    instead of saving final weights; when no epoch trained at all, the
    checkpoints go too, so that the next run starts afresh.

    Args:
        model: a compiled model.
        train_data: training data for `fit`.
        out_dir: output folder of the run.
        epochs: total epochs.
        validation_data: validation data for `fit`.
        patience: early-stopping patience in epochs; None trains every epoch
            and keeps the last weights.
        monitor: the figure of an epoch's logs that early stopping and the
            best weights follow: `"val_loss"` (lower is better) or a score
            that an `epoch_metrics` callback adds, such as
            `"val_macro_f1"` (higher is better: `Monitor.HIGHER_IS_BETTER`).
        time_budget_minutes: no epoch starts that would end later than this
            (`TimeBudget`).
        callbacks: extra callbacks.
        epoch_metrics: callbacks that add figures to an epoch's logs (FID,
            say); they run before the epoch's line is written.
        verbose: how training shows its progress (`progress`): `"auto"`,
            Keras' bar at a terminal and one line per epoch elsewhere, or
            Keras' own 0, 1 or 2.
        **fit_kwargs: more `fit` arguments.

    Returns:
        The history dict: `train_seconds` and `epochs` over all runs, and a
        list per metric (one entry per epoch).

    Raises:
        TrainingInterrupted: SIGTERM or SIGINT stopped training, after a
            checkpoint was saved.
        DamagedCheckpointError: no checkpoint of the folder can be read.
        keras_attention.utils.files.DiskFullError: too little space for the
            checkpoints (checked before training and before every write).
    """
    checkpoints = Checkpoints(os.path.join(out_dir, "checkpoints"))
    if os.path.exists(checkpoints.final_path):
        problem = unreadable(checkpoints.final_path)
        if problem is not None:
            raise DamagedCheckpointError(
                f"{checkpoints.final_path} is damaged ({problem}); run the same "
                "command with --restart to train afresh in this folder"
            )
        phase(f"training had finished; loading {checkpoints.final_path}")
        model.load_weights(checkpoints.final_path)
        return _history(checkpoints.log.rows, patience, monitor)
    monitor = Monitor(monitor)
    resume = checkpoints.newest_readable()
    logged = checkpoints.log.keep_epochs_before(resume.epochs if resume else 0)
    if resume is not None and resume.batches and not resume.steps:
        phase(
            f"{resume.path} does not say how many batches its epoch has; resuming "
            f"from the start of epoch {resume.epochs + 1}"
        )
        resume.batches = 0
    if resume is not None:
        phase(f"resuming {resume.describe()} (from {resume.path})")
    expected_bytes = checkpoint_bytes(model)
    weights_bytes = sum(_bytes(v) for v in model.weights)
    # The kept checkpoints and one being written, the best and final weights
    # and the saved model (weights and optimizer).
    needed = (KEPT_STATES + 2) * expected_bytes + 2 * weights_bytes
    check_free_space(
        checkpoints.folder,
        needed,
        f"training (checkpoints of {format_bytes(expected_bytes)})",
    )
    # With early stopping, the best monitored figure so far (the worst
    # possible before the first epoch); None without.
    best = monitor.best_of(logged) if patience else None
    empty_epochs = EmptyEpochs()
    budget = TimeBudget(time_budget_minutes * 60) if time_budget_minutes else None
    initial_epoch = restored_epochs = resume.epochs if resume else 0
    verbose, progress_lines = progress(verbose, epochs)
    keras_internals.build_training_state(model, train_data)
    with _StopRequests() as requests:

        def train(first, last, restore, best, arguments):
            """One `fit` from epoch `first` to `last`; returns the best
            monitored figure after it."""
            record = _RunCheckpoints(
                checkpoints, requests, expected_bytes, restore, monitor, best
            )
            model.fit(
                train_data,
                validation_data=validation_data,
                initial_epoch=first,
                epochs=last,
                # Those before `record` add to an epoch's logs, which it
                # writes with the checkpoint; those after see it saved.
                callbacks=[
                    empty_epochs,
                    EpochSeconds(),
                    *(epoch_metrics or []),
                    record,
                    *progress_lines,
                    *(callbacks or []),
                    *_stopping(patience, monitor, best, budget),
                ],
                verbose=verbose,
                **arguments,
            )
            return record.best

        if resume is not None and resume.batches:
            # The rest of the interrupted epoch, then the remaining epochs.
            rest = dict(fit_kwargs, steps_per_epoch=resume.steps - resume.batches)
            best = train(initial_epoch, initial_epoch + 1, resume, best, rest)
            initial_epoch, resume = initial_epoch + 1, None
        if initial_epoch < epochs and not getattr(model, "stop_training", False):
            train(initial_epoch, epochs, resume, best, fit_kwargs)
        elif resume is not None:
            model.load_weights(resume.path)
    logged = checkpoints.log.rows
    empty = empty_epochs.epochs
    if empty:
        if not restored_epochs and len(empty) == len(logged):
            # Nothing was trained: what is saved would make the next run, with
            # sane arguments, resume from an untrained model.
            shutil.rmtree(checkpoints.folder, ignore_errors=True)
        raise RuntimeError(
            f"training ran out of data: epoch {empty[0]} had no full batch "
            "(is the batch size larger than the training split?); nothing saved"
        )
    if patience and os.path.exists(checkpoints.best_path):
        problem = unreadable(checkpoints.best_path)
        if problem is None:
            model.load_weights(checkpoints.best_path)
        else:
            phase(
                f"{checkpoints.best_path} is damaged ({problem}); keeping the "
                "weights training ended with"
            )
    checkpoints.save_weights(model, checkpoints.final_path, weights_bytes)
    checkpoints.drop_states()
    return _history(logged, patience, monitor.name)


class Monitor:
    """The figure that early stopping follows, by its name in an epoch's
    logs, and which way is better."""

    HIGHER_IS_BETTER = ("val_macro_f1", "val_accuracy")

    def __init__(self, name):
        if not isinstance(name, str) or not name.startswith("val_"):
            raise ValueError(
                "`monitor` must name a validation figure of the epoch logs, such "
                f"as 'val_loss' or 'val_macro_f1'; received {name!r}."
            )
        self.name = name
        self.mode = "max" if name in self.HIGHER_IS_BETTER else "min"

    def better(self, value, best):
        if value is None:
            return False
        return value > best if self.mode == "max" else value < best

    def best_of(self, rows):
        values = [row[self.name] for row in rows if self.name in row]
        worst = -np.inf if self.mode == "max" else np.inf
        if not values:
            return worst
        return max(values) if self.mode == "max" else min(values)


def _stopping(patience, monitor, best, budget):
    stopping = []
    if patience:
        baseline = None if best is None or np.isinf(best) else best
        stopping.append(
            keras.callbacks.EarlyStopping(
                monitor=monitor.name,
                mode=monitor.mode,
                patience=patience,
                baseline=baseline,
            )
        )
    if budget is not None:
        stopping.append(budget)
    return stopping


def _history(logged, patience, monitor="val_loss"):
    metrics = [
        k for k in (logged[0] if logged else {}) if k not in ("epoch", "seconds")
    ]
    history = {
        "train_seconds": round(sum(row["seconds"] for row in logged), 1),
        "epochs": logged[-1]["epoch"] + 1 if logged else 0,
        **{k: [row[k] for row in logged] for k in metrics},
    }
    if patience and logged:
        values = history[monitor]
        best = Monitor(monitor).best_of(logged)
        history["best_epoch"] = int(values.index(best)) + 1
    return history
