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


def check_training_on_this_backend(real):
    """The checks of tests/models/test_sagan.py's TensorFlow tests (learning,
    spectral norms, the weight average, mixed precision) and what a stateless
    JAX step must carry from step to step (batch-norm statistics, the seed),
    on the backend this process runs, on images `real` in [-1, 1]; prints
    `<check> ok` after each. tests/models/test_backends.py runs it on JAX and
    PyTorch."""
    from keras_attention.models import SAGAN
    from tests.models.model_cases import TINY_SAGAN as TINY

    numpy = ops.convert_to_numpy

    keras.utils.set_random_seed(0)
    assert_a_few_steps_learn(real)
    print("learns ok")

    def one_step():
        keras.utils.set_random_seed(0)
        gan = SAGAN(**TINY, ema_decay=0.5, seed=0)
        gan.compile()
        start = [numpy(w) for w in gan.generator.weights]
        seed = numpy(gan.seed_generator.state)
        history = gan.fit(real[:64], batch_size=64, epochs=1, verbose=0, shuffle=False)
        # The seed moved on: the next step draws other latent vectors.
        assert not np.array_equal(numpy(gan.seed_generator.state), seed)
        return gan, start, history.history

    gan, start, history = one_step()
    pairs = zip(gan.ema_generator.weights, gan.generator.weights, start, strict=True)
    moving = 0
    for average, weight, initial in pairs:
        average, final = numpy(average), numpy(weight)
        if weight.trainable:
            np.testing.assert_allclose(average, 0.5 * initial + 0.5 * final, atol=1e-6)
        else:  # batch-norm statistics and power-iteration vectors: copied
            np.testing.assert_array_equal(average, final)
        if weight.name.startswith("moving_"):
            assert not np.array_equal(final, initial), weight.path
            moving += 1
    assert moving > 0
    print("averages ok")

    again, _, history_again = one_step()
    assert history_again == history, (history, history_again)
    for first, second in zip(gan.weights, again.weights, strict=True):
        np.testing.assert_array_equal(numpy(first), numpy(second), err_msg=first.path)
    print("reproducible ok")

    keras.config.set_dtype_policy("mixed_float16")
    gan = SAGAN(**TINY, num_classes=10, seed=0)
    gan.compile()
    assert isinstance(gan.generator_optimizer, keras.optimizers.LossScaleOptimizer)
    history = gan.fit(
        real[:128], np.arange(128) % 10, batch_size=32, epochs=2, verbose=0
    )
    assert np.all(np.isfinite(history.history["d_loss"] + history.history["g_loss"]))
    assert np.all(np.isfinite(gan.sample(4, seed=0)))
    print("mixed_precision ok")
