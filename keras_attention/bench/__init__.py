"""Benchmark suites behind `keras-attention bench` and `benchmarks/`: one
module per suite, each with `run(quick, out)`; `python -m keras_attention.bench`
runs them without the CLI (and without TensorFlow, as on a GPU machine)."""

import importlib

from keras_attention.names import BENCH_SUITES as SUITES


def run_suites(suites, quick=False, out="runs/bench"):
    """Runs the named suites (`"all"` for every one) one after the other,
    each writing `out/SUITE.json`, `.md` and `.png`; returns their results."""
    names = (suites,) if isinstance(suites, str) else tuple(suites)
    if "all" in names:
        names = SUITES
    for name in names:
        if name not in SUITES:
            raise ValueError(f"Unknown suite {name!r}; expected one of {SUITES}.")
    return {
        name: importlib.import_module(f"keras_attention.bench.{name}").run(
            quick=quick, out=out
        )
        for name in names
    }
