"""Benchmark suites behind `keras-attention bench` and `benchmarks/`."""

SUITES = ("attention",)
