"""Initializer helpers."""

import keras


def clone_initializer(initializer):
    """A new initializer with the same config as `initializer`.

    Keras' seeded initializers are stateless: one instance shared by several
    sublayers would give them all the same values. Layers that build
    sublayers from their own `kernel_initializer` pass each a clone (as
    keras-hub's blocks do).

    Args:
        initializer: an initializer object, or a name or config that
            `keras.initializers.get` understands.

    Returns:
        A new initializer object.
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())
