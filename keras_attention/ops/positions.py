"""Positions inside attention: ALiBi's linear biases and T5's relative
position buckets.

Both make a score depend on the offset between a query and a key rather than
on their absolute positions: ALiBi subtracts `slope_h * |i - j|` from the
scores of head `h`; T5 adds a learned scalar per head and per bucket of
`j - i` (exact buckets for small offsets, logarithmic ones up to a maximum
distance). Rotary embeddings rotate the queries and keys instead: see
`keras_attention.layers.RotaryEmbedding`.

References:
    - [Press et al., 2022. Train Short, Test Long: Attention with Linear
      Biases Enables Input Length Extrapolation](
      https://arxiv.org/abs/2108.12409)
    - [Raffel et al., 2020. Exploring the Limits of Transfer Learning with a
      Unified Text-to-Text Transformer](https://arxiv.org/abs/1910.10683)
    - [Shaw et al., 2018. Self-Attention with Relative Position
      Representations](https://arxiv.org/abs/1803.02155)
"""

import math

import numpy as np
from keras import backend, ops

from keras_attention._checks import check_positive_int, static_shape


def alibi_slopes(num_heads, max_bias=8.0):
    """The per-head slopes of ALiBi, a geometric sequence: NumPy `(num_heads,)`.

    For `n` heads, a power of two, head `h` (from 0) gets
    `2 ** (-max_bias * (h + 1) / n)`: with the paper's `max_bias=8` and 8
    heads, `1/2, 1/4, ..., 1/256`. Otherwise the `2^k < n` heads of the
    nearest power of two get theirs, and the rest take every other slope of
    the `2^(k+1)` sequence, as in the paper's code.

    Args:
        num_heads: number of heads.
        max_bias: the exponent reached by the last head's slope (keras-hub's
            `alibi_bias_max`).

    Example:

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    check_positive_int("num_heads", num_heads)
    if not max_bias > 0:
        raise ValueError(f"`max_bias` must be positive; received {max_bias!r}.")

    def geometric(n):
        return [2.0 ** (-max_bias * (h + 1) / n) for h in range(n)]

    power = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(power)
    if power < num_heads:
        slopes += geometric(2 * power)[0::2][: num_heads - power]
    return np.asarray(slopes, "float32")


def alibi_bias(slopes, query_length, key_length=None, offset=0):
    """ALiBi's bias `-slope_h * |i + offset - j|`: float32 `(num_heads, T, S)`.

    With a causal mask this is the paper's `-slope_h * (i - j)` for every key
    a query sees; without one, the same penalty on keys ahead of the query.

    Args:
        slopes: `(num_heads,)`, e.g. `alibi_slopes(num_heads)`.
        query_length: T.
        key_length: S (defaults to T).
        offset: absolute position of the first query (cached decoding).
    """
    key_length = query_length if key_length is None else key_length
    rows = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
    distance = ops.cast(
        ops.abs(rows - ops.arange(key_length, dtype="int32")[None, :]), "float32"
    )
    slopes = ops.cast(ops.convert_to_tensor(slopes), "float32")
    return -slopes[:, None, None] * distance[None]


def relative_position_buckets(
    query_length,
    key_length=None,
    num_buckets=32,
    max_distance=128,
    bidirectional=True,
    offset=0,
):
    """T5's bucket of each offset `j - (i + offset)`: int32 `(T, S)`.

    Half of the buckets hold one offset each (the nearest ones); the rest
    cover offsets up to `max_distance` on a logarithmic scale, and farther
    offsets share the last bucket. Bidirectional buckets split in two halves,
    keys behind and keys ahead of the query; unidirectional ones give every
    key ahead of the query bucket 0 (a causal mask hides them anyway).

    Args:
        query_length: T.
        key_length: S (defaults to T).
        num_buckets: number of buckets (even when bidirectional).
        max_distance: the offset from which all share the last bucket.
        bidirectional: separate buckets for keys ahead of the query.
        offset: absolute position of the first query (cached decoding).
    """
    check_positive_int("num_buckets", num_buckets)
    check_positive_int("max_distance", max_distance)
    check_num_buckets(num_buckets, bidirectional)
    key_length = query_length if key_length is None else key_length
    rows = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
    relative = ops.arange(key_length, dtype="int32")[None, :] - rows
    return bucket_of_offset(relative, num_buckets, max_distance, bidirectional)


def bucket_of_offset(relative, num_buckets=32, max_distance=128, bidirectional=True):
    """T5's bucket of each key-minus-query offset in the int tensor
    `relative` (any shape), as `relative_position_buckets` assigns them; the
    tile-by-tile form that a `score_mod` uses."""
    relative = ops.cast(relative, "int32")
    buckets = ops.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = ops.cast(ops.where(relative > 0, num_buckets, 0), "int32")
        distance = ops.abs(relative)
    else:
        distance = ops.maximum(-relative, 0)
    exact = num_buckets // 2
    # Distances from `exact` to `max_distance` map logarithmically onto the
    # remaining buckets; clamped at 1 so that log never sees 0.
    spread = ops.log(ops.cast(ops.maximum(distance, 1), "float32") / exact) / (
        math.log(max_distance / exact) if max_distance > exact else 1.0
    )
    far = exact + ops.cast(spread * (num_buckets - exact), "int32")
    far = ops.minimum(far, num_buckets - 1)
    # int32 whatever floatx is (here and for `buckets` above): under
    # set_floatx("bfloat16") Python ints alone take int16 (TensorFlow), and
    # Keras' JAX ops turn `int32 op int` into float32; the values are small
    # integers, exact in either.
    return ops.cast(buckets + ops.where(distance < exact, distance, far), "int32")


def check_num_buckets(num_buckets, bidirectional):
    """Raises a ValueError for a positive `num_buckets` that T5's bucketing
    cannot split: odd when bidirectional, or under 2 per direction."""
    if bidirectional and num_buckets % 2:
        raise ValueError(
            "Bidirectional buckets split in two halves, so `num_buckets` must "
            f"be even; received num_buckets={num_buckets}."
        )
    if num_buckets // (2 if bidirectional else 1) < 2:
        raise ValueError(
            "`num_buckets` must leave at least 2 buckets per direction (4 when "
            f"bidirectional); received num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}."
        )


def segment_positions(segment_ids):
    """The position of each token inside its document in a packed row: int32
    `(B, T)`.

    Positions count from 0 and restart wherever the id differs from the one
    before it (JAX's `SegmentIds` convention: one int id per token, the same
    id along a document): `[[7, 7, 7, 3, 3, 0]]` gives `[[0, 1, 2, 0, 1, 0]]`.
    Feed them to a position layer (`positions=`) so that every document of a
    packed row is encoded as if it were alone. Computed with a sort along
    each row, O(T log T), never a `(T, T)` tensor.

    Args:
        segment_ids: int `(B, T)`, the document of each token.

    Returns:
        int32 `(B, T)`.

    Raises:
        ValueError: `segment_ids` is not an integer tensor of rank 2.

    Example:

    >>> segment_positions([[1, 1, 1, 2, 2, 0]]).tolist()  # doctest: +SKIP
    [[0, 1, 2, 0, 1, 0]]
    """
    ids = check_segment_ids(segment_ids)
    length = ops.shape(ids)[1]
    index = ops.broadcast_to(ops.arange(length, dtype="int32")[None], ops.shape(ids))
    starts = ops.concatenate(
        [ops.ones_like(ids[:, :1], "bool"), ops.not_equal(ids[:, 1:], ids[:, :-1])],
        axis=1,
    )
    # Document k of a row starts at the k-th smallest start index; the other
    # positions sort after them (`length` is past every index).
    first = ops.sort(ops.where(starts, index, length), axis=1)
    document = ops.cumsum(ops.cast(starts, "int32"), axis=1) - 1
    return index - ops.take_along_axis(first, document, axis=1)


def check_segment_ids(segment_ids, length=None, name="segment_ids", expected=None):
    """`segment_ids` as int32, or a ValueError naming what was received and
    what was expected: an integer tensor `(batch, length)`.

    Args:
        segment_ids: the ids to check.
        length: the length they must have, where known (an int), else None.
        name: the argument's name, for the message.
        expected: how to describe the expected shape (default
            `(batch, length)`).
    """
    ids = ops.convert_to_tensor(segment_ids)
    dtype = backend.standardize_dtype(ids.dtype)
    shape = static_shape(ids)
    want = expected or ("(batch, length)" if length is None else f"(batch, {length})")
    if "int" not in dtype or len(shape) != 2:
        raise ValueError(
            f"`{name}` must be integer ids of shape {want}, one id per token "
            f"(the document it belongs to); received dtype {dtype} and shape "
            f"{shape}."
        )
    if isinstance(length, int) and shape[1] is not None and shape[1] != length:
        raise ValueError(
            f"`{name}` must have one id per token, shape {want}; received "
            f"shape {shape}."
        )
    return ops.cast(ids, "int32")
