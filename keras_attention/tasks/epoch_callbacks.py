"""The callbacks of a training run: its time budget, each epoch's seconds,
a line per epoch where standard output is not a terminal, and the epochs in
which no batch was trained (`tasks.resumable.fit_resumable` adds them)."""

import contextlib
import sys
import time

import keras
import numpy as np

from keras_attention.tasks.common import phase


class TimeBudget(keras.callbacks.Callback):
    """Stops training before an epoch that would end past `seconds` of
    training, judging by the longest epoch so far (counted from the first
    `fit` it is given to, over later ones too)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.started = None

    def on_train_begin(self, logs=None):
        if self.started is None:
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
    """Adds each epoch's wall time to its logs as `seconds`."""

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["seconds"] = time.perf_counter() - self.started


class EpochLines(keras.callbacks.Callback):
    """Prints one line per finished epoch, such as `[keras-attention] epoch
    2/10: loss 0.4123, val_loss 0.3871 (12.3 s)`.

    It shows the progress where standard output is a file or a pipe: Keras'
    bar writes every redraw there, hundreds of kilobytes a run.

    Args:
        epochs: the training's total epochs (a resumed run's `fit` may be
            given fewer).
    """

    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        figures = numbers(logs)
        seconds = figures.pop("seconds", None)
        line = f"epoch {epoch + 1}/{self.epochs}"
        # An epoch without a batch has no figure (training then stops).
        if figures:
            line += ": " + ", ".join(f"{k} {v:.4g}" for k, v in figures.items())
        if seconds is not None:
            line += f" ({seconds:.1f} s)"
        phase(line)


def progress(verbose, epochs):
    """How a training shows its progress: `(verbose, callbacks)`, Keras'
    `verbose` setting and the callbacks to add for it.

    The one place where the training subcommands' default is decided.

    Args:
        verbose: `"auto"`: Keras' live bar when standard output is a
            terminal, else one line per epoch (`EpochLines`), so that a log
            file stays readable; 0, 1 or 2: Keras' own setting.
        epochs: the training's total epochs.

    Returns:
        `(verbose, callbacks)` for `model.fit`.
    """
    if verbose != "auto":
        return verbose, []
    isatty = getattr(sys.stdout, "isatty", None)
    if isatty is not None and isatty():
        return 1, []
    return 0, [EpochLines(epochs)]


class EmptyEpochs(keras.callbacks.Callback):
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


def numbers(logs):
    """The figures of an epoch's `logs` that are numbers, as floats."""
    numbers = {}
    for key, value in (logs or {}).items():
        with contextlib.suppress(TypeError, ValueError):
            numbers[key] = float(np.asarray(value))
    return numbers
