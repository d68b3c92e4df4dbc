"""Output folder conventions shared by the end-to-end jobs."""

import contextlib
import hashlib
import json
import os
import platform

import keras

from keras_attention.data.packing import padding_fraction
from keras_attention.data.tokenization import train_word_piece, word_piece_tokenizer
from keras_attention.utils.files import write_text
from keras_attention.utils.progress import phase


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


def check_packed_rows(rows, batch_size, length, unit):
    """Checks that the packed training `rows` (`data.packing`) of `length`
    `unit` fill a batch of `batch_size`, announces how many there are and
    how much of them is padding, and returns that fraction of padding."""
    what = f"packed rows of {length} {unit}"
    check_training_size(batch_size, len(rows["token_ids"]), what)
    fraction = padding_fraction(rows)
    phase(f"{len(rows['token_ids']):,} {what}, {fraction:.1%} of them padding")
    return fraction


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
    `[MASK]`) are appended to the learned vocabulary.

    Learning a vocabulary (keras-hub's, through tensorflow-text) takes up to
    tens of seconds, and the same texts give the same vocabulary: one learned
    from the same texts with the same settings by an earlier run on this
    machine is read from `learned_vocabularies_folder()` instead."""
    if not os.path.exists(path):
        texts = [str(text) for text in texts]
        learned = os.path.join(
            learned_vocabularies_folder(),
            _vocabulary_key(texts, vocabulary_size, lowercase) + ".txt",
        )
        if os.path.exists(learned):
            with open(learned, encoding="utf-8") as file:
                vocabulary = file.read().splitlines()
        else:
            tokenizer = train_word_piece(texts, vocabulary_size, lowercase=lowercase)
            vocabulary = tokenizer.get_vocabulary()
            with contextlib.suppress(OSError):  # a cache: the run goes on without
                os.makedirs(os.path.dirname(learned), exist_ok=True)
                write_text(learned, "\n".join(vocabulary) + "\n")
        write_text(path, "\n".join([*vocabulary, *extra_tokens]) + "\n")
    return word_piece_tokenizer(path, lowercase=lowercase)


def learned_vocabularies_folder():
    """Where `cached_word_piece` keeps the vocabularies it learned:
    `$KERAS_ATTENTION_CACHE/vocabularies`, by default under
    `$XDG_CACHE_HOME/keras_attention` (`~/.cache/keras_attention`)."""
    root = os.environ.get("KERAS_ATTENTION_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "keras_attention",
    )
    return os.path.join(root, "vocabularies")


def _vocabulary_key(texts, vocabulary_size, lowercase):
    """A name for the vocabulary of `texts` at these settings and this
    keras-hub release (whose learner could change)."""
    import keras_hub

    digest = hashlib.sha256(
        json.dumps([keras_hub.__version__, vocabulary_size, lowercase]).encode()
    )
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()
