"""Score and mask functions ("mods") for `dot_product_attention`.

A `score_mod(score, b, h, q_idx, kv_idx)` returns the score of query `q_idx`
for key `kv_idx` in head `h` of batch row `b`, given its scaled dot product
`score`; a `mask_mod(b, h, q_idx, kv_idx)` returns True where the query may
attend to the key. These are the signatures of PyTorch's FlexAttention. The
index arguments are int32 tensors that broadcast against each other and
against `score`: `b` is `(B, 1, 1, 1)`, `h` `(1, N, 1, 1)`, `q_idx`
`(1, 1, T, 1)` and `kv_idx` `(1, 1, 1, S)` on the standard path, and one tile
of them on the chunked path, so a mod is written once, with `keras.ops`, for
both. `q_idx` is the absolute position of the query (it includes
`query_offset`), so the same mod serves a prompt and a decoding step.

This module builds the common ones: causal, sliding window, prefix-LM and
document (packed sequence) masks; soft-capping, ALiBi and T5's relative
position bias as score mods. The built-in arguments of `dot_product_attention`
(`is_causal`, `sliding_window`, `alibi_slopes`, `attn_logits_soft_cap`,
`segment_ids`) become the same functions, as parts of the call's
`AttentionSpec` (`keras_attention.ops.spec`), whose kinds tell the fused
kernels what they are and give the causal mask and the window their block
map by interval arithmetic.

References:
    - [He et al., 2024. FlexAttention](https://pytorch.org/blog/flexattention/)
"""

from keras import backend, ops

from keras_attention._checks import (
    broadcastable,
    check_positive_number,
    dims_equal,
    static_shape,
)
from keras_attention.ops.positions import bucket_of_offset, check_num_buckets


def causal_mask_mod(b, h, q_idx, kv_idx):
    """The causal mask: query `i` attends to keys `j <= i`."""
    del b, h
    return ops.greater_equal(q_idx, kv_idx)


def sliding_window_mask_mod(window, causal=True):
    """Keys within `window - 1` positions of the query (the `window` most
    recent ones when `causal`), as `dot_product_attention(sliding_window=)`."""
    check_positive_number("window", window)

    def mask_mod(b, h, q_idx, kv_idx):
        near = ops.less(ops.abs(q_idx - kv_idx), window)
        if causal:
            return ops.logical_and(near, ops.greater_equal(q_idx, kv_idx))
        return near

    return mask_mod


def prefix_lm_mask_mod(prefix_lengths):
    """The prefix-LM mask (Raffel et al., 2020): every query sees the whole
    prefix of its row, bidirectionally, and the keys after it causally.

    Args:
        prefix_lengths: int `(B,)`, the prefix length of each row.
    """
    prefix_lengths = ops.cast(ops.convert_to_tensor(prefix_lengths), "int32")
    if len(prefix_lengths.shape) != 1:
        raise ValueError(
            "`prefix_lengths` must be one length per batch row, shape (B,); "
            f"received shape {static_shape(prefix_lengths)}."
        )

    def mask_mod(b, h, q_idx, kv_idx):
        in_prefix = ops.less(kv_idx, ops.take(prefix_lengths, b))
        return ops.logical_or(in_prefix, ops.greater_equal(q_idx, kv_idx))

    return mask_mod


def document_mask_mod(segment_ids, key_segment_ids=None, query_offset=0):
    """Packed sequences: a query attends only to the keys of its own
    document (FlashAttention's variable-length batches, JAX's `SegmentIds`).

    Args:
        segment_ids: int `(B, T)`, the document of each query position.
            Documents need not be contiguous; padding is best given an id of
            its own (or hidden by `mask`).
        key_segment_ids: int `(B, S)`, the document of each key; defaults to
            `segment_ids` (self-attention).
        query_offset: the absolute position of the first query, as passed to
            `dot_product_attention`: the query at position `q_idx` reads
            `segment_ids[b, q_idx - query_offset]` (queries over a cache,
            their ids one per query).
    """
    query_ids = _check_segment_ids(segment_ids, "segment_ids")
    key_ids = (
        query_ids
        if key_segment_ids is None
        else _check_segment_ids(key_segment_ids, "key_segment_ids")
    )

    def mask_mod(b, h, q_idx, kv_idx):
        rows = q_idx - ops.cast(query_offset, "int32")
        return ops.equal(_lookup(query_ids, b, rows), _lookup(key_ids, b, kv_idx))

    return mask_mod


def and_masks(*mask_mods):
    """A mask mod that attends where every one of `mask_mods` does."""
    return _combine(ops.logical_and, mask_mods)


def or_masks(*mask_mods):
    """A mask mod that attends where any one of `mask_mods` does."""
    return _combine(ops.logical_or, mask_mods)


def soft_cap_score_mod(cap):
    """Gemma 2's logit soft-capping, `cap * tanh(score / cap)`, as
    `dot_product_attention(attn_logits_soft_cap=cap)` applies it."""
    check_positive_number("cap", cap)

    def score_mod(score, b, h, q_idx, kv_idx):
        return ops.tanh(score / cap) * cap

    return score_mod


def alibi_score_mod(slopes):
    """ALiBi's bias `-slope_h * |i - j|` (Press et al., 2022), as
    `dot_product_attention(alibi_slopes=slopes)` adds it.

    Args:
        slopes: `(num_heads,)`, e.g. `alibi_slopes(num_heads)`.
    """
    slopes = ops.cast(ops.convert_to_tensor(slopes), "float32")

    def score_mod(score, b, h, q_idx, kv_idx):
        distance = ops.cast(ops.abs(q_idx - kv_idx), score.dtype)
        return score - ops.cast(ops.take(slopes, h), score.dtype) * distance

    return score_mod


def relative_position_score_mod(num_buckets=32, max_distance=128, bidirectional=True):
    """T5's relative position bias (Raffel et al., 2020) as a score mod over
    a trainable table: `score + table[bucket(j - i), h]`.

    The returned function takes the table `(num_buckets, num_heads)` as its
    sixth argument: pass it in `score_mod_inputs=(table,)` so that its
    gradient is exact on the chunked path too.
    """
    check_num_buckets(num_buckets, bidirectional)

    def score_mod(score, b, h, q_idx, kv_idx, table):
        buckets = bucket_of_offset(
            kv_idx - q_idx, num_buckets, max_distance, bidirectional
        )
        num_heads = ops.shape(table)[1]
        bias = ops.take(ops.reshape(table, (-1,)), buckets * num_heads + h)
        return score + ops.cast(bias, score.dtype)

    return score_mod


# -- used by dot_product_attention ---------------------------------------------


def index_grids(batch, heads, query_positions, key_positions):
    """`b, h, q_idx, kv_idx`, int32 and broadcastable to
    `(batch, heads, len(query_positions), len(key_positions))`."""
    return (
        ops.arange(batch, dtype="int32")[:, None, None, None],
        ops.arange(heads, dtype="int32")[None, :, None, None],
        ops.cast(query_positions, "int32")[None, None, :, None],
        ops.cast(key_positions, "int32")[None, None, None, :],
    )


def evaluate_mask_mod(mask_mod, grids, expected_shape):
    """`mask_mod(*grids)`, checked: boolean and broadcastable to
    `expected_shape` `(B, N, T, S)`."""
    mask = mask_mod(*grids)
    if not hasattr(mask, "dtype"):
        mask = ops.convert_to_tensor(mask)
    dtype = backend.standardize_dtype(mask.dtype)
    shape = static_shape(mask)
    if dtype != "bool" or not broadcastable(shape, expected_shape):
        raise ValueError(
            "`mask_mod(b, h, q_idx, kv_idx)` must return a boolean tensor that "
            f"broadcasts to (batch, num_heads, query_length, key_length) = "
            f"{expected_shape} (the indices' broadcast shape); received dtype "
            f"{dtype} and shape {shape}."
        )
    return mask


def evaluate_score_mod(score_mod, scores, grids, inputs):
    """`score_mod(scores, *grids, *inputs)`, checked: a float tensor of the
    shape of `scores`."""
    modified = score_mod(scores, *grids, *inputs)
    if not hasattr(modified, "dtype"):
        modified = ops.convert_to_tensor(modified)
    dtype = backend.standardize_dtype(modified.dtype)
    shape, expected = static_shape(modified), static_shape(scores)
    same_shape = len(shape) == len(expected) and all(map(dims_equal, shape, expected))
    if not dtype.startswith(("float", "bfloat")) or not same_shape:
        raise ValueError(
            "`score_mod(score, b, h, q_idx, kv_idx)` must return a float tensor "
            f"of the shape of `score`, {expected}; received dtype {dtype} and "
            f"shape {shape}."
        )
    return ops.cast(modified, scores.dtype)


def _lookup(ids, b, idx):
    """`ids[b, idx]` for broadcastable index tensors; positions past the
    end (the padding of the last tile) read the last id."""
    length = ops.shape(ids)[1]
    idx = ops.clip(idx, 0, length - 1)
    return ops.take(ops.reshape(ids, (-1,)), b * length + idx)


def _check_segment_ids(ids, name):
    ids = ops.convert_to_tensor(ids)
    dtype = backend.standardize_dtype(ids.dtype)
    if len(ids.shape) != 2 or "int" not in dtype:
        raise ValueError(
            f"`{name}` must be integer ids of shape (batch, length); received "
            f"dtype {dtype} and shape {static_shape(ids)}."
        )
    return ops.cast(ids, "int32")


def _combine(logical, mask_mods):
    if not mask_mods:
        raise ValueError("Combine at least one mask mod; received none.")

    def mask_mod(b, h, q_idx, kv_idx):
        mask = mask_mods[0](b, h, q_idx, kv_idx)
        for other in mask_mods[1:]:
            mask = logical(mask, other(b, h, q_idx, kv_idx))
        return mask

    return mask_mod
