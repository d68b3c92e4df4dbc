import keras
import numpy as np

from keras_attention.utils.initializers import clone_initializer


def test_clones_are_new_objects_with_the_same_config():
    original = keras.initializers.GlorotUniform(seed=3)
    clone = clone_initializer(original)
    assert clone is not original and clone.get_config() == original.get_config()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(clone((4, 4))),
        keras.ops.convert_to_numpy(original((4, 4))),
    )


def test_names_are_resolved():
    clone = clone_initializer("zeros")
    assert isinstance(clone, keras.initializers.Zeros)
