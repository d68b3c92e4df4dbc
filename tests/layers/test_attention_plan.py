"""`plan_attention`: how MultiHeadAttention attends, as a table of cases."""

import pytest

from keras_attention.layers.attention_plan import (
    AUTO_CHUNK_MIN_LENGTH,
    AUTO_CHUNK_MIN_LENGTH_CAUSAL,
    AUTO_CHUNK_SIZE,
    AttentionPlan,
    plan_attention,
)

SHORT, LONG = 64, AUTO_CHUNK_MIN_LENGTH


def plan(
    multi_axis=False,
    chunk=None,
    causal=False,
    window=False,
    alibi=False,
    segments=False,
    rows=True,
):
    return AttentionPlan(
        multi_axis, chunk, causal, window, alibi, segments, query_mask_on_rows=rows
    )


CASES = {
    # Lengths: the standard path below the crossover, tiles from it.
    "short": (dict(key_length=SHORT), plan()),
    "long": (dict(key_length=LONG), plan(chunk=AUTO_CHUNK_SIZE)),
    "just below the crossover": (dict(key_length=LONG - 1), plan()),
    "causal lowers the crossover": (
        dict(key_length=AUTO_CHUNK_MIN_LENGTH_CAUSAL, use_causal_mask=True),
        plan(chunk=AUTO_CHUNK_SIZE, causal=True),
    ),
    "a window lowers it too": (
        dict(key_length=AUTO_CHUNK_MIN_LENGTH_CAUSAL, sliding_window=16),
        plan(chunk=AUTO_CHUNK_SIZE, window=True),
    ),
    "a length known only when running keeps the standard path": (
        dict(key_length=None, use_causal_mask=True),
        plan(causal=True),
    ),
    # The layer's arguments.
    "chunk_size forces tiles": (
        dict(key_length=SHORT, chunk_size=32),
        plan(chunk=32),
    ),
    "flash_attention=True forces tiles": (
        dict(key_length=SHORT, flash_attention=True),
        plan(chunk=AUTO_CHUNK_SIZE),
    ),
    "flash_attention=False forbids the switch": (
        dict(key_length=LONG, flash_attention=False),
        plan(),
    ),
    # The weights are needed: never tiles; the window becomes a mask.
    "weights returned": (
        dict(key_length=LONG, needs_weights=True, sliding_window=8),
        plan(rows=False),
    ),
    "weights needed keep a forced chunk size out": (
        dict(key_length=SHORT, needs_weights=True, chunk_size=32),
        plan(rows=False),
    ),
    "causal stays in the op with weights": (
        dict(key_length=SHORT, needs_weights=True, use_causal_mask=True),
        plan(causal=True, rows=False),
    ),
    # Positions inside attention.
    "alibi in the op": (
        dict(key_length=LONG, alibi=True, use_causal_mask=True),
        plan(chunk=AUTO_CHUNK_SIZE, causal=True, alibi=True),
    ),
    "alibi as a dense bias with weights": (
        dict(key_length=SHORT, alibi=True, needs_weights=True),
        plan(rows=False),
    ),
    "a dense bias keeps the standard path, alibi joins it": (
        dict(key_length=LONG, alibi=True, dense_bias=True),
        plan(),
    ),
    "a forced chunk with a dense bias is passed on (the op refuses it)": (
        dict(key_length=SHORT, dense_bias=True, chunk_size=32),
        plan(chunk=32),
    ),
    "the layer's own bias keeps the standard path, even a forced chunk": (
        dict(key_length=LONG, own_bias=True, chunk_size=32, use_causal_mask=True),
        plan(causal=True),
    ),
    "alibi under a cache is the layer's own dense bias": (
        dict(cached=True, key_length=SHORT, alibi=True, chunk_size=32),
        plan(rows=False),
    ),
    "alibi under a long cache keeps the standard path": (
        dict(cached=True, key_length=LONG, alibi=True),
        plan(rows=False),
    ),
    # A cache or an overridden `_compute_attention` get every mask
    # materialized.
    "cached decoding step": (
        dict(cached=True, key_length=SHORT, use_causal_mask=True, alibi=True),
        plan(rows=False),
    ),
    "cached with a long cache": (
        dict(cached=True, key_length=LONG, use_causal_mask=True),
        plan(chunk=AUTO_CHUNK_SIZE, rows=False),
    ),
    # A known query length counts the scores: a few queries (one decoding
    # step, the beams of ancestry_beam_search) over a long cache keep the
    # standard path; as many scores as the crossover's square switch.
    "a few queries over a long cache": (
        dict(cached=True, key_length=4 * LONG, query_length=4, use_causal_mask=True),
        plan(rows=False),
    ),
    "a few queries over a longer cache": (
        dict(cached=True, key_length=LONG * LONG // 4, query_length=4),
        plan(chunk=AUTO_CHUNK_SIZE, rows=False),
    ),
    "as many queries as keys": (
        dict(key_length=LONG, query_length=LONG),
        plan(chunk=AUTO_CHUNK_SIZE),
    ),
    "causal, as many queries as keys": (
        dict(
            key_length=AUTO_CHUNK_MIN_LENGTH_CAUSAL,
            query_length=AUTO_CHUNK_MIN_LENGTH_CAUSAL,
            use_causal_mask=True,
        ),
        plan(chunk=AUTO_CHUNK_SIZE, causal=True),
    ),
    "subclass overriding _compute_attention": (
        dict(custom_attention=True, use_causal_mask=True, sliding_window=4),
        plan(rows=False),
    ),
    # Packed sequences: the ids go to the op (with a cache too), a dense
    # mask where the weights are needed or a subclass attends.
    "segment ids in the op": (
        dict(segment_ids=True, key_length=SHORT, use_causal_mask=True),
        plan(causal=True, segments=True),
    ),
    "segment ids on the chunked path": (
        dict(segment_ids=True, key_length=SHORT, chunk_size=32),
        plan(chunk=32, segments=True),
    ),
    "segment ids with a cache": (
        dict(segment_ids=True, cached=True, key_length=SHORT),
        plan(segments=True, rows=False),
    ),
    "segment ids with weights become a mask": (
        dict(segment_ids=True, needs_weights=True, key_length=SHORT),
        plan(rows=False),
    ),
    "segment ids for a subclass become a mask": (
        dict(segment_ids=True, custom_attention=True, key_length=SHORT),
        plan(rows=False),
    ),
    # Several attention axes: Keras' einsum formulation, nothing in the op.
    "several attention axes": (
        dict(num_attention_axes=2, key_length=LONG, use_causal_mask=True),
        AttentionPlan(True, None, False, False, False),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan(case):
    arguments, expected = CASES[case]
    assert plan_attention(**arguments) == expected


def test_plan_takes_keywords_only():
    with pytest.raises(TypeError):
        plan_attention(1)
