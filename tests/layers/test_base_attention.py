"""Behaviour every score-function attention layer shares (one test, six layers)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import layers
from tests.conftest import trainable_gradients
from tests.keras_versions import skip_on_torch_before
from tests.layers.attention_cases import (
    FACTORIES,
    POSITION_BASED,
    run_score_layer_test,
)

B, T, S, D = 2, 4, 6, 5
rng = np.random.default_rng(0)
QUERY = rng.normal(size=(B, T, D)).astype("float32")
VALUE = rng.normal(size=(B, S, D)).astype("float32")
VALUE_MASK = np.array([[True] * S, [True] * 3 + [False] * (S - 3)])

names = pytest.mark.parametrize("name", sorted(FACTORIES))


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@names
def test_output_and_weight_shapes(name):
    layer = FACTORIES[name]()
    out, w = layer([QUERY, VALUE], return_attention_scores=True)
    assert tuple(out.shape) == (B, T, D)
    assert tuple(w.shape) == (B, T, S)
    assert layer.compute_output_shape([QUERY.shape, VALUE.shape]) == (B, T, D)
    np.testing.assert_allclose(np_(w).sum(-1), 1.0, rtol=1e-5)


@names
def test_separate_key(name):
    layer = FACTORIES[name]()
    value = rng.normal(size=(B, S, 3)).astype("float32")
    out = layer([QUERY, value, VALUE])
    assert tuple(out.shape) == (B, T, 3)


@names
def test_rank2_query_is_one_decoder_step(name):
    layer = FACTORIES[name]()
    seq_out, seq_w = layer([QUERY, VALUE], return_attention_scores=True)
    step_out, step_w = layer([QUERY[:, 2], VALUE], return_attention_scores=True)
    assert tuple(step_out.shape) == (B, D)
    assert tuple(step_w.shape) == (B, S)
    np.testing.assert_allclose(np_(step_out), np_(seq_out)[:, 2], atol=1e-5)
    np.testing.assert_allclose(np_(step_w), np_(seq_w)[:, 2], atol=1e-6)


@names
def test_padded_values_get_zero_weight_and_do_not_matter(name):
    layer = FACTORIES[name]()
    out, w = layer(
        [QUERY, VALUE], mask=[None, VALUE_MASK], return_attention_scores=True
    )
    assert np.all(np_(w)[1, :, 3:] == 0.0)
    changed = VALUE.copy()
    changed[1, 3:] = 100.0 * rng.normal(size=(S - 3, D))
    out2 = layer([QUERY, changed], mask=[None, VALUE_MASK])
    np.testing.assert_allclose(np_(out2), np_(out), atol=1e-5)


@names
def test_nan_in_padded_values_reaches_no_decoder_step_nor_batch_row(name):
    # The paths around `call`'s own: a decoder step over keys prepared once,
    # and extra leading (batch) axes.
    layer = FACTORIES[name]()
    layer([QUERY, VALUE])  # builds the kernels that prepare the keys
    results = []
    for fill in (np.nan, 0.0):
        value = VALUE.copy()
        value[~VALUE_MASK] = fill
        results.append(
            [
                *layer.attend_prepared(
                    QUERY[:, 0], value, layer.prepare_keys(value), VALUE_MASK
                ),
                layer(
                    [QUERY[:, None], value[:, None]], mask=[None, VALUE_MASK[:, None]]
                ),
            ]
        )
    for got, want in zip(*results, strict=True):
        assert np.all(np.isfinite(np_(got)))
        np.testing.assert_array_equal(np_(got), np_(want))


@names
def test_padded_queries_give_zero_output_and_mask_propagates(name):
    layer = FACTORIES[name]()
    query_mask = np.array([[True] * T, [True, True, False, False]])
    out = layer([QUERY, VALUE], mask=[query_mask, None])
    assert np.all(np_(out)[1, 2:] == 0.0)
    assert np.any(np_(out)[1, :2] != 0.0)
    propagated = layer.compute_mask([QUERY, VALUE], [query_mask, None])
    np.testing.assert_array_equal(np_(propagated), query_mask)


@names
def test_fully_masked_values_give_zeros_not_nan(name):
    layer = FACTORIES[name]()
    mask = np.zeros((B, S), bool)
    out, w = layer([QUERY, VALUE], mask=[None, mask], return_attention_scores=True)
    assert np.all(np_(out) == 0.0) and np.all(np_(w) == 0.0)


@names
def test_causal_mask_makes_step_t_independent_of_later_inputs(name):
    layer = FACTORIES[name]()
    x = rng.normal(size=(B, T, D)).astype("float32")
    out, w = layer([x, x], use_causal_mask=True, return_attention_scores=True)
    assert np.all(np.triu(np.ones((T, T)), 1)[None] * np_(w) == 0.0)
    for t in range(T - 1):
        changed = x.copy()
        changed[:, t + 1 :] = rng.normal(size=changed[:, t + 1 :].shape)
        out2 = layer([changed, changed], use_causal_mask=True)
        np.testing.assert_allclose(
            np_(out2)[:, : t + 1], np_(out)[:, : t + 1], atol=1e-5
        )


@pytest.mark.parametrize("name", sorted(set(FACTORIES) - POSITION_BASED))
def test_self_attention_without_positions_is_permutation_equivariant(name):
    layer = FACTORIES[name]()
    x = rng.normal(size=(B, T, D)).astype("float32")
    permutation = np.array([2, 0, 3, 1])
    out = np_(layer([x, x]))
    permuted = np_(layer([x[:, permutation], x[:, permutation]]))
    np.testing.assert_allclose(permuted, out[:, permutation], atol=1e-5)


def test_location_attention_is_not_permutation_equivariant():
    # It scores positions, not contents: a sanity check of the test above.
    layer = FACTORIES["location"]()
    x = rng.normal(size=(B, T, D)).astype("float32")
    permutation = np.array([2, 0, 3, 1])
    out = np_(layer([x, x]))
    permuted = np_(layer([x[:, permutation], x[:, permutation]]))
    assert not np.allclose(permuted, out[:, permutation], atol=1e-3)


@names
def test_keras_mask_from_token_embedding_reaches_the_layer(name):
    tokens = keras.Input((S,), dtype="int32")
    x = layers.TokenAndPositionEmbedding(20, S, D, mask_zero=True)(tokens)
    out, w = FACTORIES[name]()([x, x], return_attention_scores=True)
    model = keras.Model(tokens, [out, w])
    ids = np.array([[3, 4, 5, 6, 7, 8], [3, 4, 5, 0, 0, 0]], "int32")
    out, w = model.predict(ids, verbose=0)
    assert np.all(w[1, :, 3:] == 0.0)  # padded keys
    assert np.all(out[1, 3:] == 0.0)  # padded queries
    np.testing.assert_allclose(w[1, :3].sum(-1), 1.0, rtol=1e-5)


@names
def test_jit_compiled_training_step_runs(name):
    # torch.compile fails on Keras 3.11's compiled train step for any model
    # (docs/install.md, "Keras releases").
    skip_on_torch_before((3, 12), "a jit-compiled train step fails in Dynamo")
    query = keras.Input((T, D))
    value = keras.Input((S, D))
    out = FACTORIES[name]()([query, value])
    model = keras.Model([query, value], keras.layers.Dense(1)(out))
    model.compile("adam", "mse", jit_compile=True)
    loss = model.train_on_batch([QUERY, VALUE], np.ones((B, T, 1), "float32"))
    assert np.isfinite(loss)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@names
def test_mixed_precision_weights_still_sum_to_one(name, policy):
    # The harness checks dtypes, finiteness and fully masked rows; this, that
    # the half-precision softmax is still a distribution.
    layer = FACTORIES[name](dtype=policy)
    mask = VALUE_MASK.copy()
    mask[1] = False
    _, w = layer([QUERY, VALUE], mask=[None, mask], return_attention_scores=True)
    np.testing.assert_allclose(np_(w)[0].sum(-1), 1.0, atol=2e-2)


@names
def test_gradients_with_respect_to_the_inputs_are_finite(name):
    # The weights' gradients are the harness's (run_score_layer_test).
    layer = FACTORIES[name]()
    query = keras.Variable(QUERY)
    value = keras.Variable(VALUE)
    layer([QUERY, VALUE])
    mask = VALUE_MASK.copy()
    mask[1] = False  # a fully masked row must not poison the gradients

    def loss():
        out = layer([query, value], mask=[None, mask])
        return ops.sum(ops.square(out))

    grads = trainable_gradients([query, value], loss)
    assert all(np.all(np.isfinite(g)) for g in grads)
    assert np.any(grads[1] != 0)


@names
def test_dropout_only_in_training(name):
    layer = FACTORIES[name](dropout=0.5, seed=1)
    inference_a = np_(layer([QUERY, VALUE], training=False))
    inference_b = np_(layer([QUERY, VALUE]))
    np.testing.assert_array_equal(inference_a, inference_b)
    _, w = layer([QUERY, VALUE], training=True, return_attention_scores=True)
    assert np.any(np_(w) == 0.0)


# -- bad input -------------------------------------------------------------


@names
def test_single_tensor_input_is_rejected(name):
    with pytest.raises(ValueError, match=r"list of length 2 or 3.*single"):
        FACTORIES[name]()(QUERY)
    with pytest.raises(ValueError, match=r"length 2 or 3.*received \[\(2, 4, 5\)"):
        FACTORIES[name]()([QUERY] * 4)
    with pytest.raises(ValueError, match=r"mask must be a list of length 2 or 3"):
        FACTORIES[name]()([QUERY, VALUE], mask=VALUE_MASK)


@names
def test_value_of_wrong_rank_is_rejected(name):
    with pytest.raises(ValueError, match=r"same leading axes.*\(2, 4, 5\).*\(2, 5\)"):
        FACTORIES[name]()([QUERY, VALUE[:, 0]])


@names
def test_query_and_value_of_different_ranks_are_rejected(name):
    with pytest.raises(ValueError, match=r"same leading axes.*\(1, 2, 4, 5\)"):
        FACTORIES[name]()([QUERY[None], VALUE])


@names
def test_leading_axes_are_batch_axes(name):
    # As keras.layers.Attention: (B, H, T, D) attends within each of the H rows,
    # exactly as the (B * H, T, D) batch does.
    query = rng.normal(size=(B, 3, T, D)).astype("float32")
    value = rng.normal(size=(B, 3, S, D)).astype("float32")
    value_mask = rng.random((B, 3, S)) > 0.3
    value_mask[..., 0] = True
    layer = FACTORIES[name]()
    out, w = layer(
        [query, value], mask=[None, value_mask], return_attention_scores=True
    )
    assert tuple(out.shape) == (B, 3, T, D) and tuple(w.shape) == (B, 3, T, S)
    flat_out, flat_w = layer(
        [query.reshape(-1, T, D), value.reshape(-1, S, D)],
        mask=[None, value_mask.reshape(-1, S)],
        return_attention_scores=True,
    )
    np.testing.assert_allclose(np_(out).reshape(-1, T, D), np_(flat_out), atol=1e-6)
    np.testing.assert_allclose(np_(w).reshape(-1, T, S), np_(flat_w), atol=1e-6)
    symbolic = layer(
        [keras.Input((3, T, D)), keras.Input((3, S, D))], return_attention_scores=True
    )
    assert [tuple(t.shape) for t in symbolic] == [(None, 3, T, D), (None, 3, T, S)]


@names
def test_batch_mismatch_is_rejected(name):
    with pytest.raises(ValueError, match=r"batch size of `query` \(1\).*\(2\)"):
        FACTORIES[name]()([QUERY[:1], VALUE])


@names
def test_key_value_length_mismatch_is_rejected(name):
    with pytest.raises(ValueError, match=r"sequence length.*`key` \(5\).*\(6\)"):
        FACTORIES[name]()([QUERY, VALUE, VALUE[:, :5]])


@names
def test_value_mask_of_wrong_shape_is_rejected(name):
    with pytest.raises(
        ValueError, match=r"`value_mask` must have shape \(2, 6\).*\(2, 5\)"
    ):
        FACTORIES[name]()([QUERY, VALUE], mask=[None, VALUE_MASK[:, :5]])


@names
def test_causal_mask_with_single_step_query_is_rejected(name):
    with pytest.raises(ValueError, match="use_causal_mask"):
        FACTORIES[name]()([QUERY[:, 0], VALUE], use_causal_mask=True)


@names
def test_invalid_dropout_is_rejected(name):
    with pytest.raises(ValueError, match=r"`dropout` must be in \[0, 1\)"):
        FACTORIES[name](dropout=1.5)


# -- the base classes, through subclasses as a user writes them --------------


@keras.saving.register_keras_serializable(package="tests")
class NegativeDistanceAttention(layers.ScoreAttention):
    """Only `compute_scores`: the score is -||q - k||^2."""

    def compute_scores(self, query, key):
        cross = ops.matmul(query, ops.transpose(key, (0, 2, 1)))
        query_norms = ops.sum(ops.square(query), -1, keepdims=True)
        key_norms = ops.expand_dims(ops.sum(ops.square(key), -1), 1)
        return 2.0 * cross - query_norms - key_norms


@keras.saving.register_keras_serializable(package="tests")
class BilinearAttention(layers.WeightedScoreAttention):
    """A kernel and prepared keys: the score is q (k W)^T."""

    def build_scores(self, query_dim, key_dim, key_length):
        self.kernel = self.add_kernel("kernel", (key_dim, query_dim))

    def prepare_keys(self, key):
        return ops.matmul(key, self.kernel)

    def compute_prepared_scores(self, query, prepared_key):
        return ops.matmul(query, ops.transpose(prepared_key, (0, 2, 1)))


def test_a_score_attention_subclass_keeps_the_layer_contract():
    run_score_layer_test(NegativeDistanceAttention)


def test_a_weighted_score_attention_subclass_keeps_the_layer_contract():
    run_score_layer_test(BilinearAttention, kernel_regularizer="l2")
