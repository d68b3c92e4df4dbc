"""Softmax over masked scores that never returns NaN."""

from keras import backend, ops

from keras_attention._checks import check_mask_shape, static_shape

# Applied in float32 (or float64), never in the half-precision input dtype, so it
# cannot overflow float16 (whose largest finite value is 65504).
MASKED_SCORE = -1e9
_HALF_PRECISION = ("float16", "bfloat16")


def masked_softmax(scores, mask=None, axis=-1):
    """Softmax of `scores` along `axis`, ignoring positions where `mask` is False.

    The softmax is computed in float32 when `scores` is float16 or bfloat16 (the
    usual mixed-precision practice) and the result is cast back. Masked
    positions get a weight of exactly 0 and their scores are never read (they
    are replaced, not added to, so NaN or inf there changes nothing); a row
    whose every position is masked (for example a padding query attending to
    nothing) gives all zeros, never NaN.

    Args:
        scores: float tensor of attention logits, e.g. `(batch, heads, T, S)`.
        mask: optional boolean tensor broadcastable to `scores`, True = attend.
        axis: the axis to normalize over (the key axis), or a tuple of axes
            normalized together (attention over several axes).

    Returns:
        Tensor of weights with the dtype and shape of `scores`.

    Example:

    >>> w = masked_softmax([[1.0, 2.0, 3.0]], mask=[[True, True, False]])
    >>> # w ~ [[0.269, 0.731, 0.0]]
    """
    scores = ops.convert_to_tensor(scores)
    dtype = backend.standardize_dtype(scores.dtype)
    compute_dtype = "float32" if dtype in _HALF_PRECISION else dtype
    logits = ops.cast(scores, compute_dtype)
    if mask is None:
        return ops.cast(_softmax(logits, axis), dtype)
    mask = ops.convert_to_tensor(mask)
    check_mask_shape("mask", static_shape(mask), static_shape(scores), "scores")
    mask = ops.cast(mask, "bool")
    logits = ops.where(mask, logits, ops.cast(MASKED_SCORE, compute_dtype))
    weights = _softmax(logits, axis)
    weights = ops.where(mask, weights, ops.zeros_like(weights))
    return ops.cast(weights, dtype)


def _softmax(logits, axis):
    """`ops.softmax` over one axis or several at once (TensorFlow's kernel
    takes one axis of a tensor of at most 5 dimensions)."""
    if isinstance(axis, int) or len(axis) == 1:
        return ops.softmax(logits, axis=axis if isinstance(axis, int) else axis[0])
    exps = ops.exp(logits - ops.amax(logits, axis=axis, keepdims=True))
    return exps / ops.sum(exps, axis=axis, keepdims=True)
