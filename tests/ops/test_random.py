import math

import keras
import numpy as np
import pytest
from keras import backend, ops

from keras_attention.ops import dropout
from keras_attention.utils.backend import compile_function


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def kept(x, rate, seed, noise_shape=None):
    """The boolean keep mask of `dropout` on ones of `x`'s shape."""
    return np_(dropout(ops.ones(x), rate, seed=seed, noise_shape=noise_shape)) != 0


def reference_mask(shape, seed, rate):
    """The documented hash in NumPy uint32: two rounds of lowbias32 over the
    element index (the second without its last xorshift), keyed by words
    hashed from the seed `[seed, 0]`, the int32 compared with
    `rate * 2**32 - 2**31`."""
    u = np.uint32

    def mix(x, final_shift=True):
        x = x ^ (x >> u(16))
        x = x * u(0x7FEB352D)
        x = x ^ (x >> u(15))
        x = x * u(0x846CA68B)
        return x ^ (x >> u(16)) if final_shift else x

    with np.errstate(over="ignore"):
        first = mix(u(seed) ^ u(0x9E3779B9))
        key_1 = mix(first ^ u(0))
        key_2 = mix(key_1 ^ u(0x7F4A7C15))
        index = np.arange(math.prod(shape), dtype=np.uint32).reshape(shape)
        bits = mix(mix(index ^ key_1) ^ key_2, final_shift=False)
    # Read as an int32: the unsigned word with its top bit flipped, minus 2**31.
    return (bits ^ u(0x80000000)) >= round(rate * 2**32)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_kept_fraction_is_one_minus_rate(rate):
    n = 512 * 512
    fraction = kept((512, 512), rate, seed=3).mean()
    sigma = math.sqrt(rate * (1 - rate) / n)
    assert abs(fraction - (1 - rate)) < 5 * sigma


def test_kept_values_are_scaled_and_dropped_ones_are_zero():
    x = np.random.default_rng(0).normal(size=(64, 128)).astype("float32")
    y = np_(dropout(x, 0.25, seed=5))
    keep = y != 0
    assert 0.7 < keep.mean() < 0.8
    np.testing.assert_allclose(y[keep], x[keep] / 0.75, rtol=1e-6)
    assert np.all(y[~keep] == 0.0)


def test_dropped_elements_are_exactly_zero_even_if_not_finite():
    x = np.full((32, 32), np.inf, "float32")
    y = np_(dropout(x, 0.5, seed=1))
    assert np.any(y == 0) and not np.any(np.isnan(y))


def test_mask_is_the_documented_hash_on_every_backend():
    # The same seed gives the same mask on TensorFlow, JAX and PyTorch.
    for shape, seed, rate in [((64, 33), 7, 0.3), ((5, 7, 11), 2**31 + 5, 0.8)]:
        np.testing.assert_array_equal(
            kept(shape, rate, seed), reference_mask(shape, seed, rate)
        )


def test_same_int_seed_gives_the_same_mask():
    np.testing.assert_array_equal(kept((128, 64), 0.5, 42), kept((128, 64), 0.5, 42))


def test_seed_generator_gives_a_new_mask_each_call_and_replays():
    first = keras.random.SeedGenerator(9)
    masks = [kept((128, 64), 0.5, first) for _ in range(3)]
    assert not np.array_equal(masks[0], masks[1])
    assert not np.array_equal(masks[1], masks[2])
    again = keras.random.SeedGenerator(9)
    np.testing.assert_array_equal(kept((128, 64), 0.5, again), masks[0])


def agreement(a, b):
    return (a == b).mean()


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_masks_of_different_seeds_are_unrelated(rate):
    n = 256 * 256
    chance = (1 - rate) ** 2 + rate**2
    tolerance = 5 * math.sqrt(chance * (1 - chance) / n)
    generator = keras.random.SeedGenerator(77)
    masks = [kept((n,), rate, s) for s in (1, 2, 1000, 2**31 - 1)]
    # A seed generator's successive seeds differ in one word by 1.
    masks += [kept((n,), rate, generator) for _ in range(2)]
    for i, a in enumerate(masks):
        for b in masks[i + 1 :]:
            assert abs(agreement(a, b) - chance) < tolerance
            # Not a shifted copy of each other either.
            for shift in (1, 2, 3, 64, 4096):
                assert abs(agreement(a[shift:], b[:-shift]) - chance) < 2 * tolerance


def test_neighbouring_elements_are_independent():
    rate, n = 0.5, 256 * 256
    chance = (1 - rate) ** 2 + rate**2
    tolerance = 5 * math.sqrt(chance * (1 - chance) / n)
    mask = kept((n,), rate, 11)
    for step in (1, 2, 256, 1024):
        assert abs(agreement(mask[step:], mask[:-step]) - chance) < tolerance
    # No row or column of a matrix is favoured.
    grid = kept((256, 256), rate, 11).mean(0)
    assert abs(grid.mean() - 0.5) < 0.01 and grid.min() > 0.35 and grid.max() < 0.65


def test_noise_shape_shares_the_mask_along_its_ones():
    x = np.ones((4, 50, 32), "float32")
    y = np_(dropout(x, 0.5, seed=3, noise_shape=(4, 1, 32)))
    np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))
    assert 0.3 < (y[:, 0] != 0).mean() < 0.7
    z = np_(dropout(x, 0.5, seed=3, noise_shape=(None, 1, None)))
    np.testing.assert_array_equal(z, y)
    w = np_(dropout(x, 0.5, seed=3, noise_shape=(1, None, 1)))
    np.testing.assert_array_equal(w, np.broadcast_to(w[:1, :, :1], w.shape))


@pytest.mark.parametrize(
    "noise_shape, message",
    [
        ((4, 1), "one entry per axis"),
        ((4, 3, 32), "does not broadcast"),
        ((0, 1, 1), "positive"),
    ],
)
def test_bad_noise_shape_is_refused(noise_shape, message):
    with pytest.raises(ValueError, match=message):
        dropout(np.ones((4, 50, 32), "float32"), 0.5, seed=1, noise_shape=noise_shape)


def test_rate_zero_and_one():
    x = np.random.default_rng(0).normal(size=(8, 16)).astype("float32")
    np.testing.assert_array_equal(np_(dropout(x, 0.0, seed=1)), x)
    ones = dropout(ops.cast(x, "float16"), 1.0, seed=1)
    assert backend.standardize_dtype(ones.dtype) == "float16"
    np.testing.assert_array_equal(np_(ones), np.zeros_like(x))


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), "0.5", True, None])
def test_bad_rate_is_refused_naming_it(rate):
    with pytest.raises(ValueError, match=r"`rate`.*received rate=" + repr(rate)[:3]):
        dropout(np.ones((2, 2), "float32"), rate, seed=1)


def _trace_only(fn, shape):
    """Traces `fn` on a float32 tensor of `shape` without allocating it."""
    name = backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        return tf.function(fn).get_concrete_function(tf.TensorSpec(shape, "float32"))
    if name == "jax":
        import jax

        return jax.eval_shape(fn, jax.ShapeDtypeStruct(shape, "float32"))
    import torch

    return fn(torch.empty(shape, dtype=torch.float32, device="meta"))


def test_more_than_int32_elements_are_refused():
    with pytest.raises(ValueError, match=r"fewer than 2\*\*31 elements.*65536, 32769"):
        _trace_only(lambda x: dropout(x, 0.5, seed=1), (65536, 32769))


def test_compiled_gives_the_eager_mask():
    x = np.random.default_rng(0).normal(size=(3, 40, 24)).astype("float32")
    compiled = compile_function(
        lambda x: dropout(x, 0.3, seed=4, noise_shape=(None, 1, None))
    )
    want = np_(dropout(x, 0.3, seed=4, noise_shape=(None, 1, None)))
    np.testing.assert_array_equal(np_(compiled(x)), want)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_half_precision_stays_in_its_dtype(policy):
    keras.config.set_dtype_policy(policy)
    dtype = keras.config.dtype_policy().compute_dtype
    x = ops.cast(np.full((64, 64), 1.5, "float32"), dtype)
    y = dropout(x, 0.2, seed=8)
    assert backend.standardize_dtype(y.dtype) == dtype
    values = np.unique(np_(y))
    np.testing.assert_allclose(values, [0.0, 1.5 / 0.8], rtol=1e-2)
    np.testing.assert_array_equal(np_(y) != 0, kept((64, 64), 0.2, 8))
