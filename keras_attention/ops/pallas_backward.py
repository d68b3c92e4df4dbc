"""The backward pass of the Pallas kernel (`keras_attention.ops.pallas_flex`):
each tile's weights recomputed from the saved log-sum-exp (FlashAttention's
recurrence), in two kernels: one program per block of queries for the
gradients of the queries and of the float `score_mod_inputs`, one per block
of keys and key/value head for those of the keys and values, summed over the
query heads that share them.

This module needs JAX: only `pallas_flex` imports it.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from keras_attention.ops.pallas_geometry import (
    _call,
    _data_specs,
    _group_rows,
    _kv_rows,
    _row_stats,
    _tiles,
)
from keras_attention.ops.pallas_tiles import (
    _dropped,
    _probabilities,
    _Tile,
    _to_kernel,
    _unseen_zeroed,
    _visit,
)


def _dq_kernel(
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, data, offset_ref, *refs, geo, mods
):
    """Program `(b, h, i)`: the gradient of block `i` of the queries of head
    `h`, and its own partial sums of the float `score_mod_inputs`' gradients."""
    n_mods = len(mods.metas)
    lists, mod_refs = refs[:4], refs[4 : 4 + n_mods]
    dq_ref, *d_input_refs = refs[4 + n_mods :]
    b, h, i = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    tile = _Tile(geo, mods, mod_refs, b, offset_ref, data)
    q, do = q_ref[...], do_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    trained = [tile.inputs[t] for t in mods.trained]

    def body(j, masked, carry):
        dq, d_inputs = carry
        keep = tile.keep(h, i, j, masked, rows=True)
        k = _unseen_zeroed(k_ref[pl.ds(j * geo.block, geo.block), :], keep, masked)
        v = _unseen_zeroed(v_ref[pl.ds(j * geo.block, geo.block), :], keep, masked)
        s, pullback = jax.vjp(
            lambda raw, *xs: tile.score(raw, h, i, j, xs), tile.raw(q, k), *trained
        )
        p = _probabilities(s, keep, lse)
        dp = jnp.dot(do, v.T, preferred_element_type=jnp.float32)
        dp = _dropped(dp, tile.dropout(h, i, j))
        d_raw, *d_xs = pullback(p * (dp - delta[:, None]))
        dq = dq + jnp.dot(d_raw.astype(k.dtype), k, preferred_element_type=jnp.float32)
        return dq, [
            a + g.astype(jnp.float32) for a, g in zip(d_inputs, d_xs, strict=True)
        ]

    carry = (
        jnp.zeros((geo.block, geo.depth_pad), jnp.float32),
        [jnp.zeros(x.shape, jnp.float32) for x in trained],
    )
    dq, d_inputs = _visit(lists, i, body, carry)
    dq_ref[...] = (dq * geo.scale).astype(dq_ref.dtype)
    # One partial sum per program, summed outside: programs write no shared
    # memory, so no atomics are needed.
    for ref, grad in zip(d_input_refs, d_inputs, strict=True):
        ref[...] = grad.reshape(ref.shape)


def _dkv_kernel(
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, data, offset_ref, *refs, geo, mods
):
    """Program `(b, n, j)`: the gradients of block `j` of the keys and values
    of key/value head `n`, summed over the query heads that share it."""
    lists, mod_refs, (dk_ref, dv_ref) = refs[:4], refs[4:-2], refs[-2:]
    b, kv_head, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    tile = _Tile(geo, mods, mod_refs, b, offset_ref, data)
    k, v = k_ref[...], v_ref[...]

    def head(r, carry):
        # The query heads that share this key/value head add into one dk, dv.
        h = kv_head * geo.groups + r

        def body(i, masked, carry):
            dk, dv = carry
            rows = pl.ds(i * geo.block, geo.block)
            q, do = q_ref[rows, r, :], do_ref[rows, r, :]
            lse, delta = lse_ref[r, rows], delta_ref[r, rows]
            keep = tile.keep(h, i, j, masked, rows=True)
            k_seen = _unseen_zeroed(k, keep, masked)
            s, pullback = jax.vjp(
                lambda raw: tile.score(raw, h, i, j), tile.raw(q, k_seen)
            )
            p = _probabilities(s, keep, lse)
            # Dropout M / (1 - r): dV = (P M)^T dO, dP = (dO V^T) M.
            factors = tile.dropout(h, i, j)
            dv = dv + jnp.dot(
                _dropped(p, factors).T.astype(do.dtype),
                do,
                preferred_element_type=jnp.float32,
            )
            v_seen = _unseen_zeroed(v, keep, masked)
            dp = jnp.dot(do, v_seen.T, preferred_element_type=jnp.float32)
            dp = _dropped(dp, factors)
            (d_raw,) = pullback(p * (dp - delta[:, None]))
            dk = dk + jnp.dot(
                d_raw.T.astype(q.dtype), q, preferred_element_type=jnp.float32
            )
            return dk, dv

        return _visit(lists, j, body, carry)

    dk, dv = lax.fori_loop(
        0,
        geo.groups,
        head,
        (
            jnp.zeros((geo.block, geo.depth_pad), jnp.float32),
            jnp.zeros((geo.block, geo.value_pad), jnp.float32),
        ),
    )
    dk_ref[...] = (dk * geo.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _backward(geo, mods, q, k, v, inputs, statics, out, lse, d_out, d_lse):
    """`(dq, dk, dv, d_inputs)` from the residuals of the forward pass and the
    cotangents of `(out, lse)`; None in `d_inputs` for the inputs that are not
    float."""
    (offset, *lists), consts, data = statics
    arrays = [_to_kernel(x) for x in (*inputs, *consts)]
    q_rows, k_rows, depth, value = q.shape[1], k.shape[1], geo.depth_pad, geo.value_pad
    # rowsum(dO * O) - dlse: what dS = P * (dP - delta) subtracts per row; with
    # the lse's own cotangent, the lse's gradient is exact too.
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
    delta = jnp.transpose(delta, (0, 2, 1)) - d_lse
    statistics = (d_out, lse, delta, data, offset)

    # dq and the score mod's inputs, one program per block of queries.
    trained = [arrays[t] for t in mods.trained]
    in_specs = [
        _tiles(geo.block, depth),
        _kv_rows(geo, k_rows, depth),
        _kv_rows(geo, k_rows, value),
        _tiles(geo.block, value),
        _row_stats(geo.block),
        _row_stats(geo.block),
        _data_specs(data),
    ]
    # Each program writes its own partial sum of an input's gradient, summed
    # below: no two programs write the same memory, no atomics are needed.
    out_specs = [_tiles(geo.block, depth)] + [
        pl.BlockSpec((None, None, None, *x.shape), lambda *p, n=x.ndim: (*p, *[0] * n))
        for x in trained
    ]
    out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype)] + [
        jax.ShapeDtypeStruct((geo.batch, geo.heads, geo.q_blocks, *x.shape), "float32")
        for x in trained
    ]
    grid = (geo.batch, geo.heads, geo.q_blocks)
    args = (q, k, v, *statistics, *lists[:4], *arrays)
    specs = (in_specs, out_specs)
    dq, *d_trained = _call(
        _dq_kernel, geo, mods, "flex_dq", grid, specs, out_shape, args
    )

    # dk and dv, one program per block of keys and key/value head.
    in_specs = [
        _group_rows(geo, q_rows, depth),
        _tiles(geo.block, depth),
        _tiles(geo.block, value),
        _group_rows(geo, q_rows, value),
        _group_rows(geo, q_rows),
        _group_rows(geo, q_rows),
        _data_specs(data),
    ]
    out_specs = [_tiles(geo.block, depth), _tiles(geo.block, value)]
    out_shape = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (k, v)]
    grid = (geo.batch, geo.heads // geo.groups, geo.k_blocks)
    args = (q, k, v, *statistics, *lists[4:], *arrays)
    specs = (in_specs, out_specs)
    dk, dv = _call(_dkv_kernel, geo, mods, "flex_dkv", grid, specs, out_shape, args)

    d_inputs = [None] * len(inputs)
    for t, grad in zip(mods.trained, d_trained, strict=True):
        grad = jnp.sum(grad, axis=(0, 1, 2)).reshape(inputs[t].shape)
        d_inputs[t] = grad.astype(inputs[t].dtype)
    return dq, dk, dv, tuple(d_inputs)
