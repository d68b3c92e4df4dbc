"""Attention layers, reference models and benchmarks for Keras 3."""

__version__ = "0.1.0"

import importlib

from keras_attention import decoding, layers, models, ops

__all__ = ["decoding", "layers", "models", "ops", "viz", "__version__"]


def __getattr__(name):
    # `viz` needs matplotlib (the `apps` extra): loaded on first use only, so
    # that `import keras_attention` stays light.
    if name == "viz":
        return importlib.import_module("keras_attention.viz")
    raise AttributeError(f"module 'keras_attention' has no attribute {name!r}")
