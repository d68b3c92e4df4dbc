"""Argument and shape checks shared by ops and layers.

Every check raises a `ValueError` that names the argument, what it got and what
was expected, so that a user sees the mistake at the call site rather than a
backend error from deep inside a matmul.
"""

import math

import numpy as np


def static_shape(x):
    """Returns the static shape of a tensor as a tuple (unknown dims are None)."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    return tuple(_static_dim(d) for d in shape)


def _static_dim(d):
    """`d` as an int, or None where it is not known when tracing (a symbolic
    dimension of TensorFlow or JAX)."""
    if d is None:
        return None
    try:
        return int(d)
    except Exception:  # JAX raises InconclusiveDimensionOperation
        return None


def check_rank(name, shape, ranks):
    """Checks that `shape` has one of the allowed `ranks` (an int or a tuple)."""
    allowed = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if shape is None:
        return
    if len(shape) not in allowed:
        expected = " or ".join(str(r) for r in allowed)
        raise ValueError(
            f"`{name}` must have rank {expected}; received a tensor of rank "
            f"{len(shape)} with shape {shape}."
        )


def dims_equal(a, b):
    """True unless both dims are known and differ."""
    return a is None or b is None or a == b


def check_dims_match(name_a, dim_a, name_b, dim_b, what, hint=""):
    if not dims_equal(dim_a, dim_b):
        raise ValueError(
            f"The {what} of `{name_a}` ({dim_a}) must equal the {what} of "
            f"`{name_b}` ({dim_b}).{(' ' + hint) if hint else ''}"
        )


def broadcastable(shape, target):
    """True if `shape` broadcasts to `target` (right-aligned, numpy rules)."""
    if len(shape) > len(target):
        return False
    for s, t in zip(reversed(shape), reversed(target), strict=False):
        if s is None or t is None or s == 1 or s == t:
            continue
        return False
    return True


def check_mask_shape(name, mask_shape, target_shape, layout):
    """Checks that a boolean mask broadcasts to the shape it is applied to."""
    if mask_shape is None or target_shape is None:
        return
    if not broadcastable(mask_shape, target_shape):
        raise ValueError(
            f"`{name}` of shape {mask_shape} does not broadcast to {layout} "
            f"{target_shape}."
        )


def check_positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive integer; received {name}={value!r}."
        )


def check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"`{name}` must be a float in [0, 1); received {value!r}.")
    if not 0.0 <= value < 1.0 or math.isnan(value):
        raise ValueError(f"`{name}` must be in [0, 1); received {name}={value!r}.")


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"Unknown `{name}`: {value!r}. Expected one of {sorted(choices)}."
        )


def check_length(name, value, allow_none=False):
    """Checks a sequence length given as a Python or NumPy integer >= 0;
    tensors (lengths known only when the graph runs) pass unchecked."""
    if value is None and allow_none:
        return
    if hasattr(value, "shape") and not isinstance(value, np.generic):
        if len(value.shape) != 0:
            raise ValueError(
                f"`{name}` must be a scalar length; received a tensor of shape "
                f"{tuple(value.shape)}."
            )
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"`{name}` must be an integer length; received {name}={value!r} "
            f"of type {type(value).__name__}."
        )
    if value < 0:
        raise ValueError(f"`{name}` must be >= 0; received {name}={value!r}.")
