"""MultiHeadAttention's key/value sharing (`shares_keys_values`, the call
arguments `shared_keys_values` and `return_keys_values`) and its values
taken from the key projection (`values_from_keys`): Gemma 3n's and Gemma
4's attention, each against a layer of its own weights doing the same."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import GroupedQueryAttention, RotaryEmbedding
from keras_attention.layers.key_value_cache import quantize_rows


def numpy(t):
    return ops.convert_to_numpy(t)


def close(actual, expected, atol=2e-5):
    np.testing.assert_allclose(numpy(actual), numpy(expected), atol=atol, rtol=0)


def x(batch=2, length=7, dim=16, seed=0):
    return (
        np.random.default_rng(seed).normal(size=(batch, length, dim)).astype("float32")
    )


def layer(seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    return GroupedQueryAttention(
        **{
            "head_dim": 4,
            "num_query_heads": 4,
            "num_key_value_heads": 2,
            "use_bias": False,
            **kwargs,
        }
    )


def norm(name="key_norm"):
    return keras.layers.RMSNormalization(axis=-1, name=name)


def source_and_sharer(**source_options):
    """A layer with keys and values (rotary, a key norm and a value norm)
    and one sharing them; both built."""
    source = layer(
        rotary_embedding=RotaryEmbedding(),
        key_norm=norm(),
        value_norm=keras.layers.UnitNormalization(),
        **source_options,
    )
    sharer = layer(seed=1, shares_keys_values=True, rotary_embedding=RotaryEmbedding())
    inputs = x()
    source(inputs, inputs)
    sharer(inputs, inputs, shared_keys_values=np.zeros((2, 2, 7, 2, 4), "float32"))
    return source, sharer


def reference(source, sharer):
    """A layer of its own keys and values with the sharer's query and output
    weights and the source's key and value weights (and key norm)."""
    own = layer(
        rotary_embedding=RotaryEmbedding(),
        key_norm=norm(),
        value_norm=keras.layers.UnitNormalization(),
    )
    inputs = x()
    own(inputs, inputs)
    for name in ("_query_dense", "_output_dense"):
        getattr(own, name).set_weights(getattr(sharer, name).get_weights())
    for name in ("_key_dense", "_value_dense", "key_norm"):
        getattr(own, name).set_weights(getattr(source, name).get_weights())
    return own


def test_a_sharing_layer_builds_no_key_or_value_projection():
    _, sharer = source_and_sharer()
    names = [w.path.split("/")[-2] for w in sharer.weights]
    assert names == ["query", "attention_output"]
    assert sharer._key_dense is None and sharer._value_dense is None
    config = sharer.get_config()
    assert config["shares_keys_values"] is True
    assert type(sharer).from_config(config).get_config() == config


def test_shared_keys_values_in_training_equal_a_layer_of_those_weights():
    source, sharer = source_and_sharer()
    inputs, other = x(), x(seed=3)
    padding = np.ones((2, 7), bool)
    padding[1, 5:] = False
    _, keys_values = source(inputs, inputs, return_keys_values=True)
    assert tuple(keys_values.shape) == (2, 2, 7, 2, 4)
    got = sharer(
        other,
        other,
        shared_keys_values=keys_values,
        key_mask=padding,
        use_causal_mask=True,
    )
    # The reference attends from `other`'s queries to `inputs`' keys.
    expected = reference(source, sharer)(
        other, inputs, key_mask=padding, use_causal_mask=True
    )
    close(got, expected)
    assert (
        np.abs(
            numpy(got) - numpy(sharer(other, other, shared_keys_values=0 * keys_values))
        ).max()
        > 1e-3
    )


def test_shared_keys_values_on_the_chunked_path_equal_the_standard_path():
    source, sharer = source_and_sharer()
    inputs = x(length=24)
    _, keys_values = source(inputs, inputs, return_keys_values=True)
    expected = sharer(
        inputs, inputs, shared_keys_values=keys_values, use_causal_mask=True
    )
    sharer._chunk_size = 8
    got = sharer(inputs, inputs, shared_keys_values=keys_values, use_causal_mask=True)
    assert sharer.attention_path == "chunked"
    close(got, expected)


def test_shared_keys_values_of_packed_documents_equal_each_document_alone():
    # Two documents in a row: the source's keys (rotary positions restarted
    # at each document) read by the sharer with the same segment ids.
    source, sharer = source_and_sharer()
    inputs = x()
    segments = np.array([[1, 1, 1, 1, 2, 2, 2]] * 2, "int32")
    _, keys_values = source(
        inputs,
        inputs,
        segment_ids=segments,
        use_causal_mask=True,
        return_keys_values=True,
    )
    packed = numpy(
        sharer(
            inputs,
            inputs,
            shared_keys_values=keys_values,
            segment_ids=segments,
            use_causal_mask=True,
        )
    )
    for where in (slice(0, 4), slice(4, 7)):
        document = inputs[:, where]
        _, alone = source(
            document, document, use_causal_mask=True, return_keys_values=True
        )
        expected = sharer(
            document, document, shared_keys_values=alone, use_causal_mask=True
        )
        close(packed[:, where], expected)


@pytest.mark.parametrize("form", ["stacked", "int8", "pair"])
def test_decoding_reads_the_source_cache_without_writing(form):
    source, sharer = source_and_sharer()
    inputs = x()
    _, keys_values = source(inputs, inputs, return_keys_values=True)
    full = sharer(inputs, inputs, shared_keys_values=keys_values, use_causal_mask=True)
    cache = source.initial_cache(2, 7, layout="pair" if form == "pair" else "stacked")
    for step in range(7):
        token = inputs[:, step : step + 1]
        _, cache = source(
            token, token, cache=cache, cache_update_index=step, use_causal_mask=True
        )
        shared = quantize_rows(cache) if form == "int8" else cache
        output = sharer(
            token,
            token,
            shared_keys_values=shared,
            cache_update_index=step,
            use_causal_mask=True,
        )
        # One output: the sharing layer has no cache of its own to return.
        assert tuple(output.shape) == (2, 1, 16)
        atol = 2e-2 if form == "int8" else 2e-5
        close(output, numpy(full)[:, step : step + 1], atol=atol)


def test_sharing_is_refused_where_it_cannot_apply():
    source, sharer = source_and_sharer()
    inputs = x()
    _, keys_values = source(inputs, inputs, return_keys_values=True)
    with pytest.raises(ValueError, match="shared_keys_values"):
        sharer(inputs, inputs)
    with pytest.raises(ValueError, match="never written"):
        source(inputs, inputs, shared_keys_values=keys_values, cache=keys_values)
    with pytest.raises(ValueError, match="when decoding"):
        sharer(
            inputs[:, :1],
            inputs[:, :1],
            shared_keys_values=keys_values,
            cache_update_index=0,
            segment_ids=(np.ones((2, 1), "int32"), np.ones((2, 7), "int32")),
        )
    with pytest.raises(ValueError, match="key_norm, value_norm"):
        layer(shares_keys_values=True, key_norm=norm(), value_norm=norm())
    with pytest.raises(ValueError, match="shares_keys_values"):
        layer(shares_keys_values="yes")


def test_any_layer_may_attend_to_shared_keys_values():
    # Gemma 3n's sharing layers keep their (unused) projections.
    source, sharer = source_and_sharer()
    inputs = x()
    _, keys_values = source(inputs, inputs, return_keys_values=True)
    own = reference(source, sharer)
    shared_output = own(x(seed=4), x(seed=5), shared_keys_values=keys_values)
    close(shared_output, own(x(seed=4), inputs))


def test_return_keys_values_symbolically():
    source = layer()
    inputs = keras.Input((None, 16))
    output, keys_values = source(inputs, inputs, return_keys_values=True)
    assert tuple(keys_values.shape) == (None, 2, None, 2, 4)
    model = keras.Model(inputs, [output, keys_values])
    result = model(x())
    assert tuple(result[1].shape) == (2, 2, 7, 2, 4)


def test_values_from_keys_equal_a_value_projection_of_the_key_kernel():
    inputs = x()
    ours = layer(
        values_from_keys=True,
        rotary_embedding=RotaryEmbedding(),
        key_norm=norm(),
        value_norm=keras.layers.UnitNormalization(),
        kernel_layout="heads_first",
    )
    ours(inputs, inputs)
    names = [w.path.split("/")[-2] for w in ours.weights]
    assert names == ["query", "key", "key_norm", "attention_output"]
    assert ours._value_dense is None
    separate = layer(
        rotary_embedding=RotaryEmbedding(),
        key_norm=norm(),
        value_norm=keras.layers.UnitNormalization(),
        kernel_layout="heads_first",
    )
    separate(inputs, inputs)
    for name in ("_query_dense", "_key_dense", "key_norm", "_output_dense"):
        getattr(separate, name).set_weights(getattr(ours, name).get_weights())
    separate._value_dense.set_weights(ours._key_dense.get_weights())
    # `value` is unused: the values come from the key input's projection.
    close(ours(inputs, x(seed=9), inputs), separate(inputs, inputs))
    # In decoding too, the cached values are the normalized key projection.
    cache = ours.initial_cache(2, 7)
    full = numpy(ours(inputs, inputs, use_causal_mask=True))
    for step in range(7):
        token = inputs[:, step : step + 1]
        output, cache = ours(
            token, token, cache=cache, cache_update_index=step, use_causal_mask=True
        )
        close(output, full[:, step : step + 1])
    config = ours.get_config()
    assert config["values_from_keys"] is True
    with pytest.raises(ValueError, match="value_dim"):
        GroupedQueryAttention(4, 4, 2, value_dim=8, values_from_keys=True)(
            inputs, inputs
        )
