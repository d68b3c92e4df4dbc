"""Shared pieces of the property-based (hypothesis) tests."""

import os
import re

import keras
import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

from keras_attention.utils.backend import value_and_grad

# Examples per property; `HYPOTHESIS_EXAMPLES=500 pytest ...` searches harder.
NUM_EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "25"))
EXAMPLES = settings(
    max_examples=NUM_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("HYPOTHESIS_RANDOM") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
# For properties of whole blocks, built of parts tested with EXAMPLES.
FEW_EXAMPLES = settings(EXAMPLES, max_examples=max(2, NUM_EXAMPLES // 4))
CLEAR_ERRORS = (ValueError, TypeError)
# A clear error says what was wrong: what it received or expected.
CLEAR_WORDS = re.compile(r"must|expected|received|got|not ", re.IGNORECASE)


def dims(low=1, high=4):
    return st.integers(low, high)


def shapes(min_rank=0, max_rank=4, low=1, high=4):
    return st.lists(dims(low, high), min_size=min_rank, max_size=max_rank).map(tuple)


def choices(allow_invalid):
    """`either(valid, invalid)`: a strategy drawing from `valid`, or, where
    `allow_invalid`, from either."""

    def either(valid, invalid):
        return st.one_of(valid, invalid) if allow_invalid else valid

    return either


def outcome(call, clear_words=CLEAR_WORDS):
    """`call()`'s result, or the `ValueError`/`TypeError` it raised, which must
    say what it received or expected (match `clear_words`). Any other
    exception (a backend error from deep inside, say) fails the test."""
    try:
        result = call()
    except CLEAR_ERRORS as error:
        assert clear_words.search(str(error)), f"unclear error: {error!r}"
        event(f"refused with {type(error).__name__}")
        return error
    event("computed")
    return result


def half_tolerance(dtype):
    """Comparison tolerance against a float64 reference for results computed
    in `dtype`."""
    return {
        "float32": {"rtol": 1e-4, "atol": 1e-5},
        "float16": {"rtol": 2e-2, "atol": 2e-2},
        "bfloat16": {"rtol": 6e-2, "atol": 6e-2},
    }[dtype]


# What a padding buffer may hold: never read, it must not matter.
GARBAGE = st.sampled_from([np.nan, np.inf, -np.inf, 1e30])


def with_garbage(x, hidden, fill):
    """A copy of `x` `(..., S, D)` holding `fill` at the positions where
    `hidden` (broadcastable to `(..., S)`) is True."""
    x = np.array(x, copy=True)
    x[np.broadcast_to(hidden, x.shape[:-1])] = fill
    return x


def to_numpy(x):
    # Through float32: NumPy has no bfloat16, and torch tensors that require
    # grad must be detached.
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def gradients(loss_fn, tensors, variables=()):
    """The gradients of the scalar `loss_fn(*tensors)` with respect to each of
    `tensors` and then each of `variables` (read by `loss_fn`), as NumPy."""
    variables = list(variables)

    def loss_of(values, *tensors):
        mapping = list(zip(variables, values, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            return loss_fn(*tensors)

    values = [keras.ops.convert_to_tensor(v.value) for v in variables]
    tensors = [keras.ops.convert_to_tensor(t) for t in tensors]
    _, (variable_grads, *tensor_grads) = value_and_grad(loss_of)(values, *tensors)
    return [to_numpy(g) for g in (*tensor_grads, *variable_grads)]


def assert_same_and_finite(got, want):
    """`got` equals `want` exactly (the garbage was never read, so nothing
    differs) and is finite."""
    for g, w in zip(got, want, strict=True):
        g, w = to_numpy(g), to_numpy(w)
        assert np.all(np.isfinite(g)), "non-finite result"
        np.testing.assert_array_equal(g, w)
