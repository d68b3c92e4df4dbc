"""The forward pass of the Pallas kernel (`keras_attention.ops.pallas_flex`):
one program per batch row, head and block of queries walks the blocks of keys
its row of the block map keeps, with FlashAttention-2's online softmax, and
writes the outputs and the log-sum-exp the backward pass recomputes the
weights from.

This module needs JAX: only `pallas_flex` imports it.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from keras_attention.ops.pallas_geometry import (
    _call,
    _data_specs,
    _kv_rows,
    _row_stats,
    _tiles,
)
from keras_attention.ops.pallas_tiles import (
    _dropped,
    _Tile,
    _to_kernel,
    _unseen_zeroed,
    _visit,
)


def _forward_kernel(q_ref, k_ref, v_ref, data, offset_ref, *refs, geo, mods):
    """Program `(b, h, i)`: the outputs and log-sum-exp of block `i` of the
    queries of head `h`, over the blocks of keys that row `i` of the map
    keeps."""
    lists, mod_refs, (o_ref, lse_ref) = refs[:4], refs[4:-2], refs[-2:]
    b, h, i = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    tile = _Tile(geo, mods, mod_refs, b, offset_ref, data)
    q = q_ref[...]

    def body(j, masked, carry):
        acc, m_prev, l_prev = carry
        keep = tile.keep(h, i, j, masked, rows=masked)
        k = _unseen_zeroed(k_ref[pl.ds(j * geo.block, geo.block), :], keep, masked)
        v = _unseen_zeroed(v_ref[pl.ds(j * geo.block, geo.block), :], keep, masked)
        s = tile.score(tile.raw(q, k), h, i, j)
        s = jnp.where(keep, s, -jnp.inf)
        m_next = jnp.maximum(m_prev, jnp.max(s, axis=1))
        # A row that has seen no key yet keeps m = -inf: exponentiate against
        # 0 instead, so that exp(-inf - -inf) never makes a NaN.
        m_safe = jnp.where(m_next == -jnp.inf, 0.0, m_next)
        correction = jnp.exp(m_prev - m_safe)
        p = jnp.exp(s - m_safe[:, None])
        l_next = correction * l_prev + jnp.sum(p, axis=1)
        p = _dropped(p, tile.dropout(h, i, j))  # after the normalizer
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return correction[:, None] * acc + pv, m_next, l_next

    carry = (
        jnp.zeros((geo.block, geo.value_pad), jnp.float32),
        jnp.full((geo.block,), -jnp.inf, jnp.float32),
        jnp.zeros((geo.block,), jnp.float32),
    )
    acc, m, total = _visit(lists, i, body, carry)
    seen = total > 0
    l_safe = jnp.where(seen, total, 1.0)
    o_ref[...] = (acc / l_safe[:, None]).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(seen, m + jnp.log(l_safe), -jnp.inf)


def _forward(geo, mods, q, k, v, inputs, statics):
    """`(out, lse)` of the padded arrays: the forward kernel over the grid
    `(B, N, query blocks)`."""
    (offset, *lists), consts, data = statics
    arrays = [_to_kernel(x) for x in (*inputs, *consts)]
    rows, depth, value = k.shape[1], geo.depth_pad, geo.value_pad
    in_specs = [
        _tiles(geo.block, depth),
        _kv_rows(geo, rows, depth),
        _kv_rows(geo, rows, value),
        _data_specs(data),
    ]
    out_specs = [_tiles(geo.block, value), _row_stats(geo.block)]
    out_shape = [
        jax.ShapeDtypeStruct((*q.shape[:3], value), q.dtype),
        jax.ShapeDtypeStruct((geo.batch, geo.heads, q.shape[1]), jnp.float32),
    ]
    grid = (geo.batch, geo.heads, geo.q_blocks)
    args = (q, k, v, data, offset, *lists[:4], *arrays)
    specs = (in_specs, out_specs)
    return _call(
        _forward_kernel, geo, mods, "flex_forward", grid, specs, out_shape, args
    )
