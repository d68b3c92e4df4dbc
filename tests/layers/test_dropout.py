import keras
import numpy as np
import pytest
from keras import backend, ops

import keras_attention
from keras_attention.layers import Dropout
from tests.layer_test import assert_saved_model_matches, run_layer_test


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def test_layer_contract():
    x = np.random.default_rng(0).normal(size=(3, 5, 8)).astype("float32")
    got = run_layer_test(
        Dropout,
        {"rate": 0.5, "noise_shape": (None, 1, 8), "seed": 3},
        x,
        expected_output_shape=(3, 5, 8),
    )
    np.testing.assert_array_equal(got, x)  # inference: the identity


def test_is_a_keras_dropout_with_its_config():
    layer = Dropout(0.3, noise_shape=(None, 1, 4), seed=7, name="drop")
    reference = keras.layers.Dropout(0.3, noise_shape=(None, 1, 4), seed=7, name="drop")
    assert isinstance(layer, keras.layers.Dropout)
    assert layer.get_config() == reference.get_config()
    assert keras.saving.get_registered_name(Dropout) == "keras_attention>Dropout"
    assert keras_attention.layers.Dropout is Dropout


def test_training_drops_and_scales():
    layer = Dropout(0.25, seed=1)
    x = np.random.default_rng(0).normal(size=(128, 64)).astype("float32")
    y = np_(layer(x, training=True))
    keep = y != 0
    assert abs(keep.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y[keep], x[keep] / 0.75, rtol=1e-6)
    np.testing.assert_array_equal(np_(layer(x)), x)
    np.testing.assert_array_equal(np_(layer(x, training=False)), x)


def test_successive_training_calls_draw_new_masks():
    layer = Dropout(0.5, seed=1)
    x = np.ones((64, 64), "float32")
    first, second = (np_(layer(x, training=True)) != 0 for _ in range(2))
    assert not np.array_equal(first, second)
    # The same seed replays the same sequence of masks.
    again = Dropout(0.5, seed=1)
    np.testing.assert_array_equal(np_(again(x, training=True)) != 0, first)


def test_noise_shape():
    layer = Dropout(0.5, noise_shape=(None, 1, None), seed=2)
    y = np_(layer(np.ones((4, 30, 16), "float32"), training=True))
    np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))


def test_rate_one_gives_zeros_and_bad_rate_is_refused():
    x = np.ones((4, 4), "float32")
    np.testing.assert_array_equal(np_(Dropout(1.0)(x, training=True)), 0 * x)
    with pytest.raises(ValueError, match="rate=1.5"):
        Dropout(1.5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_training(policy):
    layer = Dropout(0.2, seed=4, dtype=policy)
    y = layer(np.full((32, 32), 2.0, "float32"), training=True)
    compute = keras.DTypePolicy(policy).compute_dtype
    assert backend.standardize_dtype(y.dtype) == compute
    np.testing.assert_allclose(np.unique(np_(y)), [0.0, 2.5], rtol=1e-2)


def _model(dropout_cls):
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(64, activation="relu"),
            dropout_cls(0.2, seed=5),
            keras.layers.Dense(1),
        ]
    )


def _regression():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype("float32")
    y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(256, 1))).astype(
        "float32"
    )
    return x, y


def test_trains_like_keras_dropout_in_a_sequential_model(tmp_path):
    x, y = _regression()
    losses = {}
    for name, dropout_cls in (("keras", keras.layers.Dropout), ("ours", Dropout)):
        model = _model(dropout_cls)
        model.compile(keras.optimizers.Adam(1e-2), "mse")
        history = model.fit(x, y, epochs=10, batch_size=32, verbose=0)
        losses[name] = history.history["loss"]
    assert losses["ours"][-1] < 0.3 * losses["ours"][0]
    assert 0.5 < losses["ours"][-1] / losses["keras"][-1] < 2.0
    # Inference is deterministic, and the `.keras` file keeps the layer.
    np.testing.assert_array_equal(
        model.predict(x, verbose=0), model.predict(x, verbose=0)
    )
    loaded = assert_saved_model_matches(model, x, tmp_path, atol=0)
    assert type(loaded.layers[1]) is Dropout
    assert loaded.layers[1].get_config() == model.layers[1].get_config()


@pytest.mark.skipif(
    backend.backend() == "torch", reason="jit_compile=True is torch.compile there"
)
def test_fresh_mask_each_step_of_a_compiled_fit():
    # The weights stay put (learning rate 0), so equal losses at successive
    # steps would mean equal masks.
    model = keras.Sequential(
        [
            keras.Input((256,)),
            Dropout(0.5, seed=1),
            keras.layers.Dense(
                1, kernel_initializer=keras.initializers.RandomNormal(seed=0)
            ),
        ]
    )
    model.compile(keras.optimizers.SGD(0.0), "mse", jit_compile=True)
    x, y = np.ones((1, 256), "float32"), np.zeros((1, 1), "float32")
    losses = [float(model.train_on_batch(x, y)) for _ in range(4)]
    assert len(set(losses)) == 4


PREFIX = "Invalid value received for argument `noise_shape`. "
BAD_NOISE_SHAPES = [
    ("Invalid", "Expected a tuple or list of integers. Received: noise_shape=Invalid"),
    (
        3,
        "Expected an iterable of integers (e.g., a tuple or list). "
        "Received: noise_shape=3",
    ),
    (
        (20, 1.5, 10),
        "Expected all elements to be integers or None. "
        "Received element at index 1: 1.5 (type: float)",
    ),
    (
        [20, -1, 10],
        "Expected all dimensions to be positive integers or None. "
        "Received negative or zero value at index 1: -1",
    ),
    (
        (None, 0),
        "Expected all dimensions to be positive integers or None. "
        "Received negative or zero value at index 1: 0",
    ),
]


@pytest.mark.parametrize("noise_shape, message", BAD_NOISE_SHAPES)
def test_a_bad_noise_shape_is_refused_with_keras_message(noise_shape, message):
    # Keras 3.15's messages word for word, on every release: what was
    # expected, what was received and where.
    with pytest.raises(ValueError) as error:
        Dropout(0.5, noise_shape=noise_shape)
    assert str(error.value) == PREFIX + message


@pytest.mark.parametrize("noise_shape, message", BAD_NOISE_SHAPES)
def test_a_bad_noise_shape_message_is_keras_own(noise_shape, message):
    try:
        keras.layers.Dropout(0.5, noise_shape=noise_shape)
    except ValueError as error:
        want = str(error)
    else:
        pytest.skip(f"Keras {keras.__version__} accepts noise_shape={noise_shape!r}")
    with pytest.raises(ValueError) as error:
        Dropout(0.5, noise_shape=noise_shape)
    assert str(error.value) == want


def test_a_noise_shape_list_becomes_a_tuple():
    assert Dropout(0.5, noise_shape=[20, 1, None]).noise_shape == (20, 1, None)
