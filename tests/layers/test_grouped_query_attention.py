import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import GroupedQueryAttention, MultiHeadAttention
from tests import numpy_reference as ref
from tests.keras_versions import skip_unless_keras_accepts
from tests.layer_test import (
    decode_token_by_token,
    each_document_alone,
    run_layer_test,
)

rng = np.random.default_rng(0)
B, T, S, D = 2, 6, 9, 16
QUERY = rng.normal(size=(B, T, D)).astype("float32")
VALUE = rng.normal(size=(B, S, D)).astype("float32")
MASK = rng.random((B, T, S)) > 0.3
MASK[..., 0] = True


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


CONFIGS = {
    "grouped": dict(head_dim=4, num_query_heads=4, num_key_value_heads=2),
    "multi_query": dict(head_dim=4, num_query_heads=4, num_key_value_heads=1),
    "gate_no_bias": dict(
        head_dim=4,
        num_query_heads=4,
        num_key_value_heads=2,
        use_gate=True,
        use_bias=False,
    ),
    "sliding_window": dict(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, sliding_window=3
    ),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("use_causal_mask", [False, True])
def test_same_outputs_as_keras_after_loading_its_weights(config, use_causal_mask):
    skip_unless_keras_accepts(keras.layers.GroupQueryAttention, **CONFIGS[config])
    theirs = keras.layers.GroupQueryAttention(**CONFIGS[config])
    kwargs = dict(attention_mask=MASK, use_causal_mask=use_causal_mask)
    want, want_w = theirs(QUERY, VALUE, return_attention_scores=True, **kwargs)
    ours = GroupedQueryAttention.from_keras(theirs)
    got, got_w = ours(QUERY, VALUE, return_attention_scores=True, **kwargs)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)
    np.testing.assert_allclose(np_(got_w), np_(want_w), atol=1e-6)
    # Without weights asked for, the op groups the heads itself.
    np.testing.assert_allclose(np_(ours(QUERY, VALUE, **kwargs)), np_(want), atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "bfloat16", "float32"])
def test_from_keras_keeps_the_dtype_policy(policy):
    theirs = keras.layers.GroupQueryAttention(**CONFIGS["grouped"], dtype=policy)
    want = theirs(QUERY, VALUE, use_causal_mask=True)
    ours = GroupedQueryAttention.from_keras(theirs)
    assert ours.dtype_policy.name == policy
    got = ours(QUERY, VALUE, use_causal_mask=True)
    assert keras.backend.standardize_dtype(got.dtype) == (
        keras.backend.standardize_dtype(want.dtype)
    )
    np.testing.assert_allclose(np_(got), np_(want), atol=2e-2)
    explicit = GroupedQueryAttention.from_keras(theirs, dtype="float32")
    assert explicit.dtype_policy.name == "float32"


def test_weights_keep_keras_order_and_shapes():
    skip_unless_keras_accepts(keras.layers.GroupQueryAttention, use_gate=True)
    theirs = keras.layers.GroupQueryAttention(**CONFIGS["gate_no_bias"])
    theirs(QUERY, VALUE)
    ours = GroupedQueryAttention(**CONFIGS["gate_no_bias"])
    ours(QUERY, VALUE)
    assert [w.shape for w in ours.weights] == [w.shape for w in theirs.weights]
    assert tuple(ours._key_dense.kernel.shape) == (D, 2, 4)


def test_config_is_keras_config():
    theirs = keras.layers.GroupQueryAttention(**CONFIGS["grouped"], dropout=0.1)
    ours = GroupedQueryAttention(**CONFIGS["grouped"], dropout=0.1)
    got, want = ours.get_config(), theirs.get_config()
    assert {k: got[k] for k in want if k != "name"} == {
        k: v for k, v in want.items() if k != "name"
    }
    # What an older Keras lacks, ours keeps too.
    assert set(got) - set(want) <= {"use_gate", "sliding_window"}
    restored = GroupedQueryAttention.from_config(got)
    assert restored.num_repeats == 2 and restored.head_dim == 4
    forced = GroupedQueryAttention(**CONFIGS["grouped"], flash_attention=False)
    assert forced.get_config()["flash_attention"] is False


def test_mha_with_key_value_heads_is_the_same_layer():
    gqa = GroupedQueryAttention(**CONFIGS["grouped"])
    want = np_(gqa(QUERY, VALUE, use_causal_mask=True))
    mha = MultiHeadAttention(num_heads=4, key_dim=4, num_key_value_heads=2)
    mha(QUERY, VALUE)
    mha.set_weights(gqa.get_weights())
    got = np_(mha(QUERY, VALUE, use_causal_mask=True))
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_matches_numpy_with_repeated_key_value_heads():
    layer = GroupedQueryAttention(**CONFIGS["grouped"], use_bias=False)
    got = np_(layer(QUERY, VALUE))
    wq, wk, wv, wo = (np_(w) for w in layer.weights)
    q = np.einsum("btd,dnh->btnh", QUERY, wq)
    k = np.einsum("bsd,dnh->bsnh", VALUE, wk)
    v = np.einsum("bsd,dnh->bsnh", VALUE, wv)
    heads = ref.grouped_attention(q, k, v)
    np.testing.assert_allclose(got, np.einsum("btnh,nhd->btd", heads, wo), atol=1e-5)


@pytest.mark.parametrize("use_causal_mask", [False, True])
def test_chunked_path_gives_the_standard_result(use_causal_mask):
    layer = GroupedQueryAttention(**CONFIGS["multi_query"])
    x = rng.normal(size=(B, 13, D)).astype("float32")
    want = np_(layer(x, x, use_causal_mask=use_causal_mask))
    chunked = GroupedQueryAttention.from_config({**layer.get_config(), "chunk_size": 4})
    chunked(x, x)
    chunked.set_weights(layer.get_weights())
    got = np_(chunked(x, x, use_causal_mask=use_causal_mask))
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_cache_holds_only_the_key_value_heads_and_decodes_like_one_pass():
    layer = GroupedQueryAttention(**CONFIGS["grouped"])
    x = rng.normal(size=(B, T, D)).astype("float32")
    full = np_(layer(x, x, use_causal_mask=True))
    cache = layer.initial_cache(B, T)
    assert tuple(cache.shape) == (B, 2, T, 2, 4)  # half a multi-head cache
    decoded, cache = decode_token_by_token(layer, x, cache)
    np.testing.assert_allclose(decoded, full, atol=1e-5)


def test_a_cache_with_every_head_is_refused():
    layer = GroupedQueryAttention(**CONFIGS["grouped"])
    layer(QUERY, QUERY)
    cache = ops.zeros((B, 2, T, 4, 4))
    with pytest.raises(ValueError, match=r"num_key_value_heads=2.*received"):
        layer(QUERY[:, :1], QUERY[:, :1], cache=cache, cache_update_index=0)


def test_a_subclass_written_for_keras_gets_repeated_heads():
    seen = {}

    class Sub(GroupedQueryAttention):
        def _compute_attention(
            self, query, key, value, attention_mask=None, training=None
        ):
            seen["key_heads"] = key.shape[2]
            return super()._compute_attention(
                query, key, value, attention_mask, training
            )

    layer = Sub(**CONFIGS["grouped"])
    want = GroupedQueryAttention(**CONFIGS["grouped"])
    want(QUERY, VALUE)
    layer(QUERY, VALUE)
    layer.set_weights(want.get_weights())
    got = np_(layer(QUERY, VALUE, attention_mask=MASK))
    assert seen["key_heads"] == 4
    want = np_(want(QUERY, VALUE, attention_mask=MASK))
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"chunk_size": 4},
        {"attention_positions": "rotary"},
        {"attention_positions": "relative"},
    ],
    ids=["standard", "chunked", "rotary", "relative"],
)
def test_keeps_the_layer_contract(options):
    mask = MASK.copy()
    mask[0, 1] = False
    value = rng.normal(size=(B, S, D)).astype("float32")
    run_layer_test(
        GroupedQueryAttention,
        {**CONFIGS["grouped"], "dropout": 0.1, **options},
        {"query": QUERY, "value": value},
        {"return_attention_scores": True},
        expected_output_shape=[(B, T, D), (B, 4, T, S)],
        masks={"attention_mask": mask},
        masked_zeros=lambda out: out[1][0, :, 1],
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_key_value_heads": 3}, "must divide `num_heads`.*num_heads=4"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
    ],
)
def test_invalid_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GroupedQueryAttention(**{**CONFIGS["grouped"], **kwargs})


def test_query_and_value_sizes_must_match():
    layer = GroupedQueryAttention(**CONFIGS["grouped"])
    with pytest.raises(ValueError, match=r"must be equal.*\(2, 4, 8\).*\(2, 2, 7\)"):
        layer.compute_output_shape((2, 4, 8), (2, 2, 7))


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_packed_rows_match_each_document_alone(chunk_size, causal):
    x = rng.normal(size=(2, 8, D)).astype("float32")
    ids = np.array([[1, 1, 1, 2, 2, 2, 2, 2], [7, 7, 3, 3, 3, 3, 3, 0]])
    layer = GroupedQueryAttention(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, chunk_size=chunk_size
    )
    packed = np_(layer(x, x, use_causal_mask=causal, segment_ids=ids))
    alone = each_document_alone(lambda d: layer(d, d, use_causal_mask=causal), x, ids)
    np.testing.assert_allclose(packed, alone, atol=2e-6)
