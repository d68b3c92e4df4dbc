import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


def trainable_gradients(variables, loss_fn):
    """Gradients of `loss_fn()` with respect to `variables` on any backend."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn()
        return [np.asarray(g) for g in tape.gradient(loss, variables)]
    if backend == "jax":
        import jax

        def stateless_loss(values):
            mapping = list(zip(variables, values, strict=True))
            with keras.StatelessScope(state_mapping=mapping):
                return loss_fn()

        grads = jax.grad(stateless_loss)([v.value for v in variables])
        return [np.asarray(g) for g in grads]
    if backend == "torch":
        import torch

        loss = loss_fn()
        grads = torch.autograd.grad(loss, [v.value for v in variables])
        return [g.detach().cpu().numpy() for g in grads]
    raise NotImplementedError(f"no gradient helper for backend {backend!r}")
