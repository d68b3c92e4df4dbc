"""The score functions of context attention, `score(s_t, h_i)`, on `keras.ops`.

Each function takes queries `(..., T, Dq)` (decoder states s_t) and keys
`(..., S, Dk)` (encoder annotations h_i) and returns the unnormalized scores
`(..., T, S)`; `masked_softmax` turns them into attention weights. Weights are
passed in explicitly, so the same functions serve the layers in
`keras_attention.layers` and any user code.

| name          | score(s, h)                        | reference              |
| ------------- | ---------------------------------- | ---------------------- |
| `dot`         | s^T h                              | Luong et al., 2015     |
| `scaled_dot`  | s^T h / sqrt(d_k)                  | Vaswani et al., 2017   |
| `general`     | s^T W_a h                          | Luong et al., 2015     |
| `additive`    | v_a^T tanh(W_1 s + W_2 h)          | Bahdanau et al., 2015  |
| `cosine`      | beta * cos(s, h)                   | Graves et al., 2014    |
| `location`    | (W_a s)_i, independent of h        | Luong et al., 2015     |

The additive score is the paper's `v_a^T tanh(W_a [s; h])` with `W_a = [W_1 W_2]`
split so that `W_2 h` is computed once per key instead of once per (query, key)
pair.
"""

import math

from keras import backend, ops

from keras_attention._checks import (
    check_choice,
    check_dims_match,
    check_rank,
    static_shape,
)


def _check_query_key(query, key, same_depth):
    q_shape, k_shape = static_shape(query), static_shape(key)
    check_rank("query", q_shape, range(2, 9))
    check_rank("key", k_shape, range(2, 9))
    if same_depth:
        check_dims_match(
            "query",
            q_shape[-1],
            "key",
            k_shape[-1],
            "last dimension",
            hint="This score has no projection; use the `general` or `additive` "
            "score (MultiplicativeAttention, AdditiveAttention) to compare vectors "
            "of different sizes.",
        )
    return q_shape, k_shape


def _check_kernel(name, kernel, expected):
    shape = static_shape(kernel)
    check_rank(name, shape, len(expected))
    for axis, (got, want) in enumerate(zip(shape, expected, strict=True)):
        if got is not None and want is not None and got != want:
            raise ValueError(
                f"`{name}` must have shape {expected}; received {shape} "
                f"(axis {axis} is {got}, expected {want})."
            )


def _transpose_last(x):
    return ops.swapaxes(x, -1, -2)


def _batch_labels(x, reserved):
    """One einsum label per axis of `x` but the last, none of `reserved`.

    Explicit labels, not `...`: TensorFlow differentiates an ellipsis einsum
    against an unbatched operand by materializing the broadcast product, which
    made the gradient of a `(16, 128, 256) x (256, 256)` projection 140 times
    slower (2.4 s against 17 ms) than with labels.
    """
    labels = [c for c in "abcefghijklmnopqrst" if c not in reserved]
    return "".join(labels[: len(x.shape) - 1])


def project(x, kernel):
    """`x @ kernel` for `x` `(..., D)` and `kernel` `(D, U)`, in `x`'s dtype.

    An einsum rather than a broadcasting matmul or a tensordot, whose
    gradients need shapes that XLA cannot resolve inside a recurrent loop over
    a dynamic batch (a decoder step attending inside `keras.layers.RNN`).
    """
    batch = _batch_labels(x, "du")
    return ops.einsum(f"{batch}d,du->{batch}u", x, ops.cast(kernel, x.dtype))


def dot_score(query, key):
    """Luong's dot score `s^T h`: `(..., T, D) x (..., S, D) -> (..., T, S)`."""
    query, key = ops.convert_to_tensor(query), ops.convert_to_tensor(key)
    _check_query_key(query, key, same_depth=True)
    return ops.matmul(query, _transpose_last(key))


def scaled_dot_score(query, key, scale=None):
    """Vaswani's scaled dot score `s^T h / sqrt(d_k)`.

    Args:
        query: `(..., T, d_k)`.
        key: `(..., S, d_k)`.
        scale: multiplier for the scores; defaults to `1 / sqrt(d_k)`, which
            keeps the variance of the scores (and so the softmax temperature)
            independent of `d_k`.
    """
    query, key = ops.convert_to_tensor(query), ops.convert_to_tensor(key)
    q_shape, _ = _check_query_key(query, key, same_depth=True)
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1])
    return ops.matmul(query, _transpose_last(key)) * ops.cast(scale, query.dtype)


def general_score(query, key, kernel):
    """Luong's general (bilinear) score `s^T W_a h`.

    Args:
        query: `(..., T, Dq)`.
        key: `(..., S, Dk)`.
        kernel: `W_a`, shape `(Dq, Dk)`.
    """
    query, key = ops.convert_to_tensor(query), ops.convert_to_tensor(key)
    q_shape, k_shape = _check_query_key(query, key, same_depth=False)
    _check_kernel("kernel", kernel, (q_shape[-1], k_shape[-1]))
    # Project the keys (S of them) rather than the queries: the projected keys
    # can be reused across decoder steps.
    projected_key = project(key, _transpose_last(kernel))
    return ops.matmul(query, _transpose_last(projected_key))


def additive_score(query, key, query_kernel, key_kernel, score_vector, bias=None):
    """Bahdanau's additive (concat) score `v_a^T tanh(W_1 s + W_2 h + b)`.

    Args:
        query: `(..., T, Dq)`.
        key: `(..., S, Dk)`.
        query_kernel: `W_1`, shape `(Dq, units)`.
        key_kernel: `W_2`, shape `(Dk, units)`.
        score_vector: `v_a`, shape `(units,)`.
        bias: optional `b`, shape `(units,)`.

    Memory is O(T * S * units), since the tanh is taken for every pair.
    """
    query, key = ops.convert_to_tensor(query), ops.convert_to_tensor(key)
    q_shape, k_shape = _check_query_key(query, key, same_depth=False)
    units = static_shape(score_vector)
    check_rank("score_vector", units, 1)
    _check_kernel("query_kernel", query_kernel, (q_shape[-1], units[0]))
    _check_kernel("key_kernel", key_kernel, (k_shape[-1], units[0]))
    return additive_score_from_projections(
        project(query, query_kernel),
        project(key, key_kernel),
        score_vector,
        bias=bias,
    )


def additive_score_from_projections(
    projected_query, projected_key, score_vector, bias=None
):
    """`v_a^T tanh(W_1 s + W_2 h + b)` from `W_1 s` `(..., T, units)` and
    `W_2 h` `(..., S, units)`: lets a decoder project the keys once per source
    rather than at every step.
    """
    dtype = projected_query.dtype
    hidden = ops.expand_dims(projected_query, -2) + ops.expand_dims(
        ops.cast(projected_key, dtype), -3
    )
    if bias is not None:
        hidden = hidden + ops.cast(bias, dtype)
    # An einsum, not a broadcasting matmul or product with `v_a`: their
    # gradients need shapes that XLA cannot resolve inside a recurrent loop
    # over a dynamic batch (a decoder step inside `keras.layers.RNN`).
    batch = _batch_labels(hidden, "u")
    return ops.einsum(
        f"{batch}u,u->{batch}", ops.tanh(hidden), ops.cast(score_vector, dtype)
    )


def cosine_score(query, key, sharpness=1.0, epsilon=1e-6):
    """Graves' content-based score `beta * cos(s, h)`.

    Computed in float32 for half-precision inputs so that the norms neither
    overflow nor underflow; zero vectors give a score of 0, not NaN.

    Args:
        query: `(..., T, D)`.
        key: `(..., S, D)`.
        sharpness: `beta`, a scalar that sharpens (large) or flattens (small)
            the distribution, since cosine scores alone lie in [-1, 1].
        epsilon: lower bound on the squared norms.
    """
    query, key = ops.convert_to_tensor(query), ops.convert_to_tensor(key)
    _check_query_key(query, key, same_depth=True)
    dtype = backend.standardize_dtype(query.dtype)
    compute_dtype = "float32" if dtype in ("float16", "bfloat16") else dtype

    def normalize(x):
        x = ops.cast(x, compute_dtype)
        squared_norm = ops.sum(ops.square(x), axis=-1, keepdims=True)
        return x * ops.rsqrt(ops.maximum(squared_norm, epsilon))

    cosine = ops.matmul(normalize(query), _transpose_last(normalize(key)))
    return ops.cast(cosine * ops.cast(sharpness, compute_dtype), dtype)


def location_score(query, kernel, key_length, bias=None):
    """Luong's location-based score `W_a s_t`: one logit per source position.

    The score does not look at the keys at all; the decoder state alone
    predicts where to attend. `kernel` has one column per source position up
    to the longest source the layer supports, and the first `key_length`
    columns are used.

    Args:
        query: `(..., T, Dq)`.
        kernel: `W_a`, shape `(Dq, max_length)`.
        key_length: S, the number of source positions (`<= max_length`).
        bias: optional `(max_length,)`.
    """
    query = ops.convert_to_tensor(query)
    q_shape = static_shape(query)
    check_rank("query", q_shape, range(2, 9))
    k_shape = static_shape(kernel)
    _check_kernel("kernel", kernel, (q_shape[-1], None))
    if isinstance(key_length, int) and key_length > k_shape[1]:
        raise ValueError(
            f"The key length ({key_length}) exceeds the number of source "
            f"positions the location score was built for (max_length="
            f"{k_shape[1]})."
        )
    logits = project(query, kernel)
    if bias is not None:
        logits = logits + ops.cast(bias, query.dtype)
    return logits[..., :key_length]


SCORE_FUNCTIONS = {
    "dot": dot_score,
    "scaled_dot": scaled_dot_score,
    "general": general_score,
    "additive": additive_score,
    "cosine": cosine_score,
    "location": location_score,
}


def get_score_function(name):
    """Returns the score function registered under `name` (see the table above)."""
    check_choice("score", name, SCORE_FUNCTIONS)
    return SCORE_FUNCTIONS[name]
