"""`python -m keras_attention.bench [--suite NAME ...] [--quick] [--out DIR]`:
the benchmark suites without the `keras-attention` CLI, which needs
TensorFlow for its training subcommands (a GPU machine with JAX alone runs
this). The one entry point of every suite: `benchmarks/*.py` call it, and
each isolated case runs in a fresh process through its hidden `--case JSON`.
"""

import argparse
import importlib
import json
import os
import sys

from keras_attention.bench import SUITES
from keras_attention.cli.bench import add_run_options, run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", nargs="+", choices=[*SUITES, "all"], default=["all"])
    add_run_options(parser)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        if len(args.suite) != 1 or args.suite[0] == "all":
            parser.error("--case needs exactly one --suite")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        module = importlib.import_module(f"keras_attention.bench.{args.suite[0]}")
        case = json.loads(args.case)
        print(json.dumps(module.CASES[case["kind"]](case)))
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
