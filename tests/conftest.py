import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402

from keras_attention.utils.backend import variable_gradients  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


def trainable_gradients(variables, loss_fn):
    """Gradients of `loss_fn()` with respect to `variables` on any backend, as
    NumPy arrays."""
    grads = variable_gradients(variables, loss_fn)
    return [keras.ops.convert_to_numpy(g) for g in grads]
