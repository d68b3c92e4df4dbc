"""Property-based tests of the public layers: random configs, shapes, ranks,
masks and dtype policies give either a correct, finite result or a clear
`ValueError`/`TypeError`, never a backend error or NaN."""

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras.src.backend import set_keras_mask

from keras_attention import layers
from tests.layers.attention_cases import FACTORIES, MAX_LENGTH
from tests.properties import (
    CLEAR_ERRORS,
    EXAMPLES,
    FEW_EXAMPLES,
    GARBAGE,
    assert_same_and_finite,
    choices,
    dims,
    gradients,
    half_tolerance,
    outcome,
    shapes,
    to_numpy,
    with_garbage,
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


# -- masked keys and values are never read -------------------------------------
#
# NaN, inf, -inf or 1e30 at the key/value positions that no query may attend
# to must give exactly the result of zeros there, and a finite one: outputs,
# weights, and the gradients with respect to the inputs and the weights.
# Batches of 2 (each example padded its own way) and few lengths, since on
# JAX every new shape compiles every op again; more keys than queries lets a
# causal mask hide keys.
QUERY_LENGTHS = st.sampled_from([1, 3])
KEY_LENGTHS = st.sampled_from([2, 4])


def padding(draw, batch, length):
    """`(batch, length)` boolean, True at real positions: a random number of
    them (none included) at the front of each example."""
    lengths = draw(st.lists(st.integers(0, length), min_size=batch, max_size=batch))
    return np.arange(length) < np.array(lengths)[:, None]


def tensor_with_mask(x, mask):
    """`x` as a tensor carrying `mask` as its Keras mask, as a masking layer
    upstream (an `Embedding(mask_zero=True)`, say) would leave it."""
    x = keras.ops.convert_to_tensor(x)
    set_keras_mask(x, keras.ops.convert_to_tensor(mask))
    return x


@pytest.mark.parametrize("name", sorted(FACTORIES))
@EXAMPLES
@given(data=st.data())
def test_score_layers_never_read_masked_values(name, data):
    draw = data.draw
    batch, queries, values, depth = 2, draw(QUERY_LENGTHS), draw(KEY_LENGTHS), 3
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    step = draw(st.booleans())
    causal = not step and draw(st.booleans())
    query = rng.normal(size=(batch, depth) if step else (batch, queries, depth))
    value = rng.normal(size=(batch, values, depth)).astype("float32")
    key = rng.normal(size=(batch, values, depth)) if draw(st.booleans()) else None
    value_mask = padding(draw, batch, values)
    hidden = ~value_mask
    if causal:
        hidden |= np.arange(values) >= queries  # past the last query
    garbage = draw(GARBAGE)
    layer = FACTORIES[name](dtype=draw(POLICIES))
    keras_mask = draw(st.booleans())

    def run(fill):
        inputs = [
            query.astype("float32"),
            with_garbage(value, hidden, fill).astype("float32"),
        ]
        if key is not None:
            inputs.append(with_garbage(key, hidden, fill).astype("float32"))
        options = {"use_causal_mask": causal}

        def attend(query, value, **kwargs):
            given = [query, value, *inputs[2:]]
            if keras_mask:
                given[1] = tensor_with_mask(value, value_mask)
                return layer(given, **options, **kwargs)
            return layer(given, mask=[None, value_mask], **options, **kwargs)

        def loss(query, value):
            return keras.ops.sum(keras.ops.cast(attend(query, value), "float32"))

        outputs = attend(*inputs[:2], return_attention_scores=True)
        return [*outputs, *gradients(loss, inputs[:2], layer.trainable_variables)]

    assert_same_and_finite(run(garbage), run(0.0))


@st.composite
def multi_head_masked_cases(draw):
    batch, queries, keys = 2, draw(QUERY_LENGTHS), draw(KEY_LENGTHS)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    attention_mask = None
    if draw(st.booleans()):
        attention_mask = rng.random((batch, queries, keys)) < 0.7
    return {
        "batch": batch,
        "queries": queries,
        "keys": keys,
        "query": rng.normal(size=(batch, queries, 4)).astype("float32"),
        "value": rng.normal(size=(batch, keys, 3)).astype("float32"),
        "key": rng.normal(size=(batch, keys, 5)).astype("float32")
        if draw(st.booleans())
        else None,
        "value_mask": padding(draw, batch, keys),
        "keras_mask": draw(st.booleans()),
        "attention_mask": attention_mask,
        "use_causal_mask": draw(st.booleans()),
        "chunk_size": draw(st.sampled_from([None, 2])),
        "policy": draw(POLICIES),
        "garbage": draw(GARBAGE),
    }


@EXAMPLES
@given(multi_head_masked_cases())
def test_multi_head_attention_never_reads_masked_values(case):
    """Padding from `value_mask`, a Keras mask or columns of `attention_mask`
    that hide a key from every query, and keys past the last query of a
    causal mask; standard and chunked paths."""
    batch, queries, keys = case["batch"], case["queries"], case["keys"]
    seen = np.broadcast_to(case["value_mask"][:, None, :], (batch, queries, keys))
    if case["attention_mask"] is not None:
        seen = seen & case["attention_mask"]
    if case["use_causal_mask"]:
        seen = seen & np.tril(np.ones((queries, keys), bool))
    hidden = ~seen.any(axis=1)
    layer = layers.MultiHeadAttention(
        num_heads=2, key_dim=3, chunk_size=case["chunk_size"], dtype=case["policy"]
    )
    weights = case["chunk_size"] is None

    def run(fill):
        value = with_garbage(case["value"], hidden, fill)
        key = case["key"]
        if key is not None:
            key = with_garbage(key, hidden, fill)

        def attend(query, value, **kwargs):
            options = {
                "key": key,
                "attention_mask": case["attention_mask"],
                "use_causal_mask": case["use_causal_mask"],
            }
            if case["keras_mask"]:
                value = tensor_with_mask(value, case["value_mask"])
                if key is not None:
                    options["key"] = tensor_with_mask(key, case["value_mask"])
            else:
                options["value_mask"] = case["value_mask"]
            return layer(query, value, **options, **kwargs)

        def loss(query, value):
            return keras.ops.sum(keras.ops.cast(attend(query, value), "float32"))

        outputs = attend(case["query"], value, return_attention_scores=weights)
        outputs = list(outputs) if weights else [outputs]
        grads = gradients(loss, (case["query"], value), layer.trainable_variables)
        return outputs + grads

    assert_same_and_finite(run(case["garbage"]), run(0.0))


@EXAMPLES
@given(KEY_LENGTHS, dims(0, 3), GARBAGE, st.integers(0, 2**16))
def test_multi_head_attention_never_reads_unused_cache_slots(
    slots, index, garbage, seed
):
    """Incremental decoding: the cache slots after the current step, and the
    slots that `attention_mask` pads, may hold anything."""
    batch, index = 2, min(index, slots - 1)
    rng = np.random.default_rng(seed)
    layer = layers.MultiHeadAttention(num_heads=2, key_dim=3)
    step = rng.normal(size=(batch, 1, 4)).astype("float32")
    cache = rng.normal(size=(batch, 2, slots, 2, 3)).astype("float32")
    slot_mask = rng.random((batch, slots)) < 0.7
    slot_mask[:, index] = True  # the new step sees itself
    hidden = ~slot_mask | (np.arange(slots) > index)

    def run(fill):
        filled = cache.copy()
        filled.transpose(0, 2, 1, 3, 4)[hidden] = fill
        outputs, new_cache = layer(
            step,
            step,
            attention_mask=slot_mask[:, None, :],
            use_causal_mask=True,
            cache=filled,
            cache_update_index=index,
        )
        # The new step's keys and values are written where they belong.
        written = to_numpy(new_cache)[:, :, index]
        return [outputs, written]

    assert_same_and_finite(run(garbage), run(0.0))


@EXAMPLES
@given(KEY_LENGTHS, GARBAGE, st.booleans(), st.integers(0, 2**16))
def test_attention_pooling_never_reads_masked_positions(
    length, garbage, keras_mask, seed
):
    batch, rng = 2, np.random.default_rng(seed)
    inputs = rng.normal(size=(batch, length, 4)).astype("float32")
    mask = rng.random((batch, length)) < 0.6
    layer = layers.AttentionPooling(units=3)

    def run(fill):
        def pool(x, **kwargs):
            if keras_mask:
                return layer(tensor_with_mask(x, mask), **kwargs)
            return layer(x, mask=mask, **kwargs)

        def loss(x):
            return keras.ops.sum(pool(x))

        x = with_garbage(inputs, ~mask, fill)
        pooled = pool(x, return_attention_scores=True)
        return [*pooled, *gradients(loss, (x,), layer.trainable_variables)]

    assert_same_and_finite(run(garbage), run(0.0))


@FEW_EXAMPLES
@given(KEY_LENGTHS, QUERY_LENGTHS, GARBAGE, st.booleans(), st.data())
def test_transformer_blocks_never_read_padding(
    length, source_length, garbage, keras_mask, data
):
    """Padding of the encoder's input, and of the decoder's input and its
    encoder sequence, reaches none of the real positions' outputs; the
    gradients stay finite with garbage in the encoder sequence's padding (the
    decoder's own padded positions are queries too, whose outputs are not
    guaranteed)."""
    batch, rng = 2, np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=(batch, length, 8)).astype("float32")
    source = rng.normal(size=(batch, source_length, 8)).astype("float32")
    pad = padding(data.draw, batch, length)
    source_pad = padding(data.draw, batch, source_length)
    encoder = layers.TransformerEncoderBlock(8, num_heads=2)
    decoder = layers.TransformerDecoderBlock(8, num_heads=2)
    real = pad[..., None]

    def masked(x, mask, name):
        if keras_mask:
            return {name: tensor_with_mask(x, mask)}
        return {name: x, f"{name.split('_')[0]}_padding_mask": mask}

    def run(fill):
        noisy = with_garbage(x, ~pad, fill)
        noisy_source = with_garbage(source, ~source_pad, fill)
        if keras_mask:
            encoded = encoder(tensor_with_mask(noisy, pad))
        else:
            encoded = encoder(noisy, padding_mask=pad)
        decoded = decoder(
            **masked(noisy, pad, "decoder_sequence"),
            **masked(noisy_source, source_pad, "encoder_sequence"),
        )

        def loss(y, source):
            kwargs = masked(source, source_pad, "encoder_sequence")
            return keras.ops.sum(decoder(y, decoder_padding_mask=pad, **kwargs))

        grads = gradients(loss, (x, noisy_source), decoder.trainable_variables)
        real_outputs = [np.where(real, to_numpy(y), 0) for y in (encoded, decoded)]
        return real_outputs + grads

    assert_same_and_finite(run(garbage), run(0.0))


@FEW_EXAMPLES
@given(KEY_LENGTHS, dims(0, 3), GARBAGE, st.integers(0, 2**16))
def test_transformer_decoder_never_reads_unused_cache_slots(
    slots, index, garbage, seed
):
    batch, index = 2, min(index, slots - 1)
    rng = np.random.default_rng(seed)
    decoder = layers.TransformerDecoderBlock(8, num_heads=2)
    step = rng.normal(size=(batch, 1, 8)).astype("float32")
    decoder(step)
    cache = rng.normal(size=(batch, 2, slots, 2, 4)).astype("float32")
    hidden = np.arange(slots) > index

    def run(fill):
        filled = cache.copy()
        filled[:, :, hidden] = fill
        outputs, _ = decoder(
            step, self_attention_cache=filled, self_attention_cache_update_index=index
        )
        return [outputs]

    assert_same_and_finite(run(garbage), run(0.0))
