"""Attention layers, reference models and benchmarks for Keras 3."""

__version__ = "0.1.0"

from keras_attention import decoding, layers, models, ops, viz

__all__ = ["decoding", "layers", "models", "ops", "viz", "__version__"]
