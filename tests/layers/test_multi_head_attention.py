import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import MultiHeadAttention, TokenAndPositionEmbedding
from tests.conftest import trainable_gradients

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
    steps = []
    for t in range(T):
        out, cache = layer(
            x[:, t : t + 1],
            x[:, t : t + 1],
            use_causal_mask=True,
            cache=cache,
            cache_update_index=t,
        )
        steps.append(np_(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    assert tuple(cache.shape) == (B, 2, T, 2, 8)


def test_precomputed_cross_attention_cache():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    want = np_(layer(QUERY, VALUE))
    cache = layer.compute_key_value_cache(VALUE)
    got, same_cache = layer(QUERY, VALUE, cache=cache)
    np.testing.assert_allclose(np_(got), want, atol=1e-5)
    np.testing.assert_array_equal(np_(same_cache), np_(cache))


def _functional(layer):
    q = keras.Input((T, D))
    v = keras.Input((S, 12))
    m = keras.Input((T, S), dtype="bool")
    out, w = layer(q, v, attention_mask=m, return_attention_scores=True)
    return keras.Model([q, v, m], [out, w])


def test_save_load_safe_mode_and_jit(tmp_path):
    model = _functional(MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.1))
    inputs = [QUERY, VALUE, MASK]
    before = model.predict(inputs, verbose=0)
    model.save(tmp_path / "mha.keras")
    loaded = keras.saving.load_model(tmp_path / "mha.keras", safe_mode=True)
    for a, b in zip(before, loaded.predict(inputs, verbose=0), strict=True):
        np.testing.assert_array_equal(a, b)
    eager = model(inputs)
    loaded.compile(jit_compile=True)
    for a, b in zip(eager, loaded.predict(inputs, verbose=0), strict=True):
        np.testing.assert_allclose(np_(a), b, atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_with_fully_masked_rows(policy):
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dtype=policy)
    mask = MASK.copy()
    mask[0, 1] = False
    out, w = layer(QUERY, VALUE, attention_mask=mask, return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]
    assert np.all(np.isfinite(np_(out))) and np.all(np_(w)[0, :, 1] == 0.0)
    chunked = MultiHeadAttention(num_heads=2, key_dim=8, chunk_size=4, dtype=policy)
    assert np.all(np.isfinite(np_(chunked(QUERY, VALUE, attention_mask=mask))))


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_gradients_are_finite(chunk_size):
    layer = MultiHeadAttention(num_heads=2, key_dim=8, chunk_size=chunk_size)
    layer(QUERY, VALUE)
    mask = MASK.copy()
    mask[0, 1] = False

    def loss():
        return ops.sum(ops.square(layer(QUERY, VALUE, attention_mask=mask)))

    grads = trainable_gradients(layer.trainable_variables, loss)
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_dropout_only_in_training():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.5, seed=2)
    a = np_(layer(QUERY, VALUE))
    np.testing.assert_array_equal(a, np_(layer(QUERY, VALUE, training=False)))
    trained = np_(layer(QUERY, VALUE, training=True))
    assert not np.allclose(trained, a, atol=1e-4)
    # Like Keras, the returned weights are those before dropout.
    _, w = layer(QUERY, VALUE, training=True, return_attention_scores=True)
    np.testing.assert_allclose(np_(w).sum(-1), 1.0, rtol=1e-5)


def test_config_round_trip():
    layer = MultiHeadAttention(num_heads=3, key_dim=4, value_dim=5, chunk_size=64)
    clone = MultiHeadAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, key_dim=8), "`num_heads` must be a positive integer"),
        (dict(num_heads=2, key_dim=-1), "`key_dim` must be a positive integer"),
        (dict(num_heads=2, key_dim=8, dropout=2.0), r"`dropout` must be in \[0, 1\)"),
        (dict(num_heads=2, key_dim=8, attention_axes=(1, 2)), "attention_axes"),
        (dict(num_heads=2, key_dim=8, output_shape=(3, 4)), "output_shape"),
    ],
)
def test_invalid_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


def test_bad_inputs():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    with pytest.raises(ValueError, match=r"`query` must have rank 3.*\(2, 16\)"):
        layer(QUERY[:, 0], VALUE)
    with pytest.raises(ValueError, match=r"sequence length.*`key` \(3\).*\(7\)"):
        layer(QUERY, VALUE, key=VALUE[:, :3])
    layer(QUERY, VALUE)
    with pytest.raises(ValueError, match=r"`cache` must have shape.*\(2, 2, 5, 3, 8\)"):
        layer(QUERY, VALUE, cache=np.zeros((B, 2, T, 3, 8), "float32"))
