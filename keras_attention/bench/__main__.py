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

from keras_attention.bench import SUITES, run_suites


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", nargs="+", choices=[*SUITES, "all"], default=["all"])
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--out", default="runs/bench", help="output folder")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help="the gpu suite: the chip's dense bfloat16 TFLOP/s that its "
        "fractions divide by (default 989, an H100 / H200 SXM)",
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        parser.error(f"--peak-tflops must be above 0, got {args.peak_tflops}")
    if args.case:
        if len(args.suite) != 1 or args.suite[0] == "all":
            parser.error("--case needs exactly one --suite")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        module = importlib.import_module(f"keras_attention.bench.{args.suite[0]}")
        case = json.loads(args.case)
        print(json.dumps(module.CASES[case["kind"]](case)))
        return 0
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    run_suites(args.suite, quick=args.quick, out=args.out, peak_flops=peak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
