"""Output folder conventions shared by the end-to-end jobs."""

import csv
import json
import os
import platform
import shutil
import time

import keras

from keras_attention.data.tokenization import train_word_piece, word_piece_tokenizer
from keras_attention.utils.progress import phase  # noqa: F401 (tasks import it here)


class ArgumentError(ValueError):
    """An argument that does not fit the data, found once the data is loaded
    and before any training (the command line exits with status 2)."""

    exit_status = 2


def check_training_size(batch_size, num_examples, what, num_train=None, available=None):
    """Raises `ArgumentError` unless a training split of `num_examples`
    `what` fills at least one batch of `batch_size`, and `num_train` (when
    given) does not ask for more than the `available` examples."""
    if num_train is not None and available is not None and num_train > available:
        raise ArgumentError(
            f"num_train {num_train:,} is more than the {available:,} {what} of "
            "the training split"
        )
    if batch_size > num_examples:
        raise ArgumentError(
            f"batch size {batch_size:,} is larger than the training split "
            f"({num_examples:,} {what}): no full batch to train on"
        )


def write_json(path, record, **kwargs):
    """Writes `record` as JSON to a temporary file renamed to `path`: the
    file exists only complete, whenever the run is killed."""
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        json.dump(record, f, **kwargs)
    os.replace(partial, path)
    return path


def prepare_output(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    return out_dir


def write_metrics(out_dir, metrics):
    """Writes the flat `metrics.json` of a run, with the machine it ran on."""
    record = dict(metrics)
    record.setdefault("backend", keras.backend.backend())
    record.setdefault("keras_version", keras.__version__)
    record.setdefault(
        "machine",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
    )
    # Top-level keys sorted; nested ones (such as length buckets) keep their
    # order.
    return write_json(
        os.path.join(out_dir, "metrics.json"), dict(sorted(record.items())), indent=2
    )


def cached_word_piece(path, texts, vocabulary_size, lowercase=False, extra_tokens=()):
    """A WordPiece tokenizer learned from `texts` and saved to `path` (one
    token per line), or loaded from `path` when it exists, so that a resumed
    run tokenizes exactly as the interrupted one did. `extra_tokens` (such as
    `[MASK]`) are appended to the learned vocabulary."""
    if not os.path.exists(path):
        tokenizer = train_word_piece(texts, vocabulary_size, lowercase=lowercase)
        vocabulary = [*tokenizer.get_vocabulary(), *extra_tokens]
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(vocabulary) + "\n")
        if not extra_tokens:
            return tokenizer
    return word_piece_tokenizer(path, lowercase=lowercase)


class TimeBudget(keras.callbacks.Callback):
    """Stops training before an epoch that would end past `seconds` of
    training, judging by the longest epoch so far."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_begin(self, logs=None):
        self.started = self.epoch_started = time.perf_counter()
        self.longest_epoch = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        self.longest_epoch = max(self.longest_epoch, now - self.epoch_started)
        if now - self.started + self.longest_epoch > self.seconds:
            self.model.stop_training = True


class EpochSeconds(keras.callbacks.Callback):
    """Adds each epoch's wall time to its logs as `seconds` (so that
    `CSVLogger` records it)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["seconds"] = time.perf_counter() - self.started


class _EmptyEpochs(keras.callbacks.Callback):
    """Records the epochs (1-based) in which no batch was trained: a batch
    size larger than the data gives epochs that `fit` ends at once, with logs
    that hold no loss under any name."""

    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1

    def on_epoch_end(self, epoch, logs=None):
        if not self.batches:
            self.epochs.append(epoch + 1)


def read_epoch_log(path):
    """The rows of a `CSVLogger` file as dicts of floats (epoch as int),
    without the columns it could not fill."""
    return [row for _, row in _epoch_log_lines(path)[1]]


def _epoch_log_lines(path):
    """The header line of a `CSVLogger` file and `(line, row)` for each
    complete row: a last line that a kill cut short (no line end) is left
    out."""
    if not os.path.exists(path):
        return None, []
    with open(path, newline="") as f:
        lines = f.read().splitlines(keepends=True)
    if not lines or not lines[0].endswith("\n"):
        return None, []
    header = next(csv.reader(lines[:1]))
    rows = []
    for line in lines[1:]:
        if not line.endswith("\n"):
            break
        # CSVLogger writes "NA" for the `val_` columns of a run without
        # validation data.
        values = next(csv.reader([line]))
        row = {
            k: int(v) if k == "epoch" else float(v)
            for k, v in zip(header, values, strict=True)
            if v != "NA"
        }
        rows.append((line, row))
    return lines[0], rows


def fit_resumable(
    model,
    train_data,
    out_dir,
    epochs,
    validation_data,
    patience=None,
    time_budget_minutes=None,
    callbacks=None,
    epoch_metrics=None,
    verbose=1,
    **fit_kwargs,
):
    """`model.fit` that survives being killed at any moment, with the history
    of every epoch, interrupted runs included.

    Under `out_dir/checkpoints`: `BackupAndRestore` saves the model and
    optimizer after every epoch (in `backup/`), so a re-run resumes from the
    last finished epoch; `epochs.csv` logs every epoch's metrics and seconds;
    with `patience`, `best.weights.h5` holds the weights of the epoch with the
    best validation loss so far (before the interruption too), which the model
    gets back at the end, and training stops after `patience` epochs that do
    not beat it; and `final.weights.h5` holds the weights training ended with,
    so that a run killed after training but before its caller saved the model
    does not train again.

    An epoch's log line is written before its backup, and a re-run drops the
    lines of epochs after the backup: a kill between the two repeats that
    epoch once, and the log keeps one line per epoch.

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
        time_budget_minutes: no epoch starts that would end later than this
            (`TimeBudget`).
        callbacks: extra callbacks.
        epoch_metrics: callbacks that add figures to an epoch's logs (FID,
            say); they run before the epoch's line is written.
        verbose: Keras progress bar setting.
        **fit_kwargs: more `fit` arguments.

    Returns:
        The history dict: `train_seconds` and `epochs` over all runs, and a
        list per metric (one entry per epoch).
    """
    folder = os.path.join(out_dir, "checkpoints")
    os.makedirs(folder, exist_ok=True)
    log_path = os.path.join(folder, "epochs.csv")
    best_path = os.path.join(folder, "best.weights.h5")
    final_path = os.path.join(folder, "final.weights.h5")
    backup = os.path.join(folder, "backup")
    if os.path.exists(final_path):
        phase(f"training had finished; loading {final_path}")
        model.load_weights(final_path)
        return _history(read_epoch_log(log_path), patience)
    logged = _drop_epochs_after(log_path, _backed_up_epochs(backup))
    best_loss = min(
        (row["val_loss"] for row in logged if "val_loss" in row), default=None
    )
    if logged:
        phase(f"resuming after epoch {logged[-1]['epoch'] + 1} (from {folder})")
    empty_epochs = _EmptyEpochs()
    callbacks = [
        empty_epochs,
        EpochSeconds(),
        *(epoch_metrics or []),
        keras.callbacks.CSVLogger(log_path, append=True),
        # Kept until the final weights are saved (a kill in between must not
        # lose the run); `double_checkpoint` keeps the previous backup for a
        # kill during a save.
        keras.callbacks.BackupAndRestore(
            backup, delete_checkpoint=False, double_checkpoint=True
        ),
        *(callbacks or []),
    ]
    if patience:
        callbacks += [
            keras.callbacks.ModelCheckpoint(
                best_path,
                save_best_only=True,
                save_weights_only=True,
                initial_value_threshold=best_loss,
            ),
            keras.callbacks.EarlyStopping(patience=patience, baseline=best_loss),
        ]
    if time_budget_minutes:
        callbacks.append(TimeBudget(time_budget_minutes * 60))
    model.fit(
        train_data,
        validation_data=validation_data,
        epochs=epochs,
        callbacks=callbacks,
        verbose=verbose,
        **fit_kwargs,
    )
    trained_before = len(logged)
    logged = read_epoch_log(log_path)
    empty = empty_epochs.epochs
    if empty:
        if not trained_before and len(empty) == len(logged):
            # Nothing was trained: what is saved would make the next run, with
            # sane arguments, resume from an untrained model.
            shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(
            f"training ran out of data: epoch {empty[0]} had no full batch "
            "(is the batch size larger than the training split?); nothing saved"
        )
    if patience and os.path.exists(best_path):
        model.load_weights(best_path)
    # Written whole, then renamed: the file exists only complete.
    partial = os.path.join(folder, "final.partial.weights.h5")
    model.save_weights(partial)
    os.replace(partial, final_path)
    shutil.rmtree(backup, ignore_errors=True)
    return _history(logged, patience)


def _backed_up_epochs(backup):
    """The number of epochs in `BackupAndRestore`'s backup folder (0 without
    one)."""
    for name in ("training_metadata.json", "training_metadata.json.bkp"):
        try:
            with open(os.path.join(backup, name)) as f:
                return int(json.load(f)["epoch"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return 0


def _drop_epochs_after(log_path, epochs):
    """Rewrites the log with the complete lines of its first `epochs` epochs
    (those that the backup holds) and returns their rows."""
    header, rows = _epoch_log_lines(log_path)
    kept = [(line, row) for line, row in rows if row["epoch"] < epochs]
    if os.path.exists(log_path):
        with open(log_path, "w", newline="") as f:
            f.writelines([header, *(line for line, _ in kept)] if kept else [])
    return [row for _, row in kept]


def _history(logged, patience):
    metrics = [
        k for k in (logged[0] if logged else {}) if k not in ("epoch", "seconds")
    ]
    history = {
        "train_seconds": round(sum(row["seconds"] for row in logged), 1),
        "epochs": logged[-1]["epoch"] + 1 if logged else 0,
        **{k: [row[k] for row in logged] for k in metrics},
    }
    if patience and logged:
        losses = history["val_loss"]
        history["best_epoch"] = int(losses.index(min(losses))) + 1
    return history
