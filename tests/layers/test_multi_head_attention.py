import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import backend, ops

from keras_attention.layers import (
    MultiHeadAttention,
    TokenAndPositionEmbedding,
)
from tests.keras_versions import requires_keras_3_15_files, skip_unless_keras_accepts
from tests.layer_test import (
    assert_saved_model_matches,
    decode_token_by_token,
    run_layer_test,
)

rng = np.random.default_rng(0)
B, T, S, D = 2, 5, 7, 16
QUERY = rng.normal(size=(B, T, D)).astype("float32")
VALUE = rng.normal(size=(B, S, 12)).astype("float32")
MASK = rng.random((B, T, S)) > 0.3
MASK[..., 0] = True


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


KERAS_CONFIGS = {
    "basic": dict(num_heads=4, key_dim=8),
    "value_dim_output_shape": dict(
        num_heads=2, key_dim=8, value_dim=6, output_shape=10
    ),
    "gate_no_bias": dict(num_heads=2, key_dim=4, use_gate=True, use_bias=False),
    "sliding_window": dict(num_heads=2, key_dim=4, sliding_window=3),
}


@pytest.mark.parametrize("config", sorted(KERAS_CONFIGS))
def test_same_outputs_as_keras_after_loading_its_weights(config):
    skip_unless_keras_accepts(keras.layers.MultiHeadAttention, **KERAS_CONFIGS[config])
    theirs = keras.layers.MultiHeadAttention(**KERAS_CONFIGS[config])
    ours = MultiHeadAttention(**KERAS_CONFIGS[config])
    want, want_w = theirs(
        QUERY, VALUE, attention_mask=MASK, return_attention_scores=True
    )
    ours.load_keras_weights(theirs)
    got, got_w = ours(QUERY, VALUE, attention_mask=MASK, return_attention_scores=True)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)
    np.testing.assert_allclose(np_(got_w), np_(want_w), atol=1e-6)
    assert tuple(got_w.shape) == (B, KERAS_CONFIGS[config]["num_heads"], T, S)


def test_from_keras_with_causal_mask_and_separate_key():
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
    x = rng.normal(size=(B, S, D)).astype("float32")
    key = rng.normal(size=(B, S, 3)).astype("float32")
    want = theirs(x, VALUE, key=key, use_causal_mask=True)
    got = MultiHeadAttention.from_keras(theirs)(x, VALUE, key=key, use_causal_mask=True)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)


@pytest.mark.parametrize(
    "policy", ["mixed_bfloat16", "bfloat16", "mixed_float16", "float16", "float32"]
)
def test_from_keras_keeps_the_dtype_policy_and_trainability(policy):
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, dtype=policy)
    theirs.trainable = False
    want = theirs(QUERY, VALUE)
    ours = MultiHeadAttention.from_keras(theirs)
    assert ours.dtype_policy.name == policy and not ours.trainable
    assert ours.variable_dtype == theirs.variable_dtype
    got = ours(QUERY, VALUE)
    assert backend.standardize_dtype(got.dtype) == backend.standardize_dtype(want.dtype)
    np.testing.assert_allclose(np_(got), np_(want), atol=2e-2)
    # The converted layer saves and restores the policy.
    restored = MultiHeadAttention.from_config(ours.get_config())
    assert restored.dtype_policy.name == policy


def test_from_keras_keeps_a_global_policy_and_takes_an_explicit_dtype():
    keras.config.set_dtype_policy("mixed_bfloat16")
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
    want = theirs(QUERY, VALUE)
    keras.config.set_dtype_policy("float32")
    ours = MultiHeadAttention.from_keras(theirs)
    assert ours.dtype_policy.name == "mixed_bfloat16"
    np.testing.assert_allclose(np_(ours(QUERY, VALUE)), np_(want), atol=2e-2)
    # An explicit `dtype=` wins over the Keras layer's.
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, dtype="bfloat16")
    want = theirs(QUERY, VALUE)
    ours = MultiHeadAttention.from_keras(theirs, dtype="float32")
    assert ours.dtype_policy.name == "float32"
    got = ours(QUERY, VALUE)
    assert backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(np_(got), np_(want), atol=5e-2)


def test_load_rejects_mismatched_config():
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
    theirs(QUERY, VALUE)
    with pytest.raises(ValueError, match="num_heads=2.*num_heads=4"):
        MultiHeadAttention(num_heads=4, key_dim=8).load_keras_weights(theirs)


@pytest.mark.parametrize("use_causal_mask", [False, True])
def test_chunked_path_gives_the_standard_result(use_causal_mask):
    standard = MultiHeadAttention(num_heads=2, key_dim=8, flash_attention=False)
    x = rng.normal(size=(B, 33, D)).astype("float32")
    want = standard(x, x, use_causal_mask=use_causal_mask)
    chunked = MultiHeadAttention(num_heads=2, key_dim=8, chunk_size=8)
    chunked(x, x)
    chunked.set_weights(standard.get_weights())
    got = chunked(x, x, use_causal_mask=use_causal_mask)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)


def test_masked_keys_do_not_matter_and_get_zero_weight():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    value_mask = np.array([[True] * S, [True] * 3 + [False] * (S - 3)])
    out, w = layer(QUERY, VALUE, value_mask=value_mask, return_attention_scores=True)
    assert np.all(np_(w)[1, :, :, 3:] == 0.0)
    changed = VALUE.copy()
    changed[1, 3:] = 50.0
    out2 = layer(QUERY, changed, value_mask=value_mask)
    np.testing.assert_allclose(np_(out2), np_(out), atol=1e-5)


def test_causal_output_at_t_ignores_later_inputs():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    x = rng.normal(size=(B, T, D)).astype("float32")
    out = np_(layer(x, x, use_causal_mask=True))
    changed = x.copy()
    changed[:, 3:] = 9.0
    out2 = np_(layer(changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(out2[:, :3], out[:, :3], atol=1e-5)


def test_keras_masks_reach_the_layer():
    tokens = keras.Input((S,), dtype="int32")
    x = TokenAndPositionEmbedding(30, S, D, mask_zero=True)(tokens)
    _, w = MultiHeadAttention(num_heads=2, key_dim=8)(
        x, x, return_attention_scores=True
    )
    model = keras.Model(tokens, w)
    ids = np.array([[1, 2, 3, 4, 5, 6, 7], [1, 2, 0, 0, 0, 0, 0]], "int32")
    got = model.predict(ids, verbose=0)
    assert np.all(got[1, :, :2, 2:] == 0.0)
    assert np.all(got[1, :, 2:] == 0.0)  # padded queries attend to nothing


def test_incremental_decoding_with_cache_matches_one_causal_pass():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    x = rng.normal(size=(B, T, D)).astype("float32")
    full = np_(layer(x, x, use_causal_mask=True))
    cache = layer.initial_cache(B, T)
    decoded, cache = decode_token_by_token(layer, x, cache)
    np.testing.assert_allclose(decoded, full, atol=1e-5)
    assert tuple(cache.shape) == (B, 2, T, 2, 8)


def test_precomputed_cross_attention_cache():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    want = np_(layer(QUERY, VALUE))
    cache = layer.compute_key_value_cache(VALUE)
    got, same_cache = layer(QUERY, VALUE, cache=cache)
    np.testing.assert_allclose(np_(got), want, atol=1e-5)
    np.testing.assert_array_equal(np_(same_cache), np_(cache))


@pytest.mark.parametrize(
    "options",
    [{}, {"chunk_size": 4}, {"use_gate": True, "value_dim": 6, "output_shape": 10}],
    ids=["standard", "chunked", "gated"],
)
def test_keeps_the_layer_contract(options):
    # Query 1 of the first example sees no key: its weights are zeros.
    mask = MASK.copy()
    mask[0, 1] = False
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 8, "dropout": 0.1, **options},
        {"query": QUERY, "value": VALUE},
        {"return_attention_scores": True},
        expected_output_shape=[(B, T, options.get("output_shape", D)), (B, 2, T, S)],
        masks={"attention_mask": mask},
        masked_zeros=lambda out: out[1][0, :, 1],
    )


def test_dropout_only_in_training():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.5, seed=2)
    a = np_(layer(QUERY, VALUE))
    np.testing.assert_array_equal(a, np_(layer(QUERY, VALUE, training=False)))
    trained = np_(layer(QUERY, VALUE, training=True))
    assert not np.allclose(trained, a, atol=1e-4)
    # Like Keras, the returned weights are those before dropout.
    _, w = layer(QUERY, VALUE, training=True, return_attention_scores=True)
    np.testing.assert_allclose(np_(w).sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, key_dim=8), "argument `num_heads`.*num_heads=0"),
        (dict(num_heads=2, key_dim=1.5), "argument `key_dim`.*key_dim=1.5"),
        (dict(num_heads=2, key_dim=8, value_dim=-1), "argument `value_dim`"),
        (dict(num_heads=2, key_dim=8, dropout=2.0), r"`dropout` must be in \[0, 1\)"),
        (dict(num_heads=2, key_dim=8, output_shape=8.0), "Invalid `output_shape`"),
        (dict(num_heads=2, key_dim=8, sliding_window=0), "sliding_window"),
        (dict(num_heads=2, key_dim=8, chunk_size=0), "`chunk_size`"),
        (dict(num_heads=2, key_dim=8, flash_attention="yes"), "`flash_attention`"),
        (
            dict(num_heads=2, key_dim=8, flash_attention=True, dropout=0.1),
            "Dropout is not supported when flash attention is enabled",
        ),
        (
            dict(num_heads=2, key_dim=8, attention_positions="learned"),
            r"Unknown `attention_positions`: 'learned'. Expected one of None, "
            "'rotary', 'alibi', 'relative'",
        ),
        (
            dict(num_heads=4, key_dim=8, num_key_value_heads=3),
            "`num_key_value_heads` must divide `num_heads`",
        ),
    ],
)
def test_invalid_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


def test_bad_inputs():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    with pytest.raises(ValueError, match=r"same rank, at least 3.*\(2, 16\)"):
        layer(QUERY[:, 0], VALUE)
    with pytest.raises(ValueError, match=r"must be equal.*\(2, 3, 12\).*\(2, 7, 12\)"):
        layer(QUERY, VALUE, key=VALUE[:, :3])
    layer(QUERY, VALUE)
    with pytest.raises(ValueError, match=r"`cache` must have shape.*\(2, 2, 5, 3, 8\)"):
        layer(QUERY, VALUE, cache=np.zeros((B, 2, T, 3, 8), "float32"))
    with pytest.raises(
        ValueError, match=r"`attention_mask` must.*\(5, 7\); received \(2, 5, 3\)"
    ):
        layer(QUERY, VALUE, attention_mask=np.ones((B, T, 3), bool))
    with pytest.raises(ValueError, match="`cache_update_index` needs a `cache`"):
        layer(QUERY, VALUE, cache_update_index=0)


def test_compute_output_shape_checks_key_and_value_positions():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    with pytest.raises(ValueError, match="must be equal"):
        layer.compute_output_shape((B, T, D), (B, S, D), (B, S + 1, D))
    assert layer.compute_output_shape((B, T, D), (B, S, 3), (B, S, 5)) == (B, T, D)


# -- the keras.layers.MultiHeadAttention contract ----------------------------


@pytest.mark.parametrize("mask_rank", [2, 3, 4])
def test_attention_mask_of_any_rank_broadcasts(mask_rank):
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    x = rng.normal(size=(B, T, D)).astype("float32")
    lower = np.tril(np.ones((T, T), bool))
    want = np_(layer(x, x, use_causal_mask=True))
    mask = {
        2: lower,
        3: np.broadcast_to(lower, (B, T, T)),
        4: np.broadcast_to(lower, (B, 2, T, T)),
    }[mask_rank]
    np.testing.assert_allclose(np_(layer(x, x, attention_mask=mask)), want, atol=1e-6)


def test_per_head_attention_mask_with_padding():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    per_head = np.ones((B, 2, T, S), bool)
    per_head[:, 1, :, 4:] = False  # head 1 never sees keys 4..6
    value_mask = np.array([[True] * S, [True] * 5 + [False] * 2])
    _, w = layer(
        QUERY,
        VALUE,
        attention_mask=per_head,
        value_mask=value_mask,
        return_attention_scores=True,
    )
    w = np_(w)
    assert np.all(w[:, 1, :, 4:] == 0.0) and np.all(w[1, 0, :, 5:] == 0.0)
    assert np.all(w[0, 0, :, 4:] > 0.0)


def test_keras_masks_give_no_warning_and_stay_on_the_inputs():
    ids = np.array([[1, 2, 3, 0, 0], [3, 3, 1, 1, 2]])
    x = keras.layers.Embedding(4, 8, mask_zero=True)(ids)
    mask = np_(keras.src.backend.get_keras_mask(x))
    layer = MultiHeadAttention(num_heads=2, key_dim=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = layer(x, x)
    # The query's mask is the output's, and the caller's tensor keeps its own.
    np.testing.assert_array_equal(np_(keras.src.backend.get_keras_mask(out)), mask)
    np.testing.assert_array_equal(np_(keras.src.backend.get_keras_mask(x)), mask)


@pytest.mark.parametrize(
    "query_shape, value_shape, axes, output_shape",
    [
        ((B, 3, 4, 8), (B, 3, 6, 8), (2,), None),  # a sequence per row
        ((B, 3, 4, 8), (B, 2, 5, 8), (1, 2), None),  # 2-D attention (images)
        ((B, 4, 3, 2, 8), (B, 4, 2, 2, 8), (2, 3), (3, 5)),  # video-like
    ],
)
def test_attention_axes_match_keras(query_shape, value_shape, axes, output_shape):
    kwargs = dict(
        num_heads=2, key_dim=4, attention_axes=axes, output_shape=output_shape
    )
    theirs = keras.layers.MultiHeadAttention(**kwargs)
    q = rng.normal(size=query_shape).astype("float32")
    v = rng.normal(size=value_shape).astype("float32")
    want, want_w = theirs(q, v, return_attention_scores=True)
    ours = MultiHeadAttention.from_keras(theirs)
    got, got_w = ours(q, v, return_attention_scores=True)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)
    np.testing.assert_allclose(np_(got_w), np_(want_w), atol=1e-6)
    assert tuple(got.shape) == ours.compute_output_shape(query_shape, value_shape)
    symbolic = ours(
        keras.Input(batch_shape=query_shape),
        keras.Input(batch_shape=value_shape),
        return_attention_scores=True,
    )
    assert [tuple(t.shape) for t in symbolic] == [tuple(got.shape), tuple(got_w.shape)]


def test_multi_axis_fully_masked_query_gives_zeros():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=(1, 2))
    q = rng.normal(size=(B, 3, 4, 8)).astype("float32")
    mask = np.ones((B, 3, 4, 3, 4), bool)
    mask[0, 1, 2] = False  # query (1, 2) of example 0 sees no position
    out, w = layer(q, q, attention_mask=mask, return_attention_scores=True)
    assert np.all(np_(w)[0, :, 1, 2] == 0.0)
    assert np.all(np.isfinite(np_(out)))
    np.testing.assert_allclose(np_(w)[1].sum(axis=(-2, -1)), 1.0, rtol=1e-5)


def test_symbolic_scores_have_the_key_length():
    layer = MultiHeadAttention(num_heads=4, key_dim=2)
    q, v = keras.Input(batch_shape=(2, 3, 5)), keras.Input(batch_shape=(2, 7, 5))
    _, w = layer(q, v, return_attention_scores=True)
    assert tuple(w.shape) == (2, 4, 3, 7)


def test_overriding_compute_attention_is_honoured():
    seen = {}

    class Recording(MultiHeadAttention):
        def _compute_attention(
            self,
            query,
            key,
            value,
            attention_mask=None,
            training=None,
            return_attention_scores=False,
        ):
            seen["mask"] = np_(attention_mask)
            output, weights = super()._compute_attention(
                query, key, value, attention_mask, training, return_attention_scores
            )
            return output * 0.0, weights

    layer = Recording(num_heads=2, key_dim=4)
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    out = np_(layer(x, x, use_causal_mask=True))
    # The causal mask reaches the override (materialized, as Keras does),
    # and the override's result is the layer's.
    np.testing.assert_array_equal(seen["mask"][0], np.tril(np.ones((4, 4))))
    np.testing.assert_allclose(out, np_(layer._output_dense(np.zeros((1, 4, 2, 4)))))


def test_compute_attention_applies_its_causal_flag_with_a_mask():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    layer.build((1, 5, 8), (1, 5, 8))
    q, k, v = (rng.normal(size=(1, 5, 2, 4)).astype("float32") for _ in range(3))
    extra = np.ones((1, 5, 5), bool)
    extra[:, 3, 1] = False
    both, _ = layer._compute_attention(q, k, v, extra, use_causal_mask=True)
    merged = extra & np.tril(np.ones((5, 5), bool))
    want, _ = layer._compute_attention(q, k, v, merged)
    np.testing.assert_allclose(np_(both), np_(want), atol=1e-6)


def test_flash_attention_refuses_to_return_scores():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, flash_attention=True)
    with pytest.raises(ValueError, match="Returning attention scores is not supported"):
        layer(QUERY, VALUE, return_attention_scores=True)


def test_sliding_window_with_causal_mask_is_a_causal_band():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, sliding_window=3)
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    _, w = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    rows, cols = np.indices((6, 6))
    band = (cols <= rows) & (rows - cols < 3)
    np.testing.assert_array_equal(np_(w)[0, 0] > 0, band)


@pytest.mark.parametrize("use_causal_mask", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_sliding_window_without_weights_matches_keras(use_causal_mask, chunk_size):
    # Without weights the window goes to the attention op, which on the
    # chunked path skips the tiles outside it; Keras masks the band.
    skip_unless_keras_accepts(keras.layers.MultiHeadAttention, sliding_window=5)
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, sliding_window=5)
    ours = MultiHeadAttention(
        num_heads=2, key_dim=4, sliding_window=5, chunk_size=chunk_size
    )
    x = rng.normal(size=(B, 23, D)).astype("float32")
    # The diagonal kept: a fully masked row gives zeros here, not Keras' mean.
    mask = (rng.random((B, 23, 23)) > 0.2) | np.eye(23, dtype=bool)
    want = theirs(x, x, attention_mask=mask, use_causal_mask=use_causal_mask)
    ours.load_keras_weights(theirs)
    got = ours(x, x, attention_mask=mask, use_causal_mask=use_causal_mask)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)
    with_weights, _ = ours(
        x,
        x,
        attention_mask=mask,
        use_causal_mask=use_causal_mask,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(np_(with_weights), np_(want), atol=1e-5)


def test_sublayers_are_keras_own():
    layer = MultiHeadAttention(
        num_heads=2,
        key_dim=4,
        use_gate=True,
        kernel_constraint="non_neg",
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
    )
    layer.build((1, 4, 8), (1, 4, 8))
    denses = [
        layer._query_dense,
        layer._key_dense,
        layer._value_dense,
        layer._gate_dense,
    ]
    for dense in denses:
        assert isinstance(dense.kernel.constraint, keras.constraints.NonNeg)
    # Each projection gets its own initial values.
    assert not np.allclose(np_(layer._query_dense.kernel), np_(layer._key_dense.kernel))
    assert layer.query_dense is layer._query_dense
    assert [w.path for w in layer.weights][0].endswith("query/kernel")


def test_int8_quantization_keeps_the_output_close():
    layer = MultiHeadAttention(num_heads=3, key_dim=8, use_bias=False)
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    before = np_(layer(x, x))
    for dense in layer._flatten_layers(include_self=False):
        if isinstance(dense, keras.layers.EinsumDense):
            dense.quantize("int8")
    assert keras.backend.standardize_dtype(layer._query_dense._kernel.dtype) == "int8"
    assert keras.backend.standardize_dtype(layer._output_dense._kernel.dtype) == "int8"
    assert np.mean((np_(layer(x, x)) - before) ** 2) < 1e-2


def test_dtype_policy_map_reaches_the_projections():
    policy_map = keras.dtype_policies.DTypePolicyMap()
    for name in ("query", "key", "value"):
        policy_map[f"mha/{name}"] = keras.dtype_policies.get("int8_from_float32")
    layer = MultiHeadAttention(
        num_heads=3, key_dim=8, use_bias=False, dtype=policy_map, name="mha"
    )
    layer.build((1, 2, 2), (1, 2, 2))
    for dense in (layer._query_dense, layer._key_dense, layer._value_dense):
        assert keras.backend.standardize_dtype(dense._kernel.dtype) == "int8"


def test_lora_trains_and_saves(tmp_path):
    inputs = {"query": keras.Input((2, 2)), "value": keras.Input((2, 2))}
    layer = MultiHeadAttention(num_heads=3, key_dim=8, use_bias=False)
    model = keras.Model(inputs, layer(inputs["query"], inputs["value"]))
    layer.query_dense.enable_lora(2)
    layer.value_dense.enable_lora(2)
    assert (
        len(layer.trainable_variables) == 6 and len(layer.non_trainable_variables) == 2
    )
    data = {k: rng.normal(size=(4, 2, 2)).astype("float32") for k in inputs}
    model.compile(optimizer="sgd", loss="mse")
    model.fit(data, rng.normal(size=(4, 2, 2)), verbose=0)
    assert_saved_model_matches(model, data, tmp_path)


@requires_keras_3_15_files
def test_loads_a_model_saved_before_it_subclassed_keras():
    # Saved by keras_attention 0.1.0 (cca2932), whose layer held its own
    # projections: the weights still land where they belong.
    data = Path(__file__).parent.parent / "data"
    model = keras.saving.load_model(data / "mha_saved_by_0_1_0.keras")
    got = model.predict(np.ones((1, 5, 16), "float32"), verbose=0)
    want = np.load(data / "mha_saved_by_0_1_0_output.npy")  # on TensorFlow
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_path_each_call_takes_is_visible():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    assert layer.attention_path is None
    layer(QUERY, VALUE, attention_mask=MASK)
    fused = {"torch": "torch_sdpa"}.get(backend.backend(), "standard")
    assert layer.attention_path == fused
    layer(QUERY, VALUE, return_attention_scores=True)
    assert layer.attention_path == "standard"
    chunked = MultiHeadAttention(num_heads=2, key_dim=8, chunk_size=4)
    chunked(QUERY, VALUE)
    assert chunked.attention_path == "chunked"
    grid = rng.normal(size=(1, 2, 3, D)).astype("float32")
    multi_axis = MultiHeadAttention(num_heads=2, key_dim=8, attention_axes=(1, 2))
    multi_axis(grid, grid)
    assert multi_axis.attention_path == "multi_axis"


def test_flash_attention_false_keeps_the_standard_path_for_long_sequences():
    """512 x 512 causal scores switch by themselves to a memory-efficient
    path (a fused kernel where one serves, else the chunked path);
    `flash_attention=False` forbids it (it once became None, the automatic
    choice, as `False or None` does in Keras' own layer)."""
    x = rng.normal(size=(1, 512, 8)).astype("float32")
    automatic = MultiHeadAttention(num_heads=1, key_dim=4)
    automatic(x, x, use_causal_mask=True)
    fused = {"torch": "torch_sdpa"}.get(backend.backend(), "chunked")
    assert automatic.attention_path == fused
    standard = MultiHeadAttention(num_heads=1, key_dim=4, flash_attention=False)
    standard(x, x, use_causal_mask=True)
    assert standard.attention_path == "standard"


@pytest.mark.skipif(backend.backend() != "jax", reason="the Pallas kernel, on JAX")
@pytest.mark.parametrize("window", [None, 3])
def test_on_a_gpu_the_layer_takes_the_pallas_kernel_for_what_cudnn_cannot(
    monkeypatch, window
):
    """float32 (which cuDNN does not take) with memory-efficient attention
    asked for, the device faked as a GPU: the Pallas kernel serves (run here
    in Pallas' interpreter), with the standard path's outputs."""
    from keras_attention.ops import plan

    options = {"use_causal_mask": True}
    layer_options = {"num_heads": 2, "key_dim": 8, "sliding_window": window}
    standard = MultiHeadAttention(flash_attention=False, **layer_options)
    want = standard(QUERY, QUERY, **options)
    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    layer = MultiHeadAttention(flash_attention=True, **layer_options)
    layer(QUERY, QUERY, **options)
    layer.set_weights(standard.get_weights())
    got = layer(QUERY, QUERY, **options)
    assert layer.attention_path == "jax_pallas"
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=2e-6
    )


@pytest.mark.skipif(backend.backend() != "jax", reason="the Pallas kernel, on JAX")
def test_on_a_gpu_keras_masks_reach_the_kernel_as_padding_over_keys(monkeypatch):
    """A query and a value mask (left padding, which cuDNN's lengths cannot
    express), the device faked as a GPU: the Pallas kernel serves (run here
    in Pallas' interpreter) with the key mask, the masked query rows zeroed
    after it, and the standard path's outputs; NaN in the padded inputs
    reaches no output."""
    from keras_attention.ops import plan

    mask = np.ones((2, QUERY.shape[1]), bool)
    mask[1, :2] = False
    query = np.array(QUERY)
    query[1, :2] = np.nan
    masks = {"query_mask": mask, "value_mask": mask, "use_causal_mask": True}
    standard = MultiHeadAttention(num_heads=2, key_dim=8, flash_attention=False)
    want = standard(query, query, **masks)
    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    layer(query, query, **masks)
    layer.set_weights(standard.get_weights())
    got = ops.convert_to_numpy(layer(query, query, **masks))
    assert layer.attention_path == "jax_pallas"
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ops.convert_to_numpy(want), atol=2e-6)
