"""Property-based tests of the public layers: random configs, shapes, ranks,
masks and dtype policies give either a correct, finite result or a clear
`ValueError`/`TypeError`, never a backend error or NaN."""

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_attention import layers
from tests.layers.attention_cases import FACTORIES, MAX_LENGTH
from tests.properties import (
    CLEAR_ERRORS,
    EXAMPLES,
    choices,
    dims,
    half_tolerance,
    outcome,
    shapes,
)


def as_numpy(x):
    # Detaches torch tensors that require grad, which np.asarray cannot.
    return keras.ops.convert_to_numpy(x)


POLICIES = st.sampled_from(["float32", "mixed_float16", "mixed_bfloat16"])


def finite(x):
    return np.all(np.isfinite(as_numpy(keras.ops.cast(x, "float32"))))


@st.composite
def score_layer_inputs(draw, allow_invalid):
    """Query `(B, Tq, D)` or one decoder step `(B, D)`, value `(B, Tv, Dv)`,
    an optional key, masks that may hide every value, and call options; with
    `allow_invalid`, ranks and dims may disagree, which must be refused
    clearly."""
    either = choices(allow_invalid)
    batch, queries, values, depth = (draw(dims(1, 4)) for _ in range(4))
    value_depth = draw(either(st.just(depth), st.just(depth + 1)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    step = draw(st.booleans())
    query_shape = (batch, depth) if step else (batch, queries, depth)
    query_shape = draw(either(st.just(query_shape), shapes(min_rank=1, max_rank=5)))
    inputs = [
        rng.normal(size=query_shape).astype("float32"),
        rng.normal(size=(batch, values, value_depth)).astype("float32"),
    ]
    if draw(st.booleans()):
        key_depth = draw(either(st.just(depth), dims(1, 5)))
        inputs.append(rng.normal(size=(batch, values, key_depth)).astype("float32"))
    mask_length = draw(either(st.just(values), st.just(values + 1)))
    value_mask = rng.random((batch, mask_length)) < draw(
        st.sampled_from([0.0, 0.5, 1.0])
    )
    # A causal mask needs a sequence of queries, not one decoder step.
    causal = draw(either(st.just(False) if step else st.booleans(), st.booleans()))
    return {
        "inputs": inputs,
        "mask": draw(st.sampled_from([None, [None, value_mask]])),
        "use_causal_mask": causal,
        "policy": draw(POLICIES),
    }


@pytest.mark.parametrize("allow_invalid", [False, True], ids=["valid", "any"])
@pytest.mark.parametrize("name", sorted(FACTORIES))
@EXAMPLES
@given(data=st.data())
def test_score_layers_give_a_right_result_or_a_clear_error(name, allow_invalid, data):
    case = data.draw(score_layer_inputs(allow_invalid))
    layer = FACTORIES[name](dtype=case["policy"])
    query, value = case["inputs"][:2]
    result = outcome(
        lambda: layer(
            case["inputs"],
            mask=case["mask"],
            use_causal_mask=case["use_causal_mask"],
            return_attention_scores=True,
        )
    )
    assert allow_invalid or not isinstance(result, CLEAR_ERRORS), result
    if isinstance(result, CLEAR_ERRORS):
        return
    outputs, weights = (as_numpy(keras.ops.cast(x, "float32")) for x in result)
    step = query.ndim == 2
    batch, values = value.shape[:2]
    queries = () if step else (query.shape[1],)
    assert outputs.shape == (batch, *queries, value.shape[-1])
    assert weights.shape == (batch, *queries, values)
    assert finite(outputs) and finite(weights)
    # Each query's weights sum to one, or to zero where every value is masked.
    totals = weights.sum(axis=-1)
    assert np.all((np.abs(totals - 1) < 2e-2) | (np.abs(totals) < 1e-6))
    if case["mask"] is not None:
        hidden = ~case["mask"][1]
        hidden = hidden if step else hidden[:, None, :]
        assert np.all(np.broadcast_to(hidden, weights.shape) <= (weights == 0))
    # The output is the weighted sum of the values.
    expected = np.einsum("b...s,bsd->b...d", weights, value)
    np.testing.assert_allclose(outputs, expected, **half_tolerance(_compute(layer)))


def _compute(layer):
    return {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}[
        layer.compute_dtype
    ]


@st.composite
def score_layer_configs(draw):
    """Constructor arguments, valid or not."""
    numbers = st.one_of(
        st.integers(-2, 8), st.floats(-1.0, 2.0), st.none(), st.text(max_size=2)
    )
    name = draw(
        st.sampled_from(["additive", "location", "cosine", "dot", "multiplicative"])
    )
    arguments = {
        "additive": ("units",),
        "location": ("max_length",),
        "cosine": ("sharpness", "epsilon"),
        "dot": ("scale", "dropout"),
        "multiplicative": ("dropout",),
    }[name]
    return name, {arg: draw(numbers) for arg in arguments}


CLASSES = {
    "additive": layers.AdditiveAttention,
    "location": layers.LocationAttention,
    "cosine": layers.CosineAttention,
    "dot": layers.DotProductAttention,
    "multiplicative": layers.MultiplicativeAttention,
}


@EXAMPLES
@given(score_layer_configs())
def test_score_layer_configs_work_or_are_refused_clearly(config):
    name, arguments = config
    layer = outcome(lambda: CLASSES[name](**arguments))
    if isinstance(layer, CLEAR_ERRORS):
        return
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 3, 4)).astype("float32")
    value = rng.normal(size=(2, min(5, MAX_LENGTH), 4)).astype("float32")
    result = outcome(lambda: layer([query, value], training=True))
    if isinstance(result, CLEAR_ERRORS):
        return
    assert result.shape == (2, 3, 4) and finite(result)
    # A valid config survives a round trip.
    clone = CLASSES[name].from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


@st.composite
def multi_head_cases(draw, allow_invalid):
    either = choices(allow_invalid)
    batch, queries, keys, width = (draw(dims(1, 4)) for _ in range(4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    mask_shape = draw(
        either(
            st.sampled_from([None, (batch, queries, keys), (batch, 1, keys)]),
            st.sampled_from([(batch, keys), (queries + 1, keys), (keys,)]),
        )
    )
    return {
        "num_heads": draw(either(dims(1, 3), st.integers(-1, 0))),
        "key_dim": draw(either(dims(1, 4), st.integers(-1, 0))),
        "value_dim": draw(either(st.one_of(st.none(), dims(1, 3)), st.just(0))),
        "chunk_size": draw(either(st.sampled_from([None, 2]), st.just(0))),
        "query": rng.normal(size=(batch, queries, width)).astype("float32"),
        "value": rng.normal(size=(batch, keys, draw(dims(1, 4)))).astype("float32"),
        "attention_mask": None
        if mask_shape is None
        else rng.random(mask_shape) < draw(st.sampled_from([0.0, 0.6, 1.0])),
        "use_causal_mask": draw(st.booleans()),
        "policy": draw(POLICIES),
    }


@pytest.mark.parametrize("allow_invalid", [False, True], ids=["valid", "any"])
@EXAMPLES
@given(data=st.data())
def test_multi_head_attention_is_right_or_a_clear_error(allow_invalid, data):
    case = data.draw(multi_head_cases(allow_invalid))
    layer = outcome(
        lambda: layers.MultiHeadAttention(
            num_heads=case["num_heads"],
            key_dim=case["key_dim"],
            value_dim=case["value_dim"],
            chunk_size=case["chunk_size"],
            dtype=case["policy"],
        )
    )
    assert allow_invalid or not isinstance(layer, CLEAR_ERRORS), layer
    if isinstance(layer, CLEAR_ERRORS):
        return
    result = outcome(
        lambda: layer(
            case["query"],
            case["value"],
            attention_mask=case["attention_mask"],
            use_causal_mask=case["use_causal_mask"],
            return_attention_scores=case["chunk_size"] is None,
        )
    )
    assert allow_invalid or not isinstance(result, CLEAR_ERRORS), result
    if isinstance(result, CLEAR_ERRORS):
        return
    outputs = result[0] if case["chunk_size"] is None else result
    assert outputs.shape == case["query"].shape and finite(outputs)
    if case["chunk_size"] is None:
        weights = as_numpy(keras.ops.cast(result[1], "float32"))
        batch, queries, keys = (
            case["query"].shape[0],
            case["query"].shape[1],
            case["value"].shape[1],
        )
        assert weights.shape == (batch, case["num_heads"], queries, keys)
        totals = weights.sum(axis=-1)
        assert np.all((np.abs(totals - 1) < 2e-2) | (np.abs(totals) < 1e-6))


@EXAMPLES
@given(
    shapes(min_rank=1, max_rank=5),
    st.one_of(st.integers(-1, 40), st.none()),
    POLICIES,
)
def test_position_encodings_are_right_or_a_clear_error(shape, sequence_length, policy):
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    sinusoidal = outcome(lambda: layers.SinusoidalPositionEncoding(dtype=policy)(x))
    if not isinstance(sinusoidal, CLEAR_ERRORS):
        assert sinusoidal.shape == shape and finite(sinusoidal)
    learned = outcome(
        lambda: layers.PositionEmbedding(sequence_length, dtype=policy)(x)
    )
    if not isinstance(learned, CLEAR_ERRORS):
        assert learned.shape == shape and finite(learned)
        assert shape[-2] <= sequence_length


@EXAMPLES
@given(
    shapes(min_rank=2, max_rank=5, high=9),
    st.one_of(st.none(), st.integers(-1, 3)),
    st.integers(0, 3),
    POLICIES,
)
def test_self_attention_2d_is_right_or_a_clear_error(
    shape, key_channels, pool_size, policy
):
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    layer = outcome(
        lambda: layers.SelfAttention2D(
            key_channels=key_channels, pool_size=pool_size, dtype=policy
        )
    )
    if isinstance(layer, CLEAR_ERRORS):
        return
    result = outcome(lambda: layer(x, return_attention_scores=True))
    if isinstance(result, CLEAR_ERRORS):
        return
    outputs, weights = result
    assert outputs.shape == shape and finite(outputs) and finite(weights)
    # gamma starts at 0: the block is the identity until it learns otherwise.
    np.testing.assert_allclose(
        as_numpy(keras.ops.cast(outputs, "float32")),
        x,
        **half_tolerance(_compute(layer)),
    )
