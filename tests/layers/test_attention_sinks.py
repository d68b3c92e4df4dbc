"""`MultiHeadAttention(use_sinks=True)` and `GroupedQueryAttention`'s: a
trainable logit per head joins every softmax (GPT-OSS), on every path."""

import numpy as np
import pytest
from keras import ops

from keras_attention.layers import GroupedQueryAttention, MultiHeadAttention
from tests.conftest import trainable_gradients
from tests.layer_test import run_layer_test

B, T, D = 2, 6, 16
rng = np.random.default_rng(0)
X = rng.normal(size=(B, T, D)).astype("float32")
SINKS = np.array([1.5, -1.0, 0.0, 3.0], "float32")


def _layer(cls=MultiHeadAttention, **options):
    if cls is GroupedQueryAttention:
        layer = cls(4, 4, 2, use_sinks=True, **options)
    else:
        layer = cls(num_heads=4, key_dim=4, use_sinks=True, **options)
    layer(X, X)
    layer.sinks.assign(SINKS)
    return layer


def _reference(layer, mask):
    """The layer's projections in NumPy, the sink as one more logit column
    (keras-hub's GPT-OSS formulation)."""
    query, key, value = (
        ops.convert_to_numpy(dense(X)).astype("float64")
        for dense in (layer._query_dense, layer._key_dense, layer._value_dense)
    )
    groups = query.shape[2] // key.shape[2]
    key, value = (np.repeat(x, groups, axis=2) for x in (key, value))
    scores = np.einsum("btnh,bsnh->bnts", query, key) / 2.0
    scores = np.where(mask, scores, -np.inf)
    sink = np.broadcast_to(SINKS[None, :, None, None], (*scores.shape[:3], 1))
    logits = np.concatenate([scores, sink], axis=-1)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights = (weights / weights.sum(axis=-1, keepdims=True))[..., :-1]
    heads = np.einsum("bnts,bsnh->btnh", weights, value)
    return ops.convert_to_numpy(layer._output_dense(heads.astype("float32")))


@pytest.mark.parametrize("cls", [MultiHeadAttention, GroupedQueryAttention])
@pytest.mark.parametrize(
    "options", [{}, {"chunk_size": 2}, {"flash_attention": False}], ids=str
)
def test_outputs_equal_the_concatenated_sink_formulation(cls, options):
    layer = _layer(cls, **options)
    causal = np.tril(np.ones((T, T), bool))[None, None]
    got = ops.convert_to_numpy(layer(X, X, use_causal_mask=True))
    np.testing.assert_allclose(got, _reference(layer, causal), atol=1e-5)


def test_the_weights_returned_leave_the_sinks_share():
    layer = _layer()
    output, weights = layer(X, X, return_attention_scores=True)
    full = np.ones((1, 1, T, T), bool)
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), _reference(layer, full), atol=1e-5
    )
    assert (ops.convert_to_numpy(weights).sum(axis=-1) < 1.0).all()


def test_the_sinks_train_and_their_gradient_is_the_same_on_every_path():
    grads, first = [], None
    for options in ({"flash_attention": False}, {"chunk_size": 2}):
        layer = _layer(**options)
        first = first or layer
        layer.set_weights(first.get_weights())

        def loss(layer=layer):
            return ops.sum(ops.square(layer(X, X, use_causal_mask=True)))

        assert layer.trainable_weights[0] is layer.sinks
        grads.append(trainable_gradients(layer.trainable_weights, loss))
    assert np.abs(grads[0][0]).min() > 0
    for got, want in zip(grads[1], grads[0], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_a_padded_query_gives_the_output_bias():
    layer = _layer()
    query_mask = np.ones((B, T), bool)
    query_mask[0, 2] = False
    output = layer(X, X, query_mask=query_mask, value_mask=query_mask)
    bias = ops.convert_to_numpy(layer._output_dense.bias)
    np.testing.assert_allclose(ops.convert_to_numpy(output)[0, 2], bias, atol=1e-6)


def test_layer_contract():
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 4, "use_sinks": True},
        {"query": X, "value": X},
        {"use_causal_mask": True},
        expected_output_shape=(B, T, D),
    )


def test_sinks_need_one_attention_axis():
    layer = MultiHeadAttention(2, 4, use_sinks=True, attention_axes=(1, 2))
    x = np.zeros((1, 3, 3, 8), "float32")
    with pytest.raises(ValueError, match="one attention axis"):
        layer(x, x)


def test_use_sinks_must_be_a_bool():
    with pytest.raises(ValueError, match="`use_sinks` must be True or False"):
        MultiHeadAttention(2, 4, use_sinks="yes")
