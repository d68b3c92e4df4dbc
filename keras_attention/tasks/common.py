"""Output folder conventions shared by the end-to-end jobs."""

import json
import os
import platform

import keras

from keras_attention.data.tokenization import train_word_piece, word_piece_tokenizer
from keras_attention.utils.files import write_text
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
    """Writes `record` as JSON to `path`, whole (`written_whole`)."""
    return write_text(path, json.dumps(record, **kwargs))


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
        write_text(path, "\n".join(vocabulary) + "\n")
        if not extra_tokens:
            return tokenizer
    return word_piece_tokenizer(path, lowercase=lowercase)
