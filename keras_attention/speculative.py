"""Speculative decoding, now `keras_attention.decoding.speculative`: this
module keeps the imports written before it moved working."""

from keras_attention.decoding.speculative import (
    speculative_fill,
    speculative_generate,
    speculative_translate,
)

__all__ = ["speculative_fill", "speculative_generate", "speculative_translate"]
