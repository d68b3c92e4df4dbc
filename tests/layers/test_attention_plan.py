"""`plan_attention`: what MultiHeadAttention passes to the op, as a table.

Which computation serves the op's call (the length crossover included) is
`ops.plan.plan_kernel`'s, tested in tests/ops/test_plan.py."""

import pytest

from keras_attention.layers.attention_plan import AttentionPlan, plan_attention


def plan(
    multi_axis=False,
    causal=False,
    window=False,
    alibi=False,
    segments=False,
    relative=False,
    rows=True,
):
    return AttentionPlan(
        multi_axis, causal, window, alibi, segments, relative, query_mask_on_rows=rows
    )


CASES = {
    "plain": (dict(), plan()),
    "causal and window in the op": (
        dict(use_causal_mask=True, sliding_window=16),
        plan(causal=True, window=True),
    ),
    # The weights are needed: the window becomes a mask, the query mask joins
    # the mask.
    "weights needed": (
        dict(needs_weights=True, sliding_window=8),
        plan(rows=False),
    ),
    "causal stays in the op with weights": (
        dict(needs_weights=True, use_causal_mask=True),
        plan(causal=True, rows=False),
    ),
    # Positions inside attention.
    "alibi in the op": (
        dict(alibi=True, use_causal_mask=True),
        plan(causal=True, alibi=True),
    ),
    "alibi as a dense bias with weights": (
        dict(alibi=True, needs_weights=True),
        plan(rows=False),
    ),
    "a dense bias: alibi joins it": (
        dict(alibi=True, dense_bias=True),
        plan(),
    ),
    "T5's table in the op": (dict(relative=True), plan(relative=True)),
    "T5's table as a dense bias with weights": (
        dict(relative=True, needs_weights=True),
        plan(rows=False),
    ),
    # A cache or an overridden `_compute_attention` get every mask
    # materialized.
    "cached decoding step": (
        dict(cached=True, use_causal_mask=True, alibi=True, relative=True),
        plan(rows=False),
    ),
    "subclass overriding _compute_attention": (
        dict(custom_attention=True, use_causal_mask=True, sliding_window=4),
        plan(rows=False),
    ),
    # Packed sequences: the ids go to the op (with a cache too), a dense
    # mask where the weights are needed or a subclass attends.
    "segment ids in the op": (
        dict(segment_ids=True, use_causal_mask=True),
        plan(causal=True, segments=True),
    ),
    "segment ids with a cache": (
        dict(segment_ids=True, cached=True),
        plan(segments=True, rows=False),
    ),
    "segment ids with weights become a mask": (
        dict(segment_ids=True, needs_weights=True),
        plan(rows=False),
    ),
    "segment ids for a subclass become a mask": (
        dict(segment_ids=True, custom_attention=True),
        plan(rows=False),
    ),
    # Several attention axes: Keras' einsum formulation, nothing in the op.
    "several attention axes": (
        dict(num_attention_axes=2, use_causal_mask=True),
        AttentionPlan(True, False, False, False),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan(case):
    arguments, expected = CASES[case]
    assert plan_attention(**arguments) == expected


def test_plan_takes_keywords_only():
    with pytest.raises(TypeError):
        plan_attention(1)
