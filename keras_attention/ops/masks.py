"""Boolean attention masks (True = attend), built with `keras.ops` only."""

from keras import ops

from keras_attention._checks import (
    broadcastable,
    check_length,
    check_rank,
    static_shape,
)


def padding_mask(token_ids, padding_id=0):
    """Marks the real (non-padding) positions of a batch of token ids.

    Args:
        token_ids: integer tensor `(batch, length)` (any rank works).
        padding_id: the id used for padding.

    Returns:
        Boolean tensor of the same shape, True where `token_ids != padding_id`.

    Example:

    >>> padding_mask([[5, 7, 0, 0]]).numpy().tolist()  # doctest: +SKIP
    [[True, True, False, False]]
    """
    return ops.not_equal(ops.convert_to_tensor(token_ids), padding_id)


def length_mask(lengths, max_length):
    """Boolean `(batch, max_length)` mask, True for the first `lengths[b]` steps.

    Args:
        lengths: integer tensor `(batch,)` of valid lengths.
        max_length: the padded length.
    """
    lengths = ops.convert_to_tensor(lengths)
    check_rank("lengths", static_shape(lengths), 1)
    positions = ops.arange(max_length, dtype="int32")
    return ops.less(positions[None, :], ops.cast(lengths, positions.dtype)[:, None])


def causal_mask(query_length, key_length=None, offset=0):
    """Lower-triangular mask: query position `i` sees key positions `<= i + offset`.

    `offset` is the absolute position of the first query, which is how an
    incremental decoder with a cache of earlier keys uses the mask: with one new
    query at step `t`, `causal_mask(1, max_length, offset=t)` lets it attend to
    the cached keys `0..t`. With `offset=0` and `key_length == query_length` it is
    the usual "no peeking at the future" mask of the Transformer decoder.

    Args:
        query_length: number of queries T.
        key_length: number of keys S (defaults to T).
        offset: absolute position of the first query (int or scalar tensor).

    Returns:
        Boolean tensor of shape `(T, S)`.
    """
    check_length("query_length", query_length)
    check_length("key_length", key_length, allow_none=True)
    if key_length is None:
        key_length = query_length
    rows = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
    cols = ops.arange(key_length, dtype="int32")[None, :]
    return ops.greater_equal(rows, cols)


def sliding_window_mask(query_length, key_length, window, offset=0):
    """Band mask: query position `i` sees key positions `j` with
    `|i + offset - j| < window` (the symmetric window of
    `keras.layers.MultiHeadAttention(sliding_window=...)`; with a causal mask
    as well, the `window` most recent keys, itself included).

    Args:
        query_length: number of queries T.
        key_length: number of keys S.
        window: the window size, a positive int.
        offset: absolute position of the first query (int or scalar tensor).

    Returns:
        Boolean tensor of shape `(T, S)`.
    """
    check_length("query_length", query_length)
    check_length("key_length", key_length)
    rows = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
    cols = ops.arange(key_length, dtype="int32")[None, :]
    return ops.less(ops.abs(rows - cols), window)


def merge_masks(*masks):
    """Logical AND of the given boolean masks, skipping `None` (broadcasting)."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def attended_keys(mask, query_length, key_length, is_causal=False, query_offset=0):
    """The key positions that at least one query may attend to.

    Args:
        mask: boolean tensor broadcastable to `(..., T, S)`, True = attend, or
            None.
        query_length: T.
        key_length: S.
        is_causal: also apply the causal mask (query `i` sees keys
            `j <= i + query_offset`).
        query_offset: the absolute position of the first query.

    Returns:
        Boolean `(..., S)`, the mask's leading axes with T reduced; None when
        nothing hides a key from every query.
    """
    if mask is not None:
        mask = ops.cast(mask, "bool")
        while len(mask.shape) < 2:
            mask = ops.expand_dims(mask, 0)
    if is_causal:
        if mask is not None and mask.shape[-2] != 1:
            mask = merge_masks(
                mask, causal_mask(query_length, key_length, query_offset)
            )
        elif not (
            isinstance(query_length, int)
            and isinstance(key_length, int)
            and isinstance(query_offset, int)
            and key_length <= query_length + query_offset
        ):
            # A mask that is the same for every query hides no more keys once
            # causal: key `j` stays seen by query `j`, and only the keys past
            # the last query are seen by none. This keeps the chunked path
            # from materializing a (T, S) mask.
            reach = ops.less(
                ops.arange(key_length, dtype="int32"),
                query_length + ops.cast(query_offset, "int32"),
            )[None]
            mask = merge_masks(mask, reach)
    if mask is None:
        return None
    return ops.any(mask, axis=-2)


def zero_unattended(x, attended):
    """`x` `(..., S, D)` with zeros where `attended` (broadcastable to
    `(..., S)`) is False; `x` itself when `attended` is None.

    A masked position gets a weight of exactly 0, but `0 * NaN` is NaN: the
    NaN or inf of a padding buffer holding garbage would reach every output,
    and every gradient. Zeroed before anything reads it, it reaches none.
    """
    if attended is None:
        return x
    return ops.where(ops.expand_dims(attended, -1), x, 0.0)


def combine_attention_masks(
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    *,
    use_causal_mask=False,
    sliding_window=None,
    query_length=None,
    key_length=None,
    offset=0,
    num_attention_axes=1,
):
    """Every mask of one attention call merged into one boolean mask.

    The masks of `keras.layers.MultiHeadAttention`'s call, with its rules: the
    query's `(B, T)` mask hides rows, the value's and key's `(B, S)` masks hide
    columns, the causal mask and the sliding window (counted from `offset`,
    the position of the first query in a decoding cache) hide the future and
    the far, and `attention_mask` (True = attend) is ANDed with them.

    Args:
        query_mask: optional boolean `(B, T)`.
        value_mask: optional boolean `(B, S)`.
        key_mask: optional boolean `(B, S)`.
        attention_mask: optional boolean `(T, S)`, `(B, T, S)` or, with a
            heads axis, `(B, num_heads, T, S)` (one attention axis);
            broadcastable to the scores' attention axes with several.
        use_causal_mask: query `t` attends to keys `<= offset + t`.
        sliding_window: query `t` attends to keys within `sliding_window - 1`
            positions of `offset + t`.
        query_length: T (an int or a scalar tensor).
        key_length: S (an int or a scalar tensor).
        offset: the position of the first query.
        num_attention_axes: with several, the causal mask and the window run
            along the first attention axis and `attention_mask` is not checked
            against `(T, S)` (as in Keras).

    Returns:
        `(B, T, S)`, or `(B, num_heads, T, S)` when `attention_mask` has a
        heads axis; None when there is no mask at all.

    Raises:
        ValueError: `attention_mask` does not fit `(T, S)`.
    """
    with_heads = False
    if attention_mask is not None:
        attention_mask = ops.cast(ops.convert_to_tensor(attention_mask), "bool")
        if num_attention_axes == 1:
            shape = static_shape(attention_mask)
            _check_attention_mask(shape, query_length, key_length)
            with_heads = len(attention_mask.shape) == 4
    masks = []
    if query_mask is not None:
        masks.append(ops.expand_dims(ops.cast(query_mask, "bool"), -1))
    for mask in (value_mask, key_mask):
        if mask is not None:
            masks.append(ops.expand_dims(ops.cast(mask, "bool"), -2))
    if use_causal_mask:
        masks.append(causal_mask(query_length, key_length, offset)[None])
    if sliding_window is not None:
        band = sliding_window_mask(query_length, key_length, sliding_window, offset)
        masks.append(band[None])
    if with_heads:
        masks = [ops.expand_dims(mask, 1) for mask in masks]
    masks.append(attention_mask)
    return merge_masks(*masks)


def _check_attention_mask(shape, query_length, key_length):
    lengths = tuple(
        d if isinstance(d, int) else None for d in (query_length, key_length)
    )
    if len(shape) not in (2, 3, 4) or not broadcastable(shape[-2:], lengths):
        raise ValueError(
            "`attention_mask` must have shape (query_length, key_length), "
            "(batch, query_length, key_length) or (batch, num_heads, "
            f"query_length, key_length), with (query_length, key_length) = "
            f"{lengths}; received {shape}."
        )


def hide_unattended_inputs(
    key, value, mask, query_length, key_length, is_causal=False, query_mask=None
):
    """`key` and `value` `(B, S, dim)` with zeros at the positions no query may
    attend to (under `mask`, `(B, T, S)` or `(B, N, T, S)`, the causal mask
    when `is_causal`, and `query_mask` `(B, T)` when the query mask is kept
    apart from `mask`: a key only masked queries reach is hidden too).

    The attention op never reads those positions, but a projection before it
    would: the gradient of its kernel sums `input * gradient` over every
    position, and `0 * NaN` is NaN. Zeroed first, a padding buffer holding NaN
    or inf reaches neither the output nor any gradient.
    """
    attended = attended_keys(mask, query_length, key_length, is_causal)
    if attended is not None and len(attended.shape) == 3:
        attended = ops.any(attended, axis=1)  # over the heads
    if query_mask is not None:
        reached = _reached_by_queries(query_mask, key_length, is_causal)
        attended = reached if attended is None else ops.logical_and(attended, reached)
    hidden_key = zero_unattended(key, attended)
    if value is key:
        return hidden_key, hidden_key
    return hidden_key, zero_unattended(value, attended)


def _reached_by_queries(query_mask, key_length, is_causal):
    """`(B, S)`: the keys some unmasked query (`query_mask` `(B, T)`) may see:
    every key of a row with one, and with the causal mask the keys up to its
    last one."""
    query_mask = ops.cast(query_mask, "bool")
    if not is_causal:
        return ops.broadcast_to(
            ops.any(query_mask, axis=1, keepdims=True),
            (ops.shape(query_mask)[0], key_length),
        )
    positions = ops.arange(ops.shape(query_mask)[1], dtype="int32")
    last = ops.amax(ops.where(query_mask, positions[None, :], -1), axis=1)
    keys = ops.arange(key_length, dtype="int32")
    return ops.less_equal(keys[None, :], last[:, None])


def zero_masked_rows(output, query_mask):
    """`output` `(B, T, ...)` with zeros in the rows `query_mask` `(B, T)`
    hides: a query that sees no key gives zeros, as on every attention path.
    A select, not a product, so a NaN computed in a hidden row stops here."""
    rows = ops.cast(query_mask, "bool")
    rows = ops.reshape(rows, (*ops.shape(rows), *([1] * (len(output.shape) - 2))))
    return ops.where(rows, output, ops.zeros((), output.dtype))
