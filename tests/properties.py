"""Shared pieces of the property-based (hypothesis) tests."""

import os
import re

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

# Examples per property; `HYPOTHESIS_EXAMPLES=500 pytest ...` searches harder.
NUM_EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "40"))
EXAMPLES = settings(
    max_examples=NUM_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("HYPOTHESIS_RANDOM") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
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
