import keras
import numpy as np
import pytest

from keras_attention.utils.backend import (
    compile_function,
    num_workers,
    value_and_grad,
    variable_gradients,
)


def test_value_and_grad_of_a_function_of_nested_tensors():
    def loss(values, x):
        return keras.ops.sum(values[0] * x) + keras.ops.sum(values[1] ** 2)

    values = [keras.ops.ones((3,)), keras.ops.convert_to_tensor([1.0, 2.0])]
    x = keras.ops.convert_to_tensor([3.0, 4.0, 5.0])
    value, (grad_values, grad_x) = value_and_grad(loss)(values, x)
    assert float(keras.ops.convert_to_numpy(value)) == pytest.approx(17.0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(grad_values[0]), [3, 4, 5])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(grad_values[1]), [2, 4])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(grad_x), [1, 1, 1])


def test_variable_gradients_of_a_layer():
    layer = keras.layers.Dense(2, kernel_initializer="ones")
    x = np.array([[1.0, 2.0, 3.0]], "float32")
    layer.build(x.shape)
    kernel_grad, bias_grad = variable_gradients(
        layer.trainable_variables, lambda: keras.ops.sum(layer(x))
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(kernel_grad), [[1, 1], [2, 2], [3, 3]]
    )
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bias_grad), [1, 1])


def test_compiled_function_sees_the_current_values_of_its_variables():
    layer = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    x = np.ones((1, 2), "float32")
    layer.build(x.shape)
    fn = compile_function(lambda inputs: layer(inputs), layer.variables)
    assert float(keras.ops.convert_to_numpy(fn(x))[0, 0]) == 2.0
    layer.kernel.assign(np.full((2, 1), 3.0, "float32"))
    assert float(keras.ops.convert_to_numpy(fn(x))[0, 0]) == 6.0


def test_compile_off_returns_the_function():
    def fn(x):
        return x

    assert compile_function(fn, jit_compile=False) is fn


class _Resolver:
    def __init__(self, spec):
        self.spec = spec

    def cluster_spec(self):
        return self

    def as_dict(self):
        return self.spec


class _Strategy:
    def __init__(self, spec):
        self.cluster_resolver = _Resolver(spec)


def test_num_workers_counts_workers_and_chief():
    assert num_workers(None) == 1
    assert num_workers(_Strategy({})) == 1
    assert num_workers(_Strategy({"worker": ["a", "b"], "chief": ["c"]})) == 3
