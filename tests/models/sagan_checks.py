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


def assert_a_few_steps_learn(real):
    """Four epochs on 512 images of `real` more than halve the tiny SAGAN's
    discriminator hinge loss (it soon tells real from generated), with
    finite losses and every spectrally normalized kernel's largest singular
    value near 1."""
    from keras_attention.models import SAGAN
    from tests.models.model_cases import TINY_SAGAN

    gan = SAGAN(**TINY_SAGAN, seed=0)
    gan.compile()
    z = keras.random.normal((256, 16), seed=1)
    d_before, _ = hinge_losses(gan, real[:256], z)
    history = gan.fit(real[:512], batch_size=64, epochs=4, verbose=0)
    d_after, _ = hinge_losses(gan, real[:256], z)
    assert d_after < 0.5 * d_before, (d_before, d_after)
    assert np.all(np.isfinite(history.history["d_loss"] + history.history["g_loss"]))
    for network in (gan.generator, gan.discriminator):
        for layer in spectral_layers(network):
            norm = largest_singular_value(layer)
            assert 0.9 < norm < 1.1, (layer.name, norm)
