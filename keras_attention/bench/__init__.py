"""Benchmark suites behind `keras-attention bench` and `benchmarks/`: one
module per suite, each with `run(quick, out)`; `python -m keras_attention.bench`
runs them without the CLI (and without TensorFlow, as on a GPU machine)."""

import importlib

from keras_attention.names import BENCH_SUITES as SUITES

# What `--suite all` runs: every suite but `gpu`, which is sized for one GPU
# (T up to 32,768) and measures again, at that size, what `attention`,
# `seq2seq` and `decode` measure; on a CPU its full run would take hours. It
# runs when named.
ALL_SUITES = tuple(name for name in SUITES if name != "gpu")


def run_suites(suites, quick=False, out="runs/bench", peak_flops=None):
    """Runs the named suites (`"all"` for every one of `ALL_SUITES`) one after
    the other, each writing `out/SUITE.json`, `.md` and `.png`; returns their
    results. `peak_flops`: the chip's dense bfloat16 FLOP/s that the `gpu`
    suite's fractions divide by (default: an H100 / H200 SXM's)."""
    names = (suites,) if isinstance(suites, str) else tuple(suites)
    if "all" in names:
        names = (*ALL_SUITES, *(name for name in names if name == "gpu"))
    for name in names:
        if name not in SUITES:
            raise ValueError(f"Unknown suite {name!r}; expected one of {SUITES}.")
    results = {}
    for name in names:
        options = {"peak_flops": peak_flops} if name == "gpu" else {}
        module = importlib.import_module(f"keras_attention.bench.{name}")
        results[name] = module.run(quick=quick, out=out, **options)
    return results
