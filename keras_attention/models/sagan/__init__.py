"""SAGAN, the Self-Attention GAN: its generator (`generator.py`) and
discriminator (`discriminator.py`) networks, the model that trains them
together (`model.py`), and sampling from a generator (`sampling.py`)."""

from keras_attention.models.sagan.common import attention_resolutions
from keras_attention.models.sagan.discriminator import sagan_discriminator
from keras_attention.models.sagan.generator import sagan_generator
from keras_attention.models.sagan.model import SAGAN
from keras_attention.models.sagan.sampling import (
    generator_attention,
    generator_inputs,
    sample_images,
    to_unit_range,
)

__all__ = [
    "SAGAN",
    "attention_resolutions",
    "generator_attention",
    "generator_inputs",
    "sagan_discriminator",
    "sagan_generator",
    "sample_images",
    "to_unit_range",
]
