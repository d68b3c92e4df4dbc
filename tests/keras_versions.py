"""What the installed Keras release can do, for tests that compare with it
(CI runs the library's tests on every release setup.cfg admits)."""

import inspect

import keras
import pytest

KERAS_VERSION = tuple(int(part) for part in keras.__version__.split(".")[:2])


def keras_accepts(layer_class, **arguments):
    """Whether `layer_class`'s constructor in this Keras takes `arguments`."""
    parameters = inspect.signature(layer_class.__init__).parameters
    return all(name in parameters for name in arguments)


def skip_unless_keras_accepts(layer_class, **arguments):
    """Skips a test comparing with `layer_class(**arguments)` on a Keras whose
    layer lacks one of them (ours provides them on every release)."""
    missing = sorted(
        set(arguments) - set(inspect.signature(layer_class.__init__).parameters)
    )
    if missing:
        pytest.skip(
            f"Keras {keras.__version__}'s {layer_class.__name__} has no "
            f"{', '.join(missing)} to compare with"
        )


# The `.keras` files under tests/data were written by Keras 3.15, whose
# initializer configs (`input_axes`, `output_axes`) older releases cannot read.
requires_keras_3_15_files = pytest.mark.skipif(
    KERAS_VERSION < (3, 15),
    reason=f"the file was written by Keras 3.15, which Keras {keras.__version__} "
    "cannot read (initializer configs gained `input_axes` in 3.15)",
)


def skip_on_torch_before(version, reason):
    """Skips a test on the PyTorch backend of Keras releases before
    `version` (a `(major, minor)` tuple), where Keras itself lacks what the
    test compares with or runs: `reason`."""
    if keras.backend.backend() == "torch" and KERAS_VERSION < version:
        pytest.skip(f"Keras {keras.__version__} on PyTorch: {reason}")
