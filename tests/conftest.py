import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# XLA's CPU backend compiles without LLVM's costly optimizations and with its
# classic fusion code generator: the tests' tiny programs spend far longer
# compiling than running. Measured on the 2-core machine: without the costly
# passes, the decoding and GPT tests 105 -> 70 s on TensorFlow, the
# chunked-attention tests 86 -> 52 s on JAX; without the MLIR fusion
# emitters besides, the MultiHeadAttention tests on JAX 91 -> 54 s (each
# eager op compiles once per shape: 38 -> 21 ms a compile). XLA's graph
# passes still run, and every test still compiles under XLA. The processes
# the tests start inherit it.
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
    "--xla_cpu_use_fusion_emitters=false",
)

import pytest  # noqa: E402

# Keras and the package are imported where they are used: pytest-xdist's
# controlling process loads this file too, and runs no test; importing Keras
# there (TensorFlow, 6 s of CPU) slowed the workers' start beside it.

# Tests that share a fixture which trains a model are marked
# `xdist_group(<fixture name>)`: CI's slow tier (`--dist loadgroup`) runs each
# group on one worker, so that the model is trained once, not once per worker
# (tests/test_xdist_groups.py checks that it does). Those fixtures are
# session-scoped: a worker may run other modules' tests between two of a
# group's, and a module-scoped fixture would be torn down and trained again.


def pytest_collection_modifyitems(items):
    """`@pytest.mark.needs_package(*names)`: the test reads the data of these
    Debian packages, and skips, naming them, where one is missing or hidden
    by KERAS_ATTENTION_HIDE_PACKAGES (a skip mark is read before any fixture
    is set up, so a module fixture that loads the data is not reached)."""
    from keras_attention.data.packages import installed

    for item in items:
        for marker in item.iter_markers("needs_package"):
            missing = [name for name in marker.args if not installed(name)]
            if missing:
                reason = f"needs `apt-get install {' '.join(missing)}`"
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(params=["bfloat16", "float16"])
def floatx(request):
    """A 16-bit `keras.config.floatx()` for one test, as a user sets it."""
    import keras

    before = keras.config.floatx()
    keras.config.set_floatx(request.param)
    # What set_floatx alone gives a user: the default policy follows floatx
    # (the float32 global policy that `_seed` leaves behind would not).
    keras.config.set_dtype_policy(request.param)
    yield request.param
    keras.config.set_floatx(before)


def trainable_gradients(variables, loss_fn):
    """Gradients of `loss_fn()` with respect to `variables` on any backend, as
    NumPy arrays."""
    import keras

    from keras_attention.utils.backend import variable_gradients

    grads = variable_gradients(variables, loss_fn)
    return [keras.ops.convert_to_numpy(g) for g in grads]


# Keras runs a full garbage collection in `clear_session` (the benchmarks call
# it between cases) and each time `quantize` deletes a layer's attribute (18
# times for a one-block Llama). With TensorFlow, JAX and keras-hub imported,
# each walks half a million objects (0.25 s here; more as a worker's tests
# leave objects behind): a Llama's quantization took 14 s in the slow tier.
# The objects alive after collection, and every `FREEZE_EVERY` tests, are
# frozen (`gc.freeze`: left out of every collection). Each refreeze first
# collects what the tests since the last one left (a test's garbage is freed
# then at the latest); a cycle among frozen objects is freed by the full
# collection of every `FULL_COLLECTION_EVERY`-th refreeze. (A full
# collection took 0.4 s here; one at every refreeze cost the models, layers
# and decoding tests 19 s of their 300 worker-s, against 3 s now.)
FREEZE_EVERY = 20
FULL_COLLECTION_EVERY = 10
_tests_run = 0


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()


def pytest_runtest_setup(item):
    global _tests_run
    _tests_run += 1
    if _tests_run % FREEZE_EVERY == 0:
        if _tests_run % (FREEZE_EVERY * FULL_COLLECTION_EVERY) == 0:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
