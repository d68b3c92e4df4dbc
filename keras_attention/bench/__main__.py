"""`python -m keras_attention.bench [--suite NAME ...] [--quick] [--out DIR]`:
the benchmark suites without the `keras-attention` CLI, which needs
TensorFlow for its training subcommands (a GPU machine with JAX alone runs
this)."""

import argparse
import sys

from keras_attention.bench import SUITES, run_suites


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", nargs="+", choices=[*SUITES, "all"], default=["all"])
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args(argv)
    run_suites(args.suite, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
