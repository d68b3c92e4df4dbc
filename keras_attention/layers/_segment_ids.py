"""The `segment_ids` of `MultiHeadAttention` and its family (packed
sequences: several documents in one row): their checks against the queries
and the keys, the dense document mask for the paths that need every mask
materialized, and the positions a rotary encoding restarts at each
document."""

from keras import ops

from keras_attention._checks import static_shape
from keras_attention.layers.key_value_cache import cache_slots
from keras_attention.ops.masks import merge_masks
from keras_attention.ops.positions import check_segment_ids, segment_positions


def check_call_segment_ids(
    segment_ids, query, key, cache, num_attention_axes, cache_layout=None
):
    """`segment_ids` checked against the queries and the keys (the cache's
    slots with a cache, of the layer's `cache_layout`): one int32 `(B, T)`
    tensor, or a pair."""
    if num_attention_axes != 1 or len(query.shape) != 3:
        raise ValueError(
            "`segment_ids` need (batch, length, dim) inputs attending over "
            f"one sequence axis; received query shape {static_shape(query)}."
        )
    query_length = query.shape[1]
    key_length = key.shape[1] if cache is None else cache_slots(cache, cache_layout)
    # A sequence of tensors is a pair; nested Python lists are one tensor.
    if isinstance(segment_ids, (tuple, list)) and any(
        hasattr(ids, "shape") for ids in segment_ids
    ):
        if len(segment_ids) != 2:
            raise ValueError(
                "`segment_ids` must be one tensor (batch, T) or a pair "
                "(query_ids (batch, T), key_ids (batch, S)); received a "
                f"sequence of {len(segment_ids)}."
            )
        return (
            check_segment_ids(segment_ids[0], query_length, "query segment_ids"),
            check_segment_ids(
                segment_ids[1],
                key_length,
                "key segment_ids",
                expected=None if cache is None else "(batch, cache slots)",
            ),
        )
    if cache is not None:
        raise ValueError(
            "With a `cache` the keys are the cache's slots, not the new "
            "tokens: pass `segment_ids` as a pair (query_ids (batch, T), "
            "key_ids (batch, max_length)); received one tensor of shape "
            f"{static_shape(segment_ids)}."
        )
    if (
        query_length is not None
        and key_length is not None
        and query_length != key_length
    ):
        raise ValueError(
            "One `segment_ids` tensor serves self-attention, with as many "
            f"keys as queries; received {query_length} queries and "
            f"{key_length} keys: pass (query_ids, key_ids)."
        )
    return check_segment_ids(segment_ids, query_length)


def segment_pair(segment_ids):
    """`(query_ids, key_ids)` of checked `segment_ids` (one tensor serves
    both)."""
    if isinstance(segment_ids, tuple):
        return segment_ids
    return segment_ids, segment_ids


def document_positions(segment_ids):
    """The positions `(query_positions, key_positions)`, each `(B, length)`,
    counted from the start of each document."""
    query_ids, key_ids = segment_pair(segment_ids)
    return segment_positions(query_ids), segment_positions(key_ids)


def merge_document_mask(mask, segment_ids):
    """`mask` (None, `(B, T, S)` or `(B, N, T, S)`) ANDed with the dense
    `(B, T, S)` mask of `segment_ids`, for the paths that need every mask
    materialized (the weights, a subclass's `_compute_attention`)."""
    query_ids, key_ids = segment_pair(segment_ids)
    documents = ops.equal(query_ids[:, :, None], key_ids[:, None, :])
    if mask is not None and len(mask.shape) == 4:
        documents = documents[:, None]
    return merge_masks(mask, documents)
