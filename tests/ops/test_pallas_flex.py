"""The fused Pallas FlexAttention kernel (`keras_attention.ops.pallas_flex`),
run in Pallas' interpret mode, against the standard path of
`dot_product_attention`: outputs, log-sum-exp and every gradient (queries,
keys, values, `score_mod_inputs`, the log-sum-exp's own cotangent), for
every mod of `keras_attention.ops.mods` and one written here, and for the
gather-free `segment_ids`, `alibi_slopes` and `key_mask`."""

import re
from functools import partial

import keras
import numpy as np
import pytest

if keras.backend.backend() != "jax":
    pytest.skip(
        "the Pallas kernel runs on JAX only; the Keras backend is "
        f"{keras.backend.backend()}",
        allow_module_level=True,
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from keras import ops  # noqa: E402

from keras_attention.ops import alibi_slopes, dot_product_attention, mods  # noqa: E402
from keras_attention.ops.pallas_flex import flex_attention  # noqa: E402

BATCH, HEADS, KV_HEADS, DEPTH, BLOCK = 2, 4, 2, 8, 8
SCALE = DEPTH**-0.5
# Per dtype: the tolerance (absolute and relative) of every comparison. In
# bfloat16 both paths round the inputs, the weights and the outputs, each a
# little differently (the kernel accumulates in float32).
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}
# Tiles between documents 0 and 2 are empty in both rows, the others mixed.
SEGMENTS = np.array([[0] * 8 + [1] * 8 + [2] * 8, [0] * 6 + [1] * 10 + [2] * 8])


def _custom_score(score, b, h, q_idx, kv_idx):
    return score + 0.1 * ops.cast(q_idx % 3, score.dtype)


def _custom_mask(b, h, q_idx, kv_idx):
    return ops.not_equal((q_idx + 2 * kv_idx + b) % 5, 0)


# id: (query length, key length, query offset, score_mod, its inputs (made
# from a generator), mask_mod). Lengths of 13 and 21 leave the last tiles part
# padding (block size 8), which the kernel must hide whatever the map says.
CASES = {
    "causal": (24, 24, 0, None, None, mods.causal_mask_mod),
    "causal-offset-padded": (13, 21, 8, None, None, mods.causal_mask_mod),
    "sliding-window-causal": (16, 21, 5, None, None, mods.sliding_window_mask_mod(6)),
    "sliding-window-both-sides": (
        24,
        24,
        0,
        None,
        None,
        mods.sliding_window_mask_mod(6, causal=False),
    ),
    "prefix-lm": (24, 24, 0, None, None, mods.prefix_lm_mask_mod([5, 14])),
    "document": (24, 24, 0, None, None, mods.document_mask_mod(SEGMENTS)),
    "soft-cap-padded": (13, 21, 8, mods.soft_cap_score_mod(0.5), None, None),
    "alibi": (16, 24, 8, mods.alibi_score_mod(alibi_slopes(HEADS)), None, None),
    "relative-position-causal-padded": (
        13,
        21,
        8,
        mods.relative_position_score_mod(num_buckets=8, max_distance=16),
        lambda rng: (rng.normal(size=(8, HEADS)).astype("float32"),),
        mods.causal_mask_mod,
    ),
    "custom-score-and-mask": (24, 24, 0, _custom_score, None, _custom_mask),
}


def block_map_of(mask_mod, q_len, k_len, offset, segment_ids=None, key_mask=None):
    """The exact block map, from the mask on the whole grid (`mask_mod`, the
    segment ids and the key mask): per tile, 0 where no (b, h, query, key)
    attends, 2 where all do, else 1."""
    q_blocks, k_blocks = -(-q_len // BLOCK), -(-k_len // BLOCK)
    mask = np.ones((BATCH, HEADS, q_len, k_len), bool)
    if mask_mod is not None:
        grids = mods.index_grids(
            BATCH, HEADS, np.arange(q_len) + offset, np.arange(k_len)
        )
        mask = mask & np.asarray(mask_mod(*grids))
    if segment_ids is not None:
        mask = mask & same_document(*segment_ids)
    if key_mask is not None:
        mask = mask & key_mask[:, None, None, :]
    padding = ((0, q_blocks * BLOCK - q_len), (0, k_blocks * BLOCK - k_len))
    # Padding counts as attended for "all" and as hidden for "any": the
    # kernel masks it whatever the map says.
    tiles = (q_blocks, BLOCK, k_blocks, BLOCK)
    some = np.pad(mask.any(axis=(0, 1)), padding).reshape(tiles).any(axis=(1, 3))
    every = np.pad(mask.all(axis=(0, 1)), padding, constant_values=True)
    every = every.reshape(tiles).all(axis=(1, 3))
    return np.where(every, 2, np.where(some, 1, 0)).astype("int32")


def same_document(query_ids, key_ids):
    """The dense `(B, 1, T, S)` mask of `segment_ids`."""
    query_ids, key_ids = np.asarray(query_ids), np.asarray(key_ids)
    return (query_ids[:, :, None] == key_ids[:, None, :])[:, None]


def extra_arguments(names, q_len, k_len, offset):
    """`flex_attention`'s `segment_ids`, `alibi_slopes` and `key_mask` among
    `names` ("segments", "alibi", "padding"), for queries at `offset`."""
    found = {}
    if "segments" in names:  # the queries' ids: those of their positions
        found["segment_ids"] = (
            SEGMENTS[:, offset : offset + q_len],
            SEGMENTS[:, :k_len],
        )
    if "alibi" in names:
        found["alibi_slopes"] = np.asarray(alibi_slopes(HEADS), "float32")
    if "padding" in names:  # row 0 padded on the right, row 1 on the left
        key_mask = np.ones((BATCH, k_len), bool)
        key_mask[0, k_len - 5 :] = False
        key_mask[1, [0, 1, 2, 9]] = False
        found["key_mask"] = key_mask
    return found


def reference_arguments(extras, offset):
    """`extras` as `dot_product_attention` takes them: the key mask as a
    dense mask. So are the segment ids at an offset: the standard path looks
    the `(B, T)` query ids up at the absolute positions `offset + i` (its
    `document_mask_mod`), the kernel (as JAX's `SegmentIds`) at `i`."""
    found, masks = {"alibi_slopes": extras.get("alibi_slopes")}, []
    if "key_mask" in extras:
        masks.append(extras["key_mask"][:, None, None, :])
    if "segment_ids" in extras and offset:
        masks.append(same_document(*extras["segment_ids"]))
    elif "segment_ids" in extras:
        found["segment_ids"] = extras["segment_ids"]
    if masks:
        found["mask"] = jnp.asarray(np.logical_and.reduce(np.broadcast_arrays(*masks)))
    return found


def make_inputs(
    q_len, k_len, dtype, seed=0, kv_heads=KV_HEADS, depth=DEPTH, value_depth=DEPTH
):
    rng = np.random.default_rng(seed)
    shapes = {
        "q": (BATCH, q_len, HEADS, depth),
        "k": (BATCH, k_len, kv_heads, depth),
        "v": (BATCH, k_len, kv_heads, value_depth),
        "d_out": (BATCH, q_len, HEADS, value_depth),
        "d_lse": (BATCH, HEADS, q_len),
    }
    arrays = {name: rng.normal(size=shape) for name, shape in shapes.items()}
    arrays = {
        name: jnp.asarray(x, "float32" if name.startswith("d_") else dtype)
        for name, x in arrays.items()
    }
    return rng, arrays


def results(attention, x, inputs):
    """Outputs, log-sum-exp and the gradients of `sum(out * d_out) + sum(lse
    * d_lse)` with respect to q, k, v and the score mod's inputs."""
    (out, lse), pullback = jax.vjp(attention, x["q"], x["k"], x["v"], inputs)
    d_q, d_k, d_v, d_inputs = pullback((x["d_out"].astype(out.dtype), x["d_lse"]))
    found = {"out": out, "lse": lse, "dq": d_q, "dk": d_k, "dv": d_v}
    found.update({f"d_input{i}": g for i, g in enumerate(d_inputs)})
    return {name: np.asarray(value, "float32") for name, value in found.items()}


def run_both(case, dtype, block_map=None, seed=0, extras=(), **sizes):
    """Kernel and reference on the same inputs (`sizes`: those of
    `make_inputs`; `extras`: the names of `extra_arguments`), each as
    `results` gives them."""
    q_len, k_len, offset, score_mod, make_score_inputs, mask_mod = case
    rng, x = make_inputs(q_len, k_len, dtype, seed, **sizes)
    inputs = (
        ()
        if make_score_inputs is None
        else tuple(jnp.asarray(t) for t in make_score_inputs(rng))
    )
    extras = extra_arguments(extras, q_len, k_len, offset)
    if block_map is None:
        masks = {n: extras.get(n) for n in ("segment_ids", "key_mask")}
        block_map = block_map_of(mask_mod, q_len, k_len, offset, **masks)
    common = {"score_mod": score_mod, "mask_mod": mask_mod, "query_offset": offset}

    def kernel(q, k, v, inputs):
        return flex_attention(
            q,
            k,
            v,
            scale=x["q"].shape[-1] ** -0.5,
            block_map=jnp.asarray(block_map),
            block_size=BLOCK,
            score_mod_inputs=inputs,
            interpret=True,
            **common,
            **extras,
        )

    def reference(q, k, v, inputs):
        return dot_product_attention(
            q,
            k,
            v,
            scale=x["q"].shape[-1] ** -0.5,
            flash_attention=False,
            score_mod_inputs=inputs,
            return_lse=True,
            **common,
            **reference_arguments(extras, offset),
        )

    return results(kernel, x, inputs), results(reference, x, inputs)


def max_differences(found, expected):
    """The largest absolute difference of each result, scaled by the largest
    magnitude of the expected one (so that one tolerance serves all); -inf
    log-sum-exps must match exactly."""
    differences = {}
    for name, want in expected.items():
        got = found[name]
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert not np.isnan(got).any(), f"{name} has NaN"
        infinite = np.isinf(want)
        np.testing.assert_array_equal(np.isinf(got), infinite, err_msg=name)
        got, want = np.where(infinite, 0, got), np.where(infinite, 0, want)
        differences[name] = float(
            np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want)))
        )
    return differences


def assert_same(found, expected, dtype):
    differences = max_differences(found, expected)
    worst = {k: v for k, v in differences.items() if v > TOLERANCE[dtype]}
    assert not worst, f"beyond {TOLERANCE[dtype]}: {worst}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_matches_the_standard_path(case, dtype):
    found, expected = run_both(CASES[case], dtype)
    assert_same(found, expected, dtype)


# id: (a case as in CASES, the names of `extra_arguments`).
_ALL = ("segments", "alibi", "padding")
EXTRA_CASES = {
    "segments": ((24, 24, 0, None, None, None), ("segments",)),
    "segments-causal-padded": (
        (13, 21, 0, None, None, mods.causal_mask_mod),
        ("segments",),
    ),
    "segments-causal-offset": (CASES["causal-offset-padded"], ("segments",)),
    "alibi": ((16, 24, 8, None, None, None), ("alibi",)),
    "alibi-causal-offset-padded": (CASES["causal-offset-padded"], ("alibi",)),
    "padding": ((24, 24, 0, None, None, None), ("padding",)),
    "padding-causal-offset-padded": (CASES["causal-offset-padded"], ("padding",)),
    # ALiBi before the score mod (a soft cap), the masks ANDed with causal.
    "all-soft-cap-causal-padded": (
        (13, 21, 0, mods.soft_cap_score_mod(0.5), None, mods.causal_mask_mod),
        _ALL,
    ),
    # With T5's trained table: its gradient, beside the native arguments.
    "all-relative-position": (
        (24, 24, 0, *CASES["relative-position-causal-padded"][3:5], None),
        _ALL,
    ),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(EXTRA_CASES), ids=list(EXTRA_CASES))
def test_segments_alibi_and_padding_match_the_standard_path(case, dtype):
    base, extras = EXTRA_CASES[case]
    found, expected = run_both(base, dtype, extras=extras)
    assert_same(found, expected, dtype)


def test_alibi_slopes_are_per_query_head_with_one_key_value_head():
    sizes = {"kv_heads": 1, "depth": 6, "value_depth": 5}
    case = CASES["causal-offset-padded"]
    found, expected = run_both(case, "float32", extras=_ALL, **sizes)
    assert_same(found, expected, "float32")


def test_a_batch_row_of_padding_only_gives_zeros_and_lse_minus_inf():
    q_len, k_len, offset = 13, 21, 8
    key_mask = np.ones((BATCH, k_len), bool)
    key_mask[1] = False
    _, x = make_inputs(q_len, k_len, "float32")
    # The map (over the batch) keeps row 0's tiles: row 1 is masked inside.
    block_map = block_map_of(mods.causal_mask_mod, q_len, k_len, offset, None, key_mask)
    common = {"scale": SCALE, "mask_mod": mods.causal_mask_mod, "query_offset": offset}
    slopes = jnp.asarray(alibi_slopes(HEADS))

    def kernel(q, k, v, inputs):
        return flex_attention(
            q,
            k,
            v,
            block_map=block_map,
            block_size=BLOCK,
            alibi_slopes=slopes,
            key_mask=key_mask,
            interpret=True,
            **common,
        )

    def reference(q, k, v, inputs):
        return dot_product_attention(
            q,
            k,
            v,
            flash_attention=False,
            alibi_slopes=slopes,
            mask=key_mask[:, None, None, :],
            return_lse=True,
            **common,
        )

    found, expected = results(kernel, x, ()), results(reference, x, ())
    assert_same(found, expected, "float32")
    assert np.all(found["out"][1] == 0) and np.all(found["lse"][1] == -np.inf)
    assert np.all(found["dq"][1] == 0) and np.all(found["dk"][1] == 0)
    assert np.all(found["dv"][1] == 0)
    assert np.isfinite(found["lse"][0]).all()


def test_segments_alibi_and_padding_trace_no_gather():
    # The Triton lowering has no gather: these arguments must reach the
    # kernels (forward, dq, dk/dv) as tiles and scalar loads. The mods that
    # do the same by `ops.take` gather, so the test can tell them apart.
    _, x = make_inputs(13, 21, "float32")
    extras = extra_arguments(_ALL, 13, 21, 0)
    as_mods = {
        "mask_mod": mods.document_mask_mod(*extras["segment_ids"]),
        "score_mod": mods.alibi_score_mod(extras["alibi_slopes"]),
    }

    def jaxpr(**arguments):
        def loss(q, k, v):
            out, lse = flex_attention(
                q,
                k,
                v,
                scale=SCALE,
                block_map=np.ones((2, 3), "int32"),
                block_size=BLOCK,
                interpret=True,
                **arguments,
            )
            return jnp.sum(out) + jnp.sum(jnp.where(jnp.isinf(lse), 0.0, lse))

        traced = str(jax.make_jaxpr(jax.grad(loss, (0, 1, 2)))(x["q"], x["k"], x["v"]))
        assert traced.count("pallas_call") == 3  # the kernels' bodies are in it
        return traced

    gathers = re.compile(r"\bgather\[")
    assert not gathers.search(jaxpr(**extras))
    assert gathers.search(jaxpr(**as_mods))


@pytest.mark.parametrize("case", ["causal-offset-padded", "document"])
def test_a_map_of_partial_tiles_gives_the_same_result(case):
    q_len, k_len = CASES[case][:2]
    ones = np.ones((-(-q_len // BLOCK), -(-k_len // BLOCK)), "int32")
    exact, _ = run_both(CASES[case], "float32")
    masked_everywhere, _ = run_both(CASES[case], "float32", block_map=ones)
    for name, want in exact.items():
        got = masked_everywhere[name]
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=name)


def test_empty_tiles_are_never_read_and_full_tiles_never_masked():
    # Causal, 16 queries over 24 keys: no query sees the last block of keys.
    # NaN there reaches no output or gradient, since the tile is skipped; and
    # a map that calls every tile full applies no mask at all.
    _, x = make_inputs(16, 24, "float32")
    poison = x["k"].at[:, 16:].set(jnp.nan), x["v"].at[:, 16:].set(jnp.nan)

    def attend(block_map, q, k, v):
        return flex_attention(
            q,
            k,
            v,
            scale=SCALE,
            block_map=block_map,
            block_size=BLOCK,
            mask_mod=mods.causal_mask_mod,
            interpret=True,
        )

    causal = block_map_of(mods.causal_mask_mod, 16, 24, 0)
    assert causal[:, 2].tolist() == [0, 0]
    (out, lse), pullback = jax.vjp(partial(attend, causal), x["q"], *poison)
    grads = pullback((x["d_out"], x["d_lse"]))
    for result in (out, lse, *grads):
        assert not np.isnan(result).any()
    unmasked = dot_product_attention(
        x["q"], x["k"], x["v"], scale=SCALE, flash_attention=False
    )
    full = attend(np.full((2, 3), 2, "int32"), x["q"], x["k"], x["v"])[0]
    np.testing.assert_allclose(full, unmasked, atol=1e-5, rtol=1e-5)


def test_a_row_that_sees_no_key_gives_zeros_and_lse_minus_inf():
    # Queries 3 and 11 see no key; the rest see the causal past.
    def mask_mod(b, h, q_idx, kv_idx):
        hidden = ops.logical_or(ops.equal(q_idx, 3), ops.equal(q_idx, 11))
        return ops.logical_and(ops.logical_not(hidden), q_idx >= kv_idx)

    case = (16, 24, 0, mods.soft_cap_score_mod(2.0), None, mask_mod)
    found, expected = run_both(case, "float32")
    assert_same(found, expected, "float32")
    assert np.all(found["out"][:, [3, 11]] == 0)
    assert np.all(found["lse"][:, :, [3, 11]] == -np.inf)
    assert np.all(found["dq"][:, [3, 11]] == 0)


def test_the_gradient_reaches_an_array_in_the_closure():
    # ALiBi's slopes, closed over and differentiated: `jax.closure_convert`
    # makes them an input of the kernel and of its gradient.
    _, x = make_inputs(16, 24, "float32")
    offset, block_map = 8, np.full((2, 3), 2, "int32")

    def loss(attention, slopes):
        out = attention(mods.alibi_score_mod(slopes))
        return jnp.sum(out * x["d_out"])

    def kernel(score_mod):
        return flex_attention(
            x["q"],
            x["k"],
            x["v"],
            scale=SCALE,
            block_map=block_map,
            block_size=BLOCK,
            score_mod=score_mod,
            query_offset=offset,
            interpret=True,
        )[0]

    def reference(score_mod):
        return dot_product_attention(
            x["q"],
            x["k"],
            x["v"],
            scale=SCALE,
            flash_attention=False,
            score_mod=score_mod,
            query_offset=offset,
        )

    slopes = jnp.asarray(alibi_slopes(HEADS))
    found = jax.grad(lambda s: loss(kernel, s))(slopes)
    expected = jax.grad(lambda s: loss(reference, s))(slopes)
    np.testing.assert_allclose(found, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
    "kv_heads, depth, value_depth",
    [(HEADS, 8, 8), (1, 6, 5)],
    ids=["multi-head", "multi-query-odd-head-sizes"],
)
def test_head_groups_and_head_sizes(kv_heads, depth, value_depth):
    # Head sizes that are no power of two are padded inside (for Triton).
    sizes = {"kv_heads": kv_heads, "depth": depth, "value_depth": value_depth}
    found, expected = run_both(CASES["causal-offset-padded"], "float32", **sizes)
    assert_same(found, expected, "float32")


def test_under_jit_with_a_traced_map_offset_and_document_ids():
    # The block map, the offset and the arrays a mod closes over may all be
    # traced: the ids become a kernel input, not a constant.
    _, x = make_inputs(16, 24, "float32")
    offset = 8

    def attend(attention, segments, block_map, offset):
        return attention(mods.document_mask_mod(segments), block_map, offset)

    def kernel(mask_mod, block_map, offset):
        return flex_attention(
            x["q"],
            x["k"],
            x["v"],
            scale=SCALE,
            block_map=block_map,
            block_size=BLOCK,
            mask_mod=mask_mod,
            query_offset=offset,
            interpret=True,
        )

    def reference(mask_mod, block_map, offset):
        return dot_product_attention(
            x["q"],
            x["k"],
            x["v"],
            scale=SCALE,
            flash_attention=False,
            mask_mod=mask_mod,
            query_offset=offset,
            return_lse=True,
        )

    document_map = block_map_of(mods.document_mask_mod(SEGMENTS), 16, 24, offset)
    assert document_map.tolist() == [[1, 2, 0], [0, 0, 2]]  # each kind of tile
    args = (jnp.asarray(SEGMENTS), jnp.asarray(document_map), jnp.int32(offset))
    found = jax.jit(lambda *a: attend(kernel, *a))(*args)
    expected = attend(reference, SEGMENTS, None, offset)
    for got, want in zip(found, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_a_block_map_of_the_wrong_shape_is_refused():
    _, x = make_inputs(16, 24, "float32")
    with pytest.raises(ValueError, match=r"\(2, 3\).*received.*\(3, 3\)"):
        flex_attention(
            x["q"],
            x["k"],
            x["v"],
            scale=SCALE,
            block_size=BLOCK,
            block_map=np.ones((3, 3), "int32"),
            interpret=True,
        )
