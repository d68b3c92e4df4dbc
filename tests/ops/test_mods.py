"""Score and mask functions, packed sequences, queries at an offset and the
log-sum-exp of dot_product_attention, on the standard and the chunked path."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import (
    alibi_slopes,
    dot_product_attention,
    mods,
    relative_position_buckets,
    sliding_window_mask,
)
from keras_attention.utils.backend import compile_function, value_and_grad
from tests.conftest import trainable_gradients
from tests.layer_test import each_document_alone

rng = np.random.default_rng(3)
B, T, N, N_KV, H = 2, 21, 4, 2, 8  # 21: the last tile of 4 or 8 is padded
Q = rng.normal(size=(B, T, N, H)).astype("float32")
K = rng.normal(size=(B, T, N_KV, H)).astype("float32")
V = rng.normal(size=(B, T, N_KV, 5)).astype("float32")
SEGMENTS = np.array([[0] * 7 + [1] * 9 + [2] * 5, [4] * 15 + [9] * 6], "int32")
TABLE = rng.normal(size=(8, N)).astype("float32")
PATHS = [{}, {"chunk_size": 4}, {"chunk_size": 8}]


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def close(got, want, atol=2e-6):
    np.testing.assert_allclose(np_(got), np_(want), atol=atol)


def same_document():
    return (SEGMENTS[:, :, None] == SEGMENTS[:, None, :])[:, None]


def t5_bias(table):
    buckets = relative_position_buckets(T, T, 8, 16, True)
    return ops.transpose(ops.take(table, buckets, axis=0), (2, 0, 1))[None]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("mod_args", "builtin_args"),
    [
        ({"mask_mod": mods.causal_mask_mod}, {"is_causal": True}),
        (
            {"mask_mod": mods.sliding_window_mask_mod(5)},
            {"is_causal": True, "sliding_window": 5},
        ),
        (
            {"mask_mod": mods.sliding_window_mask_mod(6, causal=False)},
            {"sliding_window": 6},
        ),
        (
            {"score_mod": mods.alibi_score_mod(alibi_slopes(N))},
            {"alibi_slopes": alibi_slopes(N)},
        ),
        (
            {"score_mod": mods.soft_cap_score_mod(2.0)},
            {"attn_logits_soft_cap": 2.0},
        ),
        ({"mask_mod": mods.document_mask_mod(SEGMENTS)}, {"segment_ids": SEGMENTS}),
    ],
)
def test_each_mod_equals_its_builtin_argument(mod_args, builtin_args, path):
    close(
        dot_product_attention(Q, K, V, **mod_args, **path),
        dot_product_attention(Q, K, V, **builtin_args),
    )


@pytest.mark.parametrize("path", PATHS)
def test_packed_rows_equal_each_document_alone(path):
    got = np_(
        dot_product_attention(Q, K, V, is_causal=True, segment_ids=SEGMENTS, **path)
    )
    alone = each_document_alone(
        lambda q, k, v: dot_product_attention(q, k, v, is_causal=True),
        (Q, K, V),
        SEGMENTS,
    )
    close(got, alone)


@pytest.mark.parametrize("path", PATHS)
def test_dense_masks_equal_their_mask_mods(path):
    prefix = np.array([5, 12], "int32")
    positions = np.arange(T)
    causal = positions[:, None] >= positions[None, :]
    prefix_lm = causal[None, None] | (positions < prefix[:, None])[:, None, None, :]
    close(
        dot_product_attention(
            Q, K, V, mask_mod=mods.prefix_lm_mask_mod(prefix), **path
        ),
        dot_product_attention(Q, K, V, mask=prefix_lm),
    )
    close(
        dot_product_attention(Q, K, V, segment_ids=SEGMENTS, **path),
        dot_product_attention(Q, K, V, mask=same_document()),
    )


@pytest.mark.parametrize("path", PATHS)
def test_t5_score_mod_equals_the_dense_bias(path):
    score_mod = mods.relative_position_score_mod(8, 16, True)
    got = dot_product_attention(
        Q, K, V, score_mod=score_mod, score_mod_inputs=(TABLE,), **path
    )
    close(got, dot_product_attention(Q, K, V, bias=t5_bias(TABLE)), atol=3e-6)


@pytest.mark.parametrize("chunk_size", [4, 8])
def test_chunked_gradients_equal_the_standard_path_with_every_mod(chunk_size):
    # The bias table reaches the scores only through the score mod: its
    # gradient on the chunked path comes from differentiating the mod tile by
    # tile in the hand-written backward pass.
    score_mod = mods.relative_position_score_mod(8, 16, True)

    def loss(options):
        def fn(query, key, value, table):
            outputs = dot_product_attention(
                query,
                key,
                value,
                is_causal=True,
                attn_logits_soft_cap=3.0,
                segment_ids=SEGMENTS,
                score_mod=score_mod,
                score_mod_inputs=(table,),
                **options,
            )
            return ops.sum(outputs * outputs)

        return fn

    args = [ops.convert_to_tensor(x) for x in (Q, K, V, TABLE)]
    want_loss, want = value_and_grad(loss({}))(*args)
    got_loss, got = value_and_grad(loss({"chunk_size": chunk_size}))(*args)
    # A sum of hundreds of squares (in the hundreds): the compiled program may
    # add them in another order, which float32 rounds to a relative 1e-7 or so.
    np.testing.assert_allclose(np_(got_loss), np_(want_loss), rtol=2e-6)
    for g, w in zip(got, want, strict=True):
        close(g, w, atol=2e-5)
    assert np.abs(np_(got[3])).sum() > 0  # the table is trained


@pytest.mark.parametrize("path", PATHS)
def test_log_sum_exp_merges_two_halves_of_the_keys_exactly(path):
    split = 9
    outputs, lse = dot_product_attention(Q, K, V, return_lse=True, **path)
    first, lse_first = dot_product_attention(
        Q, K[:, :split], V[:, :split], return_lse=True, **path
    )
    second, lse_second = dot_product_attention(
        Q, K[:, split:], V[:, split:], return_lse=True, **path
    )
    merged_lse = np.logaddexp(np_(lse_first), np_(lse_second))
    close(merged_lse, lse, atol=2e-6)

    def weight(part_lse):
        return np.exp(np_(part_lse) - merged_lse).transpose(0, 2, 1)[..., None]

    merged = np_(first) * weight(lse_first) + np_(second) * weight(lse_second)
    close(merged, outputs)


@pytest.mark.parametrize("path", PATHS)
def test_log_sum_exp_is_minus_infinity_for_a_query_that_sees_no_key(path):
    mask = np.ones((B, 1, T, T), bool)
    mask[0, :, 3] = False
    outputs, lse = dot_product_attention(Q, K, V, mask=mask, return_lse=True, **path)
    assert np.all(np.isneginf(np_(lse)[0, :, 3]))
    assert np.all(np.isfinite(np_(lse)[1]))
    assert np.all(np_(outputs)[0, 3] == 0.0)


def test_gradient_through_the_log_sum_exp_matches_the_standard_path():
    def loss(options):
        def fn(query, key, value):
            outputs, lse = dot_product_attention(
                query, key, value, is_causal=True, return_lse=True, **options
            )
            return ops.sum(outputs) + ops.sum(ops.square(lse))

        return fn

    args = [ops.convert_to_tensor(x) for x in (Q, K, V)]
    _, want = value_and_grad(loss({}))(*args)
    _, got = value_and_grad(loss({"chunk_size": 8}))(*args)
    for g, w in zip(got, want, strict=True):
        close(g, w, atol=2e-5)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "options",
    [
        {"is_causal": True},
        {"is_causal": True, "sliding_window": 4},
        {"is_causal": True, "alibi_slopes": alibi_slopes(N)},
        {"mask_mod": mods.causal_mask_mod},
        {"is_causal": True, "segment_ids": SEGMENTS},
    ],
    ids=lambda options: "+".join(sorted(options)),
)
def test_queries_at_an_offset_equal_the_last_rows_of_the_whole(options, path):
    # Prefilling a prompt over a cache: the new queries see the cached keys
    # and each other causally, aligned to the lower right. Their segment ids
    # are one per query (a bug read them at the absolute position).
    offset = 13
    whole = np_(dot_product_attention(Q, K, V, **options))
    if "segment_ids" in options:
        options = {**options, "segment_ids": (SEGMENTS[:, offset:], SEGMENTS)}
    part = dot_product_attention(
        Q[:, offset:], K, V, query_offset=offset, **options, **path
    )
    close(part, whole[:, offset:])


def test_mods_and_offset_compile_with_xla():
    score_mod = mods.relative_position_score_mod(8, 16, True)

    def loss(query, key, value, table):
        outputs = dot_product_attention(
            query,
            key,
            value,
            is_causal=True,
            chunk_size=8,
            query_offset=ops.convert_to_tensor(0, "int32"),
            segment_ids=SEGMENTS,
            score_mod=score_mod,
            score_mod_inputs=(table,),
        )
        return ops.sum(outputs * outputs)

    args = [ops.convert_to_tensor(x) for x in (Q, K, V, TABLE)]
    want_loss, want = value_and_grad(loss)(*args)
    got_loss, got = compile_function(value_and_grad(loss))(*args)
    # A sum of hundreds of squares (in the hundreds): the compiled program may
    # add them in another order, which float32 rounds to a relative 1e-7 or so.
    np.testing.assert_allclose(np_(got_loss), np_(want_loss), rtol=2e-6)
    for g, w in zip(got, want, strict=True):
        close(g, w, atol=2e-5)


def test_keras_positional_order_puts_the_bias_fourth():
    bias = rng.normal(size=(B, N, T, T)).astype("float32")
    mask = np.asarray(sliding_window_mask(T, T, 3))
    close(
        dot_product_attention(Q, K, V, bias, mask, 0.5, True),
        dot_product_attention(Q, K, V, bias=bias, mask=mask, scale=0.5, is_causal=True),
    )


def test_flash_attention_true_takes_the_memory_efficient_path():
    with pytest.raises(ValueError, match="never materializes"):
        dot_product_attention(Q, K, V, flash_attention=True, return_weights=True)
    close(
        dot_product_attention(Q, K, V, flash_attention=True, is_causal=True),
        dot_product_attention(Q, K, V, flash_attention=False, is_causal=True),
    )


def test_mixed_dtypes_give_the_common_dtype():
    outputs = dot_product_attention(Q.astype("float16"), K, V)
    assert ops.convert_to_numpy(outputs).dtype == np.float32


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"mask_mod": lambda b, h, q, kv: ops.cast(q >= kv, "float32")},
            r"boolean tensor .* received dtype float32",
        ),
        (
            {"mask_mod": lambda b, h, q, kv: ops.ones((3, 1, 1, 1), "bool")},
            r"broadcasts to .* received dtype bool and shape \(3, 1, 1, 1\)",
        ),
        (
            {"score_mod": lambda s, b, h, q, kv: s[..., :1]},
            r"shape of `score`.* received dtype float32 and shape",
        ),
        ({"score_mod_inputs": (TABLE,)}, "no `score_mod`"),
        ({"mask_mod": "causal"}, "must be a function; received str"),
        ({"segment_ids": SEGMENTS.astype("float32")}, "integer ids .* float32"),
        ({"segment_ids": SEGMENTS[:, :5]}, r"received shape \(2, 5\)"),
        ({"segment_ids": (SEGMENTS, SEGMENTS, SEGMENTS)}, "a sequence of 3"),
        ({"flash_attention": False, "chunk_size": 8}, "pass one of them"),
        ({"attn_logits_soft_cap": -1.0}, "positive number; received -1.0"),
        ({"flash_attention": True, "bias": np.zeros((T, T), "float32")}, "score_mod"),
    ],
)
@pytest.mark.parametrize("path", [{}, {"chunk_size": 8}])
def test_bad_mods_and_ids_are_named(options, message, path):
    if "chunk_size" in options or "flash_attention" in options:
        path = {}
    with pytest.raises(ValueError, match=message):
        dot_product_attention(Q, K, V, **options, **path)


def test_a_score_mod_closing_over_a_trainable_table_on_the_chunked_path():
    # JAX hoists what the mod reads from its closure into the custom
    # gradient's inputs (exact gradients); TensorFlow and PyTorch cannot,
    # and say to pass the table in `score_mod_inputs`.
    table = keras.Variable(TABLE)
    t5 = mods.relative_position_score_mod(8, 16, True)

    def closing_over(score, b, h, q_idx, kv_idx):
        return t5(score, b, h, q_idx, kv_idx, table)

    def loss(options):
        return lambda: ops.sum(
            ops.square(
                dot_product_attention(Q, K, V, score_mod=closing_over, **options)
            )
        )

    want = trainable_gradients([table], loss({}))
    if keras.backend.backend() != "jax":
        with pytest.raises(ValueError, match="pass it in `score_mod_inputs`"):
            trainable_gradients([table], loss({"chunk_size": 8}))
        return
    (got,) = trainable_gradients([table], loss({"chunk_size": 8}))
    close(got, want[0], atol=2e-5)
