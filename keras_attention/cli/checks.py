"""Checks of the command line that involve the file system or several
arguments, made before any work starts (standard library only)."""

import contextlib
import json
import os
import zipfile

from keras_attention.names import (
    ENCODER_MODELS,
    KERAS_DISTRIBUTIONS,
    LOADABLE_MODELS,
    MASKED_LANGUAGE_MODELS,
)


class CommandError(Exception):
    """A failure the command reports in one line (exit status 1), or a bad
    argument (`exit_status=2`)."""

    def __init__(self, message, exit_status=1):
        super().__init__(message)
        self.exit_status = exit_status


def check_output_folder(path):
    """Raises `CommandError` unless `path` is a folder that exists or can be
    created, and that can be written; leaves no trace of the check."""
    created = []
    try:
        if os.path.exists(path) and not os.path.isdir(path):
            raise CommandError(f"--out {path!r} exists and is not a folder", 2)
        missing = os.path.abspath(path)
        while not os.path.exists(missing):
            created.append(missing)
            missing = os.path.dirname(missing)
        if not os.path.isdir(missing):
            raise CommandError(
                f"--out {path!r} cannot be created: {missing!r} is not a folder", 2
            )
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".keras-attention-write-check-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        raise CommandError(
            f"--out {path!r} cannot be written: {error.strerror or error}", 2
        ) from error
    finally:
        for folder in created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


# Where the registered class names do not say it.
_LOADABLE_DESCRIPTIONS = {"gan": "the generator a run saves as OUT/model.keras"}


def check_saved_model(path, command, option="--load", expected=None):
    """Raises `CommandError` unless `path` is a readable `.keras` archive
    holding a model that `command` trains (or one of `expected`, registered
    names); reads only the archive's index and config (no TensorFlow). The
    wrong file (missing, a folder, not a `.keras` archive, another kind of
    model) is a bad argument (exit status 2); the right kind of file that
    cannot be read whole is a failure (1). Messages name `option`."""
    expected = expected or LOADABLE_MODELS[command]
    if not os.path.exists(path):
        raise CommandError(f"{option} {path!r}: no such file", 2)
    if os.path.isdir(path):
        hint = os.path.join(
            path, "encoder.keras" if option == "--encoder" else "model.keras"
        )
        hint = f"; did you mean {hint!r}?" if os.path.isfile(hint) else ""
        raise CommandError(f"{option} {path!r} is a folder, not a .keras file{hint}", 2)
    try:
        with open(path, "rb") as f:
            start = f.read(8)
    except OSError as error:
        raise CommandError(
            f"{option} {path!r} cannot be read: {error.strerror or error}"
        ) from error
    if start.startswith(b"\x89HDF"):
        raise CommandError(
            f"{option} {path!r} is an HDF5 file (weights only, or a legacy .h5 "
            "model), not a .keras archive of a whole model (model.save(...keras))",
            2,
        )
    if not start.startswith(b"PK"):
        raise CommandError(
            f"{option} {path!r} is not a .keras archive (a zip file); it starts "
            f"with {start!r}",
            2,
        )
    config = _archive_config(path, option)
    kind = _model_kind(config)
    if kind not in expected:
        reads = _names(expected)
        reader = f"keras-attention {command}"
        if option == "--load":
            reads = _LOADABLE_DESCRIPTIONS.get(command) or reads
        else:
            reader += f" {option}"
        raise CommandError(
            f"{option} {path!r} holds a {kind.split('>')[-1]} model; "
            f"`{reader}` reads {reads}",
            2,
        )


def check_encoder(path, command):
    """`check_saved_model` for `--encoder`: the encoder `pretrain` writes."""
    check_saved_model(path, command, "--encoder", ENCODER_MODELS)


def check_pretraining(path, command):
    """`check_saved_model` for `--continue-from`: the masked language model
    `pretrain` writes."""
    check_saved_model(path, command, "--continue-from", MASKED_LANGUAGE_MODELS)


def check_draft(path, command, vocabulary_size=None, load=None):
    """`check_saved_model` for `--draft`: a GPT (`speculative_generate`'s
    draft) whose vocabulary has `vocabulary_size` ids, or as many as the
    model saved at `load`; reads the archives' configs only."""
    check_saved_model(path, command, "--draft", ("keras_attention>GPT",))
    draft = _archive_config(path, "--draft").get("config") or {}
    if load is not None:
        target = _archive_config(load, "--load")
        if _model_kind(target) != "keras_attention>GPT":
            raise CommandError(
                f"--draft proposes tokens for a GPT; --load {load!r} holds a "
                f"{_model_kind(target).split('>')[-1]} model",
                2,
            )
        vocabulary_size = (target.get("config") or {}).get("vocabulary_size")
    if draft.get("vocabulary_size") != vocabulary_size:
        raise CommandError(
            f"--draft {path!r} has a vocabulary of {draft.get('vocabulary_size')} "
            f"ids, the model {vocabulary_size}: the draft must share the model's "
            "tokenizer",
            2,
        )


def _archive_config(path, option):
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "config.json" not in names:
                raise CommandError(
                    f"{option} {path!r} is a zip file without config.json, not a "
                    ".keras archive",
                    2,
                )
            if "model.weights.h5" not in names:
                raise CommandError(
                    f"{option} {path!r} is a corrupt .keras archive: it holds no "
                    "model.weights.h5"
                )
            damaged = archive.testzip()
            if damaged is not None:
                raise CommandError(
                    f"{option} {path!r} is a corrupt .keras archive: {damaged} fails "
                    "its checksum"
                )
            return json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise CommandError(
            f"{option} {path!r} is a corrupt .keras archive (truncated or damaged: "
            f"{error})"
        ) from error


def _names(registered_names):
    return ", ".join(name.split(">")[-1] for name in registered_names)


def _model_kind(config):
    """The registered name of a saved model's class, or a functional
    model's name."""
    if not isinstance(config, dict):
        return "unknown"
    if config.get("class_name") == "Functional":
        return str((config.get("config") or {}).get("name", "Functional"))
    return str(config.get("registered_name") or config.get("class_name"))


def check_strategy_backend(strategy):
    if strategy == "default":
        return
    import keras

    engine = (
        ("keras.distribution", "jax")
        if strategy in KERAS_DISTRIBUTIONS
        else ("tf.distribute", "tensorflow")
    )
    if keras.backend.backend() != engine[1]:
        raise CommandError(
            f"--strategy {strategy} uses {engine[0]}, which trains on the "
            f"{engine[1]} backend (KERAS_BACKEND={engine[1]}); the backend is "
            f"{keras.backend.backend()!r}",
            2,
        )


def check_arguments(args, command):
    """The checks every subcommand shares, then the subcommand's own
    (`command.check(args)`, where it has one); raises `CommandError`. Fills
    in the output folder where it depends on --load."""
    inputs = getattr(args, "inputs", None)
    load = getattr(args, "load", None)
    check_strategy_backend(getattr(args, "strategy", "default"))
    shards = getattr(args, "model_shards", None)
    if shards is not None and args.strategy != "model-parallel":
        raise CommandError(
            f"--model-shards {shards} needs --strategy model-parallel; received "
            f"--strategy {args.strategy}",
            2,
        )
    if getattr(args, "restart", False) and load:
        raise CommandError(
            "--restart trains afresh and --load uses a trained model: give one of them",
            2,
        )
    if inputs and getattr(args, inputs) and not load:
        raise CommandError(
            f"{inputs} to {args.command} need --load DIR/model.keras; without "
            "--load the command trains a model",
            2,
        )
    if load:
        check_saved_model(load, args.command)
        if args.out is None:
            args.out = os.path.dirname(load) or "."
    elif args.out is None:
        args.out = f"runs/{args.command}"
    if hasattr(command, "check"):
        command.check(args)
    if not load or getattr(command, "WRITES_WITH_LOAD", False):
        check_output_folder(args.out)
