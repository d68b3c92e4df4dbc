"""Datasets: real corpora from installed packages and generated tasks."""

from keras_attention.data.synthetic import reversal_task

__all__ = ["reversal_task"]
