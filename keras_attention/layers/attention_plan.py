"""How `MultiHeadAttention` computes one call: a pure function of its options.

Every choice the layer makes between the ways it can attend lives here, so
that `MultiHeadAttention.call` reads as the steps of the computation and the
choices can be tested as a table (tests/layers/test_attention_plan.py).
"""

from typing import NamedTuple

# From this many keys the layer switches to the chunked (memory-efficient) path
# by itself, with tiles of AUTO_CHUNK_SIZE queries and keys; below it the
# standard path is as fast or faster and keeps the weights available. The
# crossovers were measured (XLA, forward + backward, width 256, 4096 tokens per
# batch, 2-core CPU): causal, chunked/standard is 0.82 at T=512 and 0.63 at
# 1024 (it skips the tiles above the diagonal); not causal, 1.05 at 512 and
# 0.94 at 1024. Tiles of 256 beat 128 and 512 at every length measured.
# With a known query length the switch counts the scores, queries x keys,
# against the square of those lengths: a few queries over a long cache (a
# decoding step: one query per row, or the `k` beams of
# `ancestry_beam_search` over their `k * max_length` slots) keep the standard
# path, whose `(T, S)` scores are no bigger than the keys. There the chunked
# path saves no memory and costs, per block and step, a loop over the tiles,
# copies of the padded keys and values and a sort of the tiles (it was taken
# by the beam step of width 4 at 256 tokens, which the GPU suite measured at
# 7x greedy's step time on an H200).
AUTO_CHUNK_MIN_LENGTH = 1024
AUTO_CHUNK_MIN_LENGTH_CAUSAL = 512
AUTO_CHUNK_SIZE = 256


class AttentionPlan(NamedTuple):
    """What one call of the layer does.

    Attributes:
        multi_axis: attention over several axes (images, video): Keras'
            einsum formulation with a softmax over all of them.
        chunk_size: tile size of the chunked path, or None for the standard
            path (which can give the weights).
        causal_in_op: the causal mask is generated inside the attention op
            (never materialized as a `(T, S)` tensor) instead of merged into
            the mask.
        window_in_op: likewise for the sliding window (the chunked path then
            skips the tiles outside it).
        alibi_in_op: ALiBi's bias is computed inside the op (tile by tile on
            the chunked path) instead of passed as a dense bias.
        segments_in_op: the `segment_ids` of packed sequences go to the op
            (which skips the tiles between documents on the chunked path)
            instead of becoming a dense `(B, T, S)` mask, which the weights
            and a subclass's `_compute_attention` need.
        relative_in_op: T5's relative bias goes to the op as a score mod
            over the layer's table (tile by tile on the chunked path, the
            table's gradient exact) instead of as a dense `(T, S)` bias.
        query_mask_on_rows: a query mask zeroes the output's rows after the
            op instead of joining the mask, so that padding reaches the op
            as a mask over keys `(B, 1, 1, S)`, which the fused kernels read
            natively (cuDNN as lengths), never as a `(B, T, S)` tensor.
    """

    multi_axis: bool
    chunk_size: int | None
    causal_in_op: bool
    window_in_op: bool
    alibi_in_op: bool
    segments_in_op: bool = False
    relative_in_op: bool = False
    query_mask_on_rows: bool = False


def plan_attention(
    *,
    num_attention_axes=1,
    cached=False,
    custom_attention=False,
    use_causal_mask=False,
    sliding_window=None,
    alibi=False,
    segment_ids=False,
    relative=False,
    own_bias=False,
    dense_bias=False,
    needs_weights=False,
    flash_attention=None,
    chunk_size=None,
    key_length=None,
    query_length=None,
):
    """Chooses how the layer attends.

    Args:
        num_attention_axes: how many axes the layer attends over.
        cached: a decoding cache is passed (positions start at its index, so
            masks are built with that offset, outside the op).
        custom_attention: a subclass overrides `_compute_attention` (it gets
            every mask materialized, as Keras gives it).
        use_causal_mask, sliding_window: the masks the call asks for.
        alibi: ALiBi's bias is wanted (`attention_positions="alibi"`).
        segment_ids: `segment_ids` (packed sequences) are passed; they go to
            the op, with a cache too, unless the weights are needed or a
            subclass attends.
        relative: T5's relative bias is wanted
            (`attention_positions="relative"`); it goes to the op as a score
            mod, except with weights, a cache or a subclass, where it is a
            dense bias.
        own_bias: a dense `(T, S)` bias that the layer makes itself is
            added (T5's or ALiBi's bias where the op cannot compute it:
            with weights, a cache, a dense bias). It keeps the standard path
            even with a forced chunk size, which serves the layer's other
            calls.
        dense_bias: an `attention_bias` tensor is passed.
        needs_weights: the `(T, S)` weights must exist (returned, or dropped
            out in training).
        flash_attention: the layer's argument: True forces the chunked path,
            False forbids the automatic switch, None chooses by length.
        chunk_size: the layer's argument; set, it forces the chunked path.
        key_length: the number of keys where known when tracing (an int),
            else None.
        query_length: the number of queries where known when tracing (an
            int), else None: with it the automatic switch needs
            `query_length * key_length` scores past the crossover's square
            (a decoding step over a long cache stays on the standard path);
            without it, `key_length` past the crossover.

    Returns:
        An `AttentionPlan`.
    """
    if num_attention_axes != 1:
        return AttentionPlan(True, None, False, False, False)
    in_op = not cached and not custom_attention
    without_weights = in_op and not needs_weights
    causal_in_op = in_op and use_causal_mask
    window_in_op = without_weights and sliding_window is not None
    alibi_in_op = without_weights and alibi and not dense_bias
    relative_in_op = without_weights and relative
    return AttentionPlan(
        multi_axis=False,
        chunk_size=_chunk_size(
            needs_weights
            or own_bias
            or (alibi and not alibi_in_op)
            or (relative and not relative_in_op),
            flash_attention,
            chunk_size,
            dense_bias,
            key_length,
            skips_tiles=causal_in_op or window_in_op,
            query_length=query_length,
        ),
        causal_in_op=causal_in_op,
        window_in_op=window_in_op,
        alibi_in_op=alibi_in_op,
        segments_in_op=bool(segment_ids) and not custom_attention and not needs_weights,
        relative_in_op=relative_in_op,
        query_mask_on_rows=without_weights,
    )


def _chunk_size(
    needs_scores,
    flash_attention,
    chunk_size,
    dense_bias,
    key_length,
    skips_tiles,
    query_length=None,
):
    """The chunked path's tile size, or None for the standard path.

    The chunked path never builds the weights, nor the `(T, S)` scores a dense
    bias adds to: `needs_scores` (the weights, or a bias of the layer's own)
    keeps the standard path; a user's `attention_bias` keeps it unless a
    chunk size is forced (which the op then refuses). A causal mask or a
    sliding window lets the chunked path skip tiles, which moves its
    crossover down. A length only known when the graph runs (a symbolic
    dimension) keeps the standard path unless it is forced. A known query
    length switches by the number of scores: `query_length * key_length`
    from the crossover's square on (the crossovers were measured at
    `query_length == key_length`)."""
    if needs_scores:
        return None
    if chunk_size is not None:
        return chunk_size
    if flash_attention:
        return AUTO_CHUNK_SIZE
    if flash_attention is False or dense_bias or not isinstance(key_length, int):
        return None
    threshold = AUTO_CHUNK_MIN_LENGTH_CAUSAL if skips_tiles else AUTO_CHUNK_MIN_LENGTH
    if isinstance(query_length, int):
        long_enough = query_length * key_length >= threshold * threshold
    else:
        long_enough = key_length >= threshold
    return AUTO_CHUNK_SIZE if long_enough else None
