"""Positions inside the attention of `MultiHeadAttention`
(`attention_positions`): the rotary encoding of the projected queries and
keys, and ALiBi's and T5's biases on the scores, computed by the attention
op where the plan leaves them to it (tile by tile on the chunked path) and
added as one dense `(B, N, T, S)` bias elsewhere (with the weights, a
cache, a subclass's `_compute_attention`)."""

from keras import ops

from keras_attention.ops.positions import alibi_bias


def rotate(rotary, projected, start_index=0, positions=None):
    """Projected queries or keys `(B, length, heads, dim)` rotated by a
    rotary encoding (from `start_index`, or at `positions` `(B, length)`),
    unchanged without one."""
    if rotary is None:
        return projected
    return rotary(projected, start_index=start_index, positions=positions)


def positions_in_op(plan, alibi_slopes, relative_bias):
    """The arguments of `_compute_attention` that give the op the positions
    the plan leaves to it."""
    arguments = {}
    if plan.alibi_in_op:
        arguments["alibi_slopes"] = alibi_slopes
    if plan.relative_in_op:
        arguments["score_mod"], arguments["score_mod_inputs"] = (
            relative_bias.score_mod()
        )
    return arguments


def add_position_bias(bias, plan, alibi_slopes, relative_bias, query, key, offset):
    """`bias` (None, or broadcastable to `(B, N, T, S)`) plus the dense bias
    of the positions the op does not compute: ALiBi's from the slopes, T5's
    from the `relative_bias` layer's table (at queries from `offset`)."""
    if alibi_slopes is not None and not plan.alibi_in_op:
        lengths = ops.shape(query)[1], ops.shape(key)[1]
        return _add(bias, alibi_bias(alibi_slopes, *lengths, offset)[None])
    if relative_bias is not None and not plan.relative_in_op:
        return _add(bias, relative_bias(query, key, query_offset=offset))
    return bias


def _add(bias, extra):
    return extra if bias is None else ops.cast(bias, "float32") + extra
