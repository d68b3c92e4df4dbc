"""The `keras-attention` command: a thin shell over the package's public API.

One module per subcommand (its arguments, its own checks, its run and,
where it takes `--load`, its `use` of the loaded model);
`arguments` holds what they share (argument types, the training options),
`checks` the checks made before any work starts, and `keras_attention.names`
the names the subcommands and the tasks both accept.

Up to the start of the subcommand's work, the command uses the standard
library only: `--help` answers at once, and every argument (counts, model
lists, data, `--out`, `--load`) is checked before TensorFlow loads. Errors
print as one line, `keras-attention COMMAND: error: ...`, with exit status 2
for a bad argument and 1 for a failure; `--debug` shows the traceback.
SIGINT and SIGTERM end the command with 130 and 143, after a training has
saved where it stopped (`keras_attention.tasks.resumable`).
"""

import argparse
import contextlib
import importlib.util
import os
import signal
import sys
import traceback

from keras_attention.cli.arguments import (
    HelpFormatter,
    Parser,
    load_model,
    read_inputs,
)
from keras_attention.cli.checks import (
    CommandError,
    check_arguments,
    check_output_folder,
    check_saved_model,
)

__all__ = [
    "CommandError",
    "build_parser",
    "check_output_folder",
    "check_saved_model",
    "main",
    "read_inputs",
]

# The subcommands, each a module of this package. Imported by name: `from
# keras_attention.cli import translate` would import the package
# `keras_attention` (and with it Keras), which the console script avoids.
COMMANDS = {
    name: importlib.import_module(f"{__name__}.{name}")
    for name in (
        "demo",
        "translate",
        "classify",
        "caption",
        "gan",
        "lm",
        "pretrain",
        "bench",
    )
}
# What a subcommand imports beyond the library, unless its module says
# otherwise; the `apps` extra brings it.
APPLICATION_MODULES = ("tensorflow", "keras_hub", "sacrebleu", "matplotlib")
# Modules whose import prints start-up logs from C++ (CUDA probing, absl),
# which no environment variable silences; imported with stderr closed.
_NOISY_MODULES = ("tensorflow", "keras")
# A run that ended normally leaves its lock file empty
# (`keras_attention.tasks.run_folder`).
_LOCK_FILE = "run.lock"


class _Terminated(KeyboardInterrupt):
    """SIGTERM outside training (which saves first and raises its own)."""

    exit_status = 143


def _terminate(number, frame):
    raise _Terminated


def build_parser():
    parser = Parser(
        prog="keras-attention",
        description="Attention layers for Keras 3: reference tasks and benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="show the traceback of an error"
    )
    common.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's and XLA's start-up logs",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=Parser
    )
    for name, command in COMMANDS.items():
        subparser = subparsers.add_parser(
            name,
            help=command.HELP,
            description=command.HELP[:1].upper() + command.HELP[1:] + ".",
            parents=[common],
            formatter_class=HelpFormatter,
        )
        command.add_arguments(subparser)
        subparser.set_defaults(command_parser=subparser)
    return parser


def _version():
    from importlib import metadata

    try:
        return metadata.version("keras-attention")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _check_application_modules(command):
    needed = getattr(command, "APPLICATION_MODULES", APPLICATION_MODULES)
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise CommandError(
            f"needs {', '.join(missing)}, which the applications' extra installs: "
            "pip install 'keras-attention[apps]'"
        )


@contextlib.contextmanager
def _quiet_start(verbose):
    """Imports TensorFlow and Keras with their C++ start-up logs (CUDA
    probing, absl) silenced, unless `verbose`."""
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        for name in _NOISY_MODULES:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    yield


def _remove_empty_folders(path):
    """Removes `path` and the folders under it that hold no file (but an
    empty lock file), deepest first: what a run that failed early created
    and left empty."""
    if not os.path.isdir(path):
        return
    for folder, _, files in sorted(os.walk(path), key=lambda item: -len(item[0])):
        lock = os.path.join(folder, _LOCK_FILE)
        if files == [_LOCK_FILE] and os.path.getsize(lock) == 0:
            with contextlib.suppress(OSError):
                os.remove(lock)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def main(argv=None):
    """Runs the command; returns 0, or raises `SystemExit` with 2 for a bad
    argument, 1 for a failure and 130 for an interruption."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if args.command is None:
        parser.print_help()
        return 0
    command = COMMANDS[args.command]
    prog = f"keras-attention {args.command}"
    fresh_out = False
    with contextlib.suppress(ValueError):  # not in the main thread
        signal.signal(signal.SIGTERM, _terminate)
    try:
        _check_application_modules(command)
        check_arguments(args, command)
        fresh_out = not os.path.exists(args.out)
        with _quiet_start(args.verbose):
            _run(command, args)
    except KeyboardInterrupt as interruption:
        # A training stopped by a signal says where it saved; else, a
        # training resumes from its last checkpoint.
        trains = getattr(command, "TRAINS", False) and not args.load
        resume = "; the same command resumes the training" if trains else ""
        how = "stopped by SIGTERM" if isinstance(interruption, _Terminated) else ""
        line = str(interruption) or f"{how or 'interrupted'}{resume}"
        print(f"{prog}: {line}", file=sys.stderr)
        raise SystemExit(getattr(interruption, "exit_status", 130)) from None
    except Exception as error:  # noqa: BLE001 (reported in one line)
        if args.debug:
            traceback.print_exc()
        if fresh_out:
            _remove_empty_folders(args.out)
        print(f"{prog}: error: {_one_line(error)}", file=sys.stderr)
        raise SystemExit(getattr(error, "exit_status", 1)) from None
    return 0


def _run(command, args):
    """`command.use(model, args)` with the model `--load` names, else
    `command.run(args)`."""
    load = getattr(args, "load", None)
    if load:
        command.use(load_model(load), args)
    else:
        command.run(args)


def _one_line(error):
    """The first line of the error's message, with its type where the message
    alone would not say what went wrong."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    # The package's own errors (`exit_status`) say what went wrong.
    if (
        isinstance(error, CommandError | ValueError) or hasattr(error, "exit_status")
    ) and message:
        return message
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
