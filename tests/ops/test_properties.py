"""Property-based tests of the public ops: for random shapes, masks, dtypes and
arguments, an op either returns the right answer or raises a clear
`ValueError`/`TypeError`; never a backend error, never NaN."""

import keras
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from keras_attention import ops
from tests import numpy_reference as ref
from tests.properties import (
    CLEAR_ERRORS,
    EXAMPLES,
    GARBAGE,
    assert_same_and_finite,
    dims,
    gradients,
    half_tolerance,
    outcome,
    shapes,
    with_garbage,
)


def as_numpy(x):
    # Detaches torch tensors that require grad, which np.asarray cannot.
    return keras.ops.convert_to_numpy(x)


FLOAT_DTYPES = st.sampled_from(["float32", "float16", "bfloat16"])


@st.composite
def attention_inputs(draw):
    """Valid query/key/value `(B, T, N, H)` / `(B, S, N, H)`, a boolean mask
    broadcastable to `(B, N, T, S)` that may mask whole rows, and options."""
    batch, queries, keys, heads, depth, value_depth = (
        draw(dims(1, 4)) for _ in range(6)
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    query = rng.normal(size=(batch, queries, heads, depth)).astype("float32")
    key = rng.normal(size=(batch, keys, heads, depth)).astype("float32")
    value = rng.normal(size=(batch, keys, heads, value_depth)).astype("float32")
    mask = None
    if draw(st.booleans()):
        # Each axis of the mask is either full or 1 (broadcast), and its
        # leading axes may be left out.
        full = (batch, heads, queries, keys)
        mask_shape = tuple(d if draw(st.booleans()) else 1 for d in full)
        mask_shape = mask_shape[draw(st.integers(0, 2)) :]
        mask = rng.random(mask_shape) < draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
    return {
        "query": query,
        "key": key,
        "value": value,
        "mask": mask,
        "is_causal": draw(st.booleans()),
        "chunk_size": draw(st.sampled_from([None, 1, 2, 3, 8])),
        "dtype": draw(FLOAT_DTYPES),
    }


@EXAMPLES
@given(attention_inputs())
def test_dot_product_attention_matches_the_formula(inputs):
    dtype = inputs["dtype"]
    cast = {k: keras.ops.cast(inputs[k], dtype) for k in ("query", "key", "value")}
    result = ops.dot_product_attention(
        **cast,
        mask=inputs["mask"],
        is_causal=inputs["is_causal"],
        chunk_size=inputs["chunk_size"],
    )
    result = as_numpy(keras.ops.cast(result, "float32"))
    assert result.shape == inputs["query"].shape[:3] + inputs["value"].shape[-1:]
    assert np.all(np.isfinite(result))
    mask = inputs["mask"]
    queries, keys = inputs["query"].shape[1], inputs["key"].shape[1]
    if inputs["is_causal"]:
        causal = np.tril(np.ones((queries, keys), bool))
        mask = causal if mask is None else np.logical_and(mask, causal)
    rounded = {k: as_numpy(keras.ops.cast(v, "float32")) for k, v in cast.items()}
    expected, _ = ref.multi_head_attention(
        rounded["query"], rounded["key"], rounded["value"], mask
    )
    np.testing.assert_allclose(result, expected, **half_tolerance(dtype))


@EXAMPLES
@given(
    shapes(min_rank=0, max_rank=5),
    shapes(min_rank=0, max_rank=5),
    shapes(min_rank=0, max_rank=5),
    st.one_of(st.none(), shapes(min_rank=0, max_rank=5)),
    st.sampled_from([None, 0, -1, 2, 2.5, "4"]),
)
def test_dot_product_attention_with_any_shapes_is_right_or_a_clear_error(
    query_shape, key_shape, value_shape, mask_shape, chunk_size
):
    rng = np.random.default_rng(0)
    query, key, value = (
        rng.normal(size=s).astype("float32")
        for s in (query_shape, key_shape, value_shape)
    )
    mask = None if mask_shape is None else rng.random(mask_shape) < 0.7

    def call():
        return ops.dot_product_attention(
            query, key, value, mask=mask, chunk_size=chunk_size
        )

    result = outcome(call)
    if isinstance(result, CLEAR_ERRORS):
        return
    expected, _ = ref.multi_head_attention(query, key, value, mask)
    np.testing.assert_allclose(as_numpy(result), expected, rtol=1e-4, atol=1e-5)


@EXAMPLES
@given(
    shapes(min_rank=1, max_rank=4),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from([1.0, 1e4, 6e4]),
    FLOAT_DTYPES,
)
def test_masked_softmax_rows_sum_to_one_or_zero(shape, keep, magnitude, dtype):
    rng = np.random.default_rng(len(shape))
    # Large but finite in every dtype (float16 ends at 65504).
    scores = np.clip(rng.normal(size=shape) * magnitude, -6e4, 6e4).astype("float32")
    mask = rng.random(shape) < keep
    weights = ops.masked_softmax(keras.ops.cast(scores, dtype), mask)
    weights = as_numpy(keras.ops.cast(weights, "float32"))
    assert weights.shape == shape and np.all(np.isfinite(weights))
    assert np.all(weights[~mask] == 0)
    totals = weights.sum(axis=-1)
    expected = np.where(mask.any(axis=-1), 1.0, 0.0)
    np.testing.assert_allclose(totals, expected, atol=2e-2)


@EXAMPLES
@given(
    st.one_of(st.integers(-3, 6), st.floats(-2, 6), st.none(), st.text(max_size=2)),
    st.one_of(st.integers(-3, 6), st.none()),
)
def test_causal_mask_is_right_or_a_clear_error(queries, keys):
    result = outcome(lambda: ops.causal_mask(queries, keys))
    if isinstance(result, CLEAR_ERRORS):
        return
    keys = queries if keys is None else keys
    result = as_numpy(result)
    # Query i sees keys j <= i.
    expected = np.tril(np.ones((queries, keys), bool))
    np.testing.assert_array_equal(result.reshape(expected.shape), expected)


@EXAMPLES
@given(shapes(min_rank=0, max_rank=3), st.one_of(st.none(), st.integers(-2, 3)))
def test_padding_mask_is_right_or_a_clear_error(shape, pad_id):
    token_ids = np.random.default_rng(0).integers(0, 3, size=shape)
    call = (
        (lambda: ops.padding_mask(token_ids))
        if pad_id is None
        else (lambda: ops.padding_mask(token_ids, pad_id))
    )
    result = outcome(call)
    if isinstance(result, CLEAR_ERRORS):
        return
    expected = token_ids != (0 if pad_id is None else pad_id)
    np.testing.assert_array_equal(as_numpy(result).reshape(expected.shape), expected)


def unattended_keys(inputs):
    """`(B, S, N)`, True at the keys that no query of the head may attend to
    under the mask and the causal flag of `inputs`: the positions that are
    never read."""
    batch, queries, heads, _ = inputs["query"].shape
    keys = inputs["key"].shape[1]
    mask = np.ones((1, 1, 1, 1), bool) if inputs["mask"] is None else inputs["mask"]
    mask = np.broadcast_to(mask, (batch, heads, queries, keys))
    if inputs["is_causal"]:
        mask = mask & np.tril(np.ones((queries, keys), bool))
    return ~mask.any(axis=2).transpose(0, 2, 1)


@st.composite
def padded_attention_inputs(draw):
    """`attention_inputs` whose mask may also pad keys of each example, so
    that some keys are seen by no query."""
    inputs = draw(attention_inputs())
    if draw(st.booleans()):
        batch, keys = inputs["key"].shape[:2]
        lengths = draw(st.lists(st.integers(0, keys), min_size=batch, max_size=batch))
        padding = (np.arange(keys) < np.array(lengths)[:, None])[:, None, None, :]
        mask = inputs["mask"]
        inputs["mask"] = padding if mask is None else mask & padding
    return inputs


@EXAMPLES
@given(padded_attention_inputs(), GARBAGE, st.booleans())
def test_dot_product_attention_never_reads_masked_keys(inputs, garbage, weights):
    """NaN, inf or 1e30 at the keys and values no query may attend to gives
    the result of zeros there, finite, in the output, the weights and the
    gradients of query, key and value (standard and chunked paths)."""
    hidden = unattended_keys(inputs)
    dtype = inputs["dtype"]
    weights = weights and inputs["chunk_size"] is None

    def run(fill):
        query, key, value = (
            keras.ops.cast(with_garbage(inputs[k], hidden, fill), dtype)
            if k != "query"
            else keras.ops.cast(inputs[k], dtype)
            for k in ("query", "key", "value")
        )

        def attend(query, key, value):
            return ops.dot_product_attention(
                query,
                key,
                value,
                mask=inputs["mask"],
                is_causal=inputs["is_causal"],
                chunk_size=inputs["chunk_size"],
                return_weights=weights,
            )

        def loss(query, key, value):
            result = attend(query, key, value)
            output = result[0] if weights else result
            return keras.ops.sum(keras.ops.cast(output, "float32"))

        result = attend(query, key, value)
        result = list(result) if weights else [result]
        return result + gradients(loss, (query, key, value))

    assert_same_and_finite(run(garbage), run(0.0))


@EXAMPLES
@given(padded_attention_inputs(), GARBAGE)
def test_attention_weights_and_their_application_never_read_masked_keys(
    inputs, garbage
):
    hidden = unattended_keys(inputs)
    options = {"mask": inputs["mask"], "is_causal": inputs["is_causal"]}

    def run(fill):
        key = with_garbage(inputs["key"], hidden, fill)
        value = with_garbage(inputs["value"], hidden, fill)
        weights = ops.attention_weights(inputs["query"], key, **options)
        return [weights, ops.apply_attention_weights(weights, value, **options)]

    assert_same_and_finite(run(garbage), run(0.0))


@EXAMPLES
@given(shapes(min_rank=1, max_rank=4), GARBAGE, FLOAT_DTYPES)
def test_masked_softmax_never_reads_masked_scores(shape, garbage, dtype):
    rng = np.random.default_rng(len(shape))
    scores = rng.normal(size=shape).astype("float32")
    mask = rng.random(shape) < 0.6

    def run(fill):
        return ops.masked_softmax(
            keras.ops.cast(np.where(mask, scores, fill), dtype), mask
        )

    assert_same_and_finite([run(garbage)], [run(0.0)])


@EXAMPLES
@given(
    # The location score does not read the keys.
    st.sampled_from(sorted(set(ops.SCORE_FUNCTIONS) - {"location"})),
    dims(1, 3),
    dims(1, 4),
    dims(1, 4),
    GARBAGE,
    st.integers(0, 2**16),
)
def test_scores_of_masked_keys_do_not_reach_the_weights(
    name, batch, queries, keys, garbage, seed
):
    """A key touches only its own column of scores, which the masked softmax
    replaces: garbage at masked keys leaves the weights unchanged."""
    rng = np.random.default_rng(seed)
    depth = 3
    query = rng.normal(size=(batch, queries, depth)).astype("float32")
    key = rng.normal(size=(batch, keys, depth)).astype("float32")
    padding = rng.random((batch, keys)) < 0.6
    arguments = {
        "general": lambda: (rng.normal(size=(depth, depth)).astype("float32"),),
        "additive": lambda: tuple(
            rng.normal(size=s).astype("float32") for s in ((depth, 4), (depth, 4), (4,))
        ),
    }.get(name, tuple)()
    score = ops.get_score_function(name)

    def run(fill):
        scores = score(query, with_garbage(key, ~padding, fill), *arguments)
        return [ops.masked_softmax(scores, padding[:, None, :])]

    assert_same_and_finite(run(garbage), run(0.0))
