"""What `MultiHeadAttention` passes to the attention op: a pure function of
its options.

The layer decides which parts of a call reach the op as what they are (the
causal mask, a window, ALiBi, documents, T5's table, padding over the keys)
and which it materializes itself (for the weights, a cache or a subclass's
`_compute_attention`). Which computation serves the op's call (a fused
kernel, the chunked or the standard path) is decided in one place,
`keras_attention.ops.plan.plan_kernel`. Tested as a table
(tests/layers/test_attention_plan.py).
"""

from typing import NamedTuple


class AttentionPlan(NamedTuple):
    """What one call of the layer does.

    Attributes:
        multi_axis: attention over several axes (images, video): Keras'
            einsum formulation with a softmax over all of them.
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
    dense_bias=False,
    needs_weights=False,
):
    """Chooses what the layer passes to the op as parts.

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
        dense_bias: an `attention_bias` tensor is passed (ALiBi then joins
            it as a dense bias).
        needs_weights: the `(T, S)` weights must exist (returned, or dropped
            out by a subclass or over several axes).

    Returns:
        An `AttentionPlan`.
    """
    if num_attention_axes != 1:
        return AttentionPlan(True, False, False, False)
    in_op = not cached and not custom_attention
    without_weights = in_op and not needs_weights
    return AttentionPlan(
        multi_axis=False,
        causal_in_op=in_op and use_causal_mask,
        window_in_op=without_weights and sliding_window is not None,
        alibi_in_op=without_weights and alibi and not dense_bias,
        segments_in_op=bool(segment_ids) and not custom_attention and not needs_weights,
        relative_in_op=without_weights and relative,
        query_mask_on_rows=without_weights,
    )
