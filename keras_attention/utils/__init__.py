"""Helpers shared by the library's layers and models (and the applications):
backend dispatch for compiling and differentiating functions, and initializer
cloning."""

from keras_attention.utils.backend import (
    compile_function,
    num_workers,
    value_and_grad,
    variable_gradients,
)
from keras_attention.utils.initializers import clone_initializer

__all__ = [
    "clone_initializer",
    "compile_function",
    "num_workers",
    "value_and_grad",
    "variable_gradients",
]
