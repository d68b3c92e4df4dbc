"""Measurements of a SAGAN shared by tests/models/test_sagan.py and the
scripts it runs on other backends (this module imports neither TensorFlow nor
the applications)."""

import keras
import numpy as np
from keras import ops


def hinge_losses(gan, real, z):
    """The discriminator's and generator's hinge losses on fixed inputs, in
    inference mode."""
    real_logits = ops.convert_to_numpy(gan.discriminator(real))
    fake_logits = ops.convert_to_numpy(gan.discriminator(gan.generator(z)))
    d_loss = (
        np.maximum(0, 1 - real_logits).mean() + np.maximum(0, 1 + fake_logits).mean()
    )
    return d_loss, -fake_logits.mean()


def spectral_layers(model):
    return [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.SpectralNormalization)
    ]


def largest_singular_value(layer):
    weights = ops.convert_to_numpy(layer.kernel)
    return np.linalg.norm(weights.reshape(-1, weights.shape[-1]), 2)
