import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.ops import causal_mask, dot_product_attention
from keras_attention.utils.backend import value_and_grad
from tests import numpy_reference as ref

rng = np.random.default_rng(0)
B, T, S, N, H = 2, 5, 7, 3, 8
Q = rng.normal(size=(B, T, N, H)).astype("float32")
K = rng.normal(size=(B, S, N, H)).astype("float32")
V = rng.normal(size=(B, S, N, H)).astype("float32")
PAD = rng.random((B, 1, 1, S)) > 0.3


def test_matches_numpy_reference_with_weights():
    out, weights = dot_product_attention(Q, K, V, mask=PAD, return_weights=True)
    want_out, want_w = ref.multi_head_attention(Q, K, V, PAD)
    np.testing.assert_allclose(ops.convert_to_numpy(out), want_out, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), want_w, atol=1e-6)


def test_matches_keras_dot_product_attention():
    mask = np.broadcast_to(PAD, (B, N, T, S))
    ours = dot_product_attention(Q, K, V, mask=mask)
    theirs = keras.ops.dot_product_attention(Q, K, V, mask=mask)
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs), atol=1e-5
    )


def test_is_causal_matches_keras_and_explicit_mask():
    q = np.concatenate([Q, Q[:, :2]], axis=1)  # T == S for self-attention
    ours = dot_product_attention(q, K, V, is_causal=True)
    explicit = dot_product_attention(q, K, V, mask=causal_mask(S)[None, None])
    theirs = keras.ops.dot_product_attention(q, K, V, is_causal=True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours), ops.convert_to_numpy(explicit), atol=1e-6
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs), atol=1e-5
    )


def test_custom_scale():
    out = dot_product_attention(Q, K, V, scale=0.5)
    want, _ = ref.multi_head_attention(Q, K, V, scale=0.5)
    np.testing.assert_allclose(ops.convert_to_numpy(out), want, atol=1e-5)


def test_changing_masked_values_does_not_change_output():
    mask = np.ones((B, 1, 1, S), bool)
    mask[:, ..., -3:] = False
    v2, k2 = V.copy(), K.copy()
    v2[:, -3:] = 1e3
    k2[:, -3:] = -7.0
    a, wa = dot_product_attention(Q, K, V, mask=mask, return_weights=True)
    b, _ = dot_product_attention(Q, k2, v2, mask=mask, return_weights=True)
    np.testing.assert_allclose(ops.convert_to_numpy(a), ops.convert_to_numpy(b))
    assert np.all(ops.convert_to_numpy(wa)[..., -3:] == 0.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fully_masked_query_rows_are_zero_in_half_precision(dtype):
    mask = np.ones((B, 1, T, S), bool)
    mask[:, :, 0] = False
    q, k, v = (ops.cast(x, dtype) for x in (Q, K, V))
    out, w = dot_product_attention(q, k, v, mask=mask, return_weights=True)
    out = ops.convert_to_numpy(ops.cast(out, "float32"))
    assert np.all(np.isfinite(out))
    assert np.all(out[:, 0] == 0.0)
    assert np.all(ops.convert_to_numpy(ops.cast(w, "float32"))[:, :, 0] == 0.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_outputs_alone_match_the_weights_path_with_fully_masked_rows(dtype, is_causal):
    # Without weights the outputs are normalized last (float16 excepted); the
    # result and its gradients are those of normalizing the weights first.
    mask = np.ones((B, 1, T, S), bool) & PAD
    mask[:, :, 0] = False
    q, k, v = (ops.cast(x, dtype) for x in (Q, K, V))

    def run(return_weights):
        def loss(q, k, v):
            out = (
                dot_product_attention(
                    q, k, v, mask=mask, is_causal=is_causal, return_weights=True
                )[0]
                if return_weights
                else dot_product_attention(q, k, v, mask=mask, is_causal=is_causal)
            )
            weights = ops.arange(H, dtype="float32")
            return ops.sum(ops.cast(out, "float32") * weights)

        loss_value, grads = value_and_grad(loss)(q, k, v)
        return [
            ops.convert_to_numpy(ops.stop_gradient(ops.cast(x, "float32")))
            for x in (loss_value, *grads)
        ]

    outputs = ops.cast(
        dot_product_attention(q, k, v, mask=mask, is_causal=is_causal), "float32"
    )
    outputs = ops.convert_to_numpy(outputs)
    assert np.all(outputs[:, 0] == 0.0) and np.all(np.isfinite(outputs))
    tolerance = 1e-5 if dtype == "float32" else 5e-2
    for alone, with_weights in zip(run(False), run(True), strict=True):
        assert np.all(np.isfinite(alone))
        np.testing.assert_allclose(alone, with_weights, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_a_single_query_matches_the_same_query_among_several(dtype, return_weights):
    # One query (a decoding step) takes a multiply-and-sum path instead of
    # the matmuls; its outputs, weights and gradients are those of the same
    # query attending among others.
    mask = np.broadcast_to(PAD, (B, 1, T, S)).copy()
    mask[1, :, 0] = False  # a fully masked row

    def attend(q, k, v):
        result = dot_product_attention(
            q, k, v, mask=mask[:, :, : q.shape[1]], return_weights=return_weights
        )
        return result if return_weights else (result,)

    def first_row(q, k, v):
        out, *weights = attend(q, k, v)
        out = ops.cast(out[:, :1], "float32")
        loss = ops.sum(out * ops.arange(H, dtype="float32"))
        if weights:
            loss = loss + ops.sum(ops.cast(weights[0][:, :, :1], "float32") * 3.0)
        return loss

    q, k, v = (ops.cast(x, dtype) for x in (Q, K, V))
    single = attend(q[:, :1], k, v)
    several = attend(q, k, v)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for alone, among in zip(single, several, strict=True):
        alone = ops.convert_to_numpy(ops.cast(alone, "float32"))
        among = ops.convert_to_numpy(ops.cast(among, "float32"))
        among = among[:, :1] if alone.shape[1] == 1 else among[:, :, :1]
        np.testing.assert_allclose(alone, among, atol=tolerance, rtol=tolerance)
    assert np.all(ops.convert_to_numpy(ops.cast(single[0], "float32"))[1] == 0.0)
    _, single_grads = value_and_grad(first_row)(q[:, :1], k, v)
    _, several_grads = value_and_grad(first_row)(q, k, v)
    for alone, among in zip(single_grads[1:], several_grads[1:], strict=True):
        alone = ops.convert_to_numpy(ops.cast(alone, "float32"))
        among = ops.convert_to_numpy(ops.cast(among, "float32"))
        assert np.all(np.isfinite(alone))
        np.testing.assert_allclose(alone, among, atol=tolerance, rtol=tolerance)


def test_value_head_dim_may_differ():
    v = rng.normal(size=(B, S, N, 4)).astype("float32")
    assert tuple(dot_product_attention(Q, K, v).shape) == (B, T, N, 4)


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, message",
    [
        ((B, T, H), (B, S, N, H), (B, S, N, H), r"`query` must have rank 4"),
        ((B, T, N, H), (B, S, N, H + 1), (B, S, N, H), r"head dimension.*8.*9"),
        ((B, T, N, H), (B, S, N + 1, H), (B, S, N + 1, H), r"heads must divide"),
        ((B, T, N, H), (B, S, N, H), (B, S + 1, N, H), r"sequence length"),
    ],
)
def test_bad_shapes_are_rejected(q_shape, k_shape, v_shape, message):
    with pytest.raises(ValueError, match=message):
        dot_product_attention(
            np.zeros(q_shape, "float32"),
            np.zeros(k_shape, "float32"),
            np.zeros(v_shape, "float32"),
        )


def test_mask_of_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match=r"`mask` of shape \(2, 1, 1, 6\)"):
        dot_product_attention(Q, K, V, mask=np.ones((B, 1, 1, S - 1), bool))


def test_non_positive_chunk_size_is_rejected():
    with pytest.raises(ValueError, match="chunk_size"):
        dot_product_attention(Q, K, V, chunk_size=0)


@pytest.mark.parametrize("key_heads", [4, 2])
def test_a_few_queries_attend_as_many_queries_do(key_heads):
    # One query (a decoding step) attends by multiply-and-sum off JAX, more
    # by matmul: the same outputs, with grouped keys and a padding mask too.
    many = 12
    q = rng.normal(size=(B, many, 4, H)).astype("float32")
    keys = 10
    k = rng.normal(size=(B, keys, key_heads, H)).astype("float32")
    v = rng.normal(size=(B, keys, key_heads, H)).astype("float32")
    pad = rng.random((B, 1, 1, keys)) > 0.3
    together = dot_product_attention(q, k, v, mask=pad)
    for few in (1, 3, 8):
        alone = dot_product_attention(q[:, :few], k, v, mask=pad)
        np.testing.assert_allclose(
            ops.convert_to_numpy(alone),
            ops.convert_to_numpy(together)[:, :few],
            atol=1e-5,
        )
