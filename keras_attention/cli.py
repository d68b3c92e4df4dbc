"""The `keras-attention` command: a thin shell over the package's public API."""

import argparse
import os
import sys


def _demo(args):
    from keras_attention.tasks.demo import run_demo

    run_demo(args.out, epochs=args.epochs, seed=args.seed)


def _bench(args):
    from keras_attention.bench import attention

    suites = {"attention": attention.run}
    suites[args.suite](quick=args.quick, out=args.out)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-attention",
        description="Attention layers for Keras 3: reference tasks and benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="train a small attention RNN to reverse digit strings and write "
        "its attention heatmap (about a minute on 2 CPU cores)",
    )
    demo.add_argument("--out", default="runs/demo", help="output folder")
    demo.add_argument("--epochs", type=int, default=6)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)

    bench = commands.add_parser(
        "bench",
        help="XLA benchmarks: ratios against Keras measured side by side, "
        "written as JSON, Markdown and PNG",
    )
    bench.add_argument("--suite", choices=["attention"], default="attention")
    bench.add_argument("--quick", action="store_true", help="CI-sized run")
    bench.add_argument("--out", default="runs/bench", help="output folder")
    bench.set_defaults(run=_bench)
    return parser


def _version():
    from keras_attention import __version__

    return __version__


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
