"""Boolean attention masks (True = attend), built with `keras.ops` only."""

from keras import ops

from keras_attention._checks import check_length, check_rank, static_shape


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
    positions = ops.arange(max_length)
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
    rows = ops.arange(query_length)[:, None] + ops.cast(offset, "int32")
    cols = ops.arange(key_length)[None, :]
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
    rows = ops.arange(query_length)[:, None] + ops.cast(offset, "int32")
    cols = ops.arange(key_length)[None, :]
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


def attended_keys(mask, query_length, key_length, is_causal=False):
    """The key positions that at least one query may attend to.

    Args:
        mask: boolean tensor broadcastable to `(..., T, S)`, True = attend, or
            None.
        query_length: T.
        key_length: S.
        is_causal: also apply the causal mask (query `i` sees keys `j <= i`).

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
            mask = merge_masks(mask, causal_mask(query_length, key_length))
        elif not (
            isinstance(query_length, int)
            and isinstance(key_length, int)
            and key_length <= query_length
        ):
            # A mask that is the same for every query hides no more keys once
            # causal: key `j` stays seen by query `j`, and only the keys past
            # the last query are seen by none. This keeps the chunked path
            # from materializing a (T, S) mask.
            reach = ops.less(ops.arange(key_length), query_length)[None]
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
