"""Output folder conventions shared by the end-to-end jobs."""

import json
import os
import platform
import time

import keras

from keras_attention.data.tokenization import train_word_piece, word_piece_tokenizer


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
    path = os.path.join(out_dir, "metrics.json")
    # Top-level keys sorted; nested ones (such as length buckets) keep their
    # order.
    with open(path, "w") as f:
        json.dump(dict(sorted(record.items())), f, indent=2)
    return path


def phase(message):
    """One line per phase of a long job."""
    print(f"[keras-attention] {message}", flush=True)


def cached_word_piece(path, texts, vocabulary_size, lowercase=False):
    """A WordPiece tokenizer learned from `texts` and saved to `path` (one
    token per line), or loaded from `path` when it exists, so that a resumed
    run tokenizes exactly as the interrupted one did."""
    if os.path.exists(path):
        return word_piece_tokenizer(path, lowercase=lowercase)
    tokenizer = train_word_piece(texts, vocabulary_size, lowercase=lowercase)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokenizer.get_vocabulary()) + "\n")
    return tokenizer


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
