"""What the subcommands share on the command line: the argument types (each
names what it got and what it expected), the training options, and reading
inputs. Standard library only until a subcommand's work starts."""

import argparse
import os
import sys

from keras_attention.cli.checks import CommandError
from keras_attention.names import SLOWER_WITH_XLA_ON_CPU, STRATEGIES

LOW_CONFIDENCE = "(low confidence)"


class Parser(argparse.ArgumentParser):
    """Reports a bad argument in one line, without the usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show."""

    def _get_help_string(self, action):
        help_text = action.help or ""
        if action.default is None or action.default is False or "(default" in help_text:
            return help_text
        return super()._get_help_string(action)


def positive_int(text):
    return _number(text, int, "a positive integer", lambda n: n > 0)


def non_negative_int(text):
    return _number(text, int, "an integer >= 0", lambda n: n >= 0)


def at_least(minimum):
    def parse(text):
        return _number(text, int, f"an integer >= {minimum}", lambda n: n >= minimum)

    parse.__name__ = f"integer >= {minimum}"
    return parse


def positive_float(text):
    return _number(text, float, "a positive number", lambda x: x > 0)


def non_negative_float(text):
    return _number(text, float, "a number >= 0", lambda x: x >= 0)


def open_fraction(text):
    return _number(text, float, "a number between 0 and 1", lambda x: 0 < x < 1)


def probability(text):
    return _number(text, float, "a number above 0, at most 1", lambda x: 0 < x <= 1)


def finite_float(text):
    return _number(text, float, "a number", lambda x: abs(x) < float("inf"))


def _number(text, kind, expected, valid):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise argparse.ArgumentTypeError(f"expected {expected}; got {text!r}")
    return value


def model_list(choices):
    """The type of `--model`: one name or a comma-separated list of
    distinct names, each one of `choices`."""

    def parse(text):
        names = [name.strip() for name in text.split(",")]
        unknown = [name for name in names if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown model {', '.join(map(repr, unknown))}; expected one of "
                f"{', '.join(choices)}, or a comma-separated list of them"
            )
        if len(set(names)) < len(names):
            raise argparse.ArgumentTypeError(f"a model is listed twice in {text!r}")
        return tuple(names)

    parse.__name__ = "model list"
    return parse


def dataset(builtin, kind):
    """The type of `--data`: one of the `builtin` names, or an existing
    file (`kind="file"`) or folder (`kind="folder"`)."""

    def parse(text):
        if text in builtin:
            return text
        exists = os.path.isfile if kind == "file" else os.path.isdir
        if not exists(text):
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a built-in dataset ({', '.join(builtin)}) "
                f"nor an existing {kind}"
            )
        return text

    parse.__name__ = "dataset"
    return parse


def add_data_option(parser, builtin, kind, default, help):
    """`--data`: one of the `builtin` datasets, or a `kind` ("file" or
    "folder") of the user's (`dataset`)."""
    parser.add_argument(
        "--data", type=dataset(builtin, kind), default=default, help=help
    )


def add_model_option(parser, choices, default, then):
    """`--model`: one of `choices` (`default`), or a comma-separated list of
    them (`model_list`), each trained in OUT/<model>; `then` says what
    follows ("compares them")."""
    parser.add_argument(
        "--model",
        type=model_list(choices),
        default=(default,),
        help=f"one of {', '.join(choices)}; a comma-separated list trains each "
        f"in OUT/<model> and {then} (default: {default})",
    )


def add_confidence_option(parser):
    parser.add_argument(
        "--min-confidence",
        type=finite_float,
        default=-0.1,
        metavar="LOG_PROB",
        help="with --load: each output is printed with the model's mean token "
        f"log-probability, and marked {LOW_CONFIDENCE} below this",
    )


def confidence_line(output, log_prob, text, threshold):
    flag = f"\t{LOW_CONFIDENCE}" if log_prob < threshold else ""
    return f"{output}\t{log_prob:.2f}\t{text}{flag}"


def print_confidence_lines(inputs, results, threshold):
    """Prints each input's `confidence_line`: its output and the model's mean
    token log-probability (`results`: one `(output, log_prob)` per input),
    marked below `threshold` (`--min-confidence`)."""
    for text, (output, log_prob) in zip(inputs, results, strict=True):
        print(confidence_line(output, log_prob, text, threshold))


def _xla_help():
    models = ", ".join(SLOWER_WITH_XLA_ON_CPU)
    return (
        "train with XLA, or with --no-xla as a TensorFlow graph (default: XLA, "
        f"except for the models measured faster without it on a CPU: {models}; "
        "the run says which it chose)"
    )


def add_training_options(
    parser,
    out,
    batch_size,
    epochs=None,
    out_help="output folder",
    seed_help="random seed",
    num_train_help="train on this many examples only (default: all)",
    load_help="a trained model.keras",
    load=True,
):
    """The options every training subcommand has (the fields of
    `tasks.runner.TrainingOptions`, with `--out`, `--load`, `--strategy`),
    defaults per subcommand."""
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=epochs,
        help="most training epochs" + ("" if epochs else " (default: per dataset)"),
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=batch_size,
        help="training batch size (global, under a strategy)",
    )
    parser.add_argument(
        "--time-budget",
        type=positive_float,
        default=None,
        metavar="MINUTES",
        help="minutes of training at most: no epoch starts that would end later "
        "(default: no limit)",
    )
    parser.add_argument(
        "--num-train", type=positive_int, default=None, help=num_train_help
    )
    parser.add_argument(
        "--xla", action=argparse.BooleanOptionalAction, default=None, help=_xla_help()
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help=seed_help)
    parser.add_argument("--out", default=out, help=out_help)
    if load:
        parser.add_argument("--load", default=None, help=load_help)
    parser.add_argument(
        "--strategy",
        default="default",
        choices=STRATEGIES,
        help="default (one device); on TensorFlow, a tf.distribute strategy: "
        "mirrored (every GPU of this machine), multi-worker (the machines in "
        "TF_CONFIG; run the same command on each), tpu; on JAX, a "
        "keras.distribution: data-parallel (every device; the processes named "
        "by KERAS_DISTRIBUTION_* variables), model-parallel (Transformer "
        "weights split between devices); --batch-size is the global batch",
    )
    parser.add_argument(
        "--model-shards",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --strategy model-parallel: devices each weight is split "
        "between (default: all); the other devices split the batch",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="delete what an earlier run left in --out (checkpoints, model, "
        "history, metrics) and train afresh; without it, a run resumes there",
    )


# The Transformers' sizes where a command does not choose others.
TRANSFORMER_SIZES = {
    "hidden_dim": 32,
    "num_heads": 2,
    "num_layers": 1,
    "intermediate_dim": 64,
}


def add_transformer_size_options(parser, what, defaults=None):
    """`--width`, `--heads` and `--blocks` of `what`, whose sizes are
    `defaults` (`TRANSFORMER_SIZES`' keys; default `TRANSFORMER_SIZES`); the
    feed-forward layers keep their ratio to the width."""
    defaults = dict(defaults or TRANSFORMER_SIZES)
    ratio = _feed_forward_ratio(defaults)
    parser.add_argument(
        "--width",
        type=positive_int,
        default=None,
        help=f"width of {what} (default: {defaults['hidden_dim']}; the "
        f"feed-forward layers are {ratio} times as wide)",
    )
    parser.add_argument(
        "--heads",
        type=positive_int,
        default=None,
        help=f"attention heads of {what}, a divisor of --width (default: "
        f"{defaults['num_heads']})",
    )
    parser.add_argument(
        "--blocks",
        type=positive_int,
        default=None,
        help=f"blocks of {what} (default: {defaults['num_layers']})",
    )
    parser.set_defaults(transformer_defaults=defaults)


def _feed_forward_ratio(sizes):
    """How many times the width the feed-forward layers of `sizes` are."""
    return sizes["intermediate_dim"] // sizes["hidden_dim"]


def transformer_sizes(args):
    """The constructor arguments of the options `add_transformer_size_options`
    adds, those given only; raises `CommandError` where --heads does not
    divide the width."""
    defaults = args.transformer_defaults
    ratio = _feed_forward_ratio(defaults)
    sizes = {}
    if args.width is not None:
        sizes.update(hidden_dim=args.width, intermediate_dim=ratio * args.width)
    if args.heads is not None:
        sizes["num_heads"] = args.heads
    if args.blocks is not None:
        sizes["num_layers"] = args.blocks
    width = sizes.get("hidden_dim", defaults["hidden_dim"])
    heads = sizes.get("num_heads", defaults["num_heads"])
    if width % heads:
        raise CommandError(
            f"--heads {heads} does not divide the width {width}: each head takes "
            "width / heads features",
            2,
        )
    return sizes


def training_options(args):
    """The `TrainingOptions` of the options `add_training_options` adds
    (imports the tasks: call it once the subcommand's work starts)."""
    from keras_attention.tasks.distribute import make_strategy
    from keras_attention.tasks.runner import TrainingOptions

    strategy = args.strategy
    if args.model_shards is not None:
        strategy = make_strategy(strategy, model_shards=args.model_shards)
    return TrainingOptions(
        epochs=args.epochs,
        batch_size=args.batch_size,
        time_budget_minutes=args.time_budget,
        seed=args.seed,
        num_train=args.num_train,
        jit_compile=args.xla,
        strategy=strategy,
        restart=args.restart,
    )


def run_or_compare(args, run, compare, **task_arguments):
    """Trains the one model `--model` names with `run(OUT, model=...)`, or
    each of the models it lists with `compare(OUT, models, ...)`, passing
    both `task_arguments`."""
    if len(args.model) == 1:
        run(args.out, model=args.model[0], **task_arguments)
    else:
        compare(args.out, list(args.model), **task_arguments)


def read_inputs(given, what):
    """The inputs given on the command line, else the lines of standard
    input: read one at a time behind a prompt at a terminal (so that each
    answer comes at once), else all together."""
    if given:
        yield given
    elif sys.stdin.isatty():
        print(f"{what}, one per line (Ctrl-D to end):", file=sys.stderr)
        while True:
            print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:
                return
            if line.strip():
                yield [line.rstrip("\n")]
    else:
        lines = [line.rstrip("\n") for line in sys.stdin if line.strip()]
        if lines:
            yield lines


def load_model(path):
    """The model saved at `path`, with the package imported first: its layers
    and models register themselves there, so that `.keras` files load."""
    import keras

    import keras_attention  # noqa: F401

    return keras.saving.load_model(path)
