"""Attention layers, reference models and benchmarks for Keras 3."""

__version__ = "0.1.0"

from keras_attention import layers, ops, viz

__all__ = ["layers", "ops", "viz", "__version__"]
