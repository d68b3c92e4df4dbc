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


def check_positive_number(name, value, allow_none=False):
    """Checks a positive int or float (NaN refused)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"`{name}` must be a positive number; received {value!r}.")


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
    tensors and JAX's symbolic dimensions (lengths known only when the graph
    runs) pass unchecked."""
    if value is None and allow_none:
        return
    if hasattr(value, "shape") and not isinstance(value, np.generic):
        if len(value.shape) != 0:
            raise ValueError(
                f"`{name}` must be a scalar length; received a tensor of shape "
                f"{tuple(value.shape)}."
            )
        return
    if type(value).__module__.startswith("jax"):  # a symbolic dimension
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"`{name}` must be an integer length; received {name}={value!r} "
            f"of type {type(value).__name__}."
        )
    if value < 0:
        raise ValueError(f"`{name}` must be >= 0; received {name}={value!r}.")


def check_attention_shapes(query_shape, value_shape, key_shape=None):
    """Checks the input shapes of a multi-head attention layer: query and
    value of one rank (at least 3) and batch size, key and value equal but
    in their features, known feature sizes."""
    query_shape, value_shape = tuple(query_shape), tuple(value_shape)
    key_shape = value_shape if key_shape is None else tuple(key_shape)
    if value_shape[1:-1] != key_shape[1:-1]:
        raise ValueError(
            "`key` and `value` must be equal in every axis but the last "
            f"(their positions); received key shape {key_shape} and value "
            f"shape {value_shape}."
        )
    if len(query_shape) < 3 or len(query_shape) != len(value_shape):
        raise ValueError(
            "`query` and `value` must have the same rank, at least 3 "
            "(batch, positions..., features); received query shape "
            f"{query_shape} and value shape {value_shape}."
        )
    if not dims_equal(query_shape[0], value_shape[0]):
        raise ValueError(
            f"`query` and `value` must have the same batch size; received "
            f"query shape {query_shape} and value shape {value_shape}."
        )
    for name, shape in (("query", query_shape), ("value", value_shape)):
        if shape[-1] is None:
            raise ValueError(
                f"The feature size (last axis) of `{name}` must be known; "
                f"received shape {shape}."
            )


def check_cache_shape(shape, num_key_value_heads, key_dim, value_dim):
    """Checks a key/value cache `(batch, 2, max_length, num_key_value_heads,
    key_dim)` of an attention layer with these sizes."""
    if value_dim != key_dim:
        raise ValueError(
            "A cache stacks keys and values, so it needs key_dim == value_dim; "
            f"this layer has key_dim={key_dim}, value_dim={value_dim}."
        )
    expected = (None, 2, None, num_key_value_heads, key_dim)
    if len(shape) != 5 or shape[1] != 2 or tuple(shape[3:]) != expected[3:]:
        raise ValueError(
            f"`cache` must have shape (batch, 2, max_length, "
            f"num_key_value_heads={num_key_value_heads}, key_dim={key_dim}) = "
            f"{expected}; received {shape}."
        )
