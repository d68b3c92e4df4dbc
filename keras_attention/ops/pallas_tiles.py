"""The tiles of the Pallas kernel (`keras_attention.ops.pallas_flex`): what
one program computes on one tile of scores (the mods, the masks, dropout's
factors, keys no query sees zeroed), and the walk over a row of the block
map. Kept to what Triton lowers: loads, slices, selects, int32 arithmetic.

This module needs JAX: only the Pallas kernel's modules import it.
"""

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.extend import core as jax_core

from keras_attention.ops.random import attention_dropout_scale


class _Mods(NamedTuple):
    score: object  # the jaxpr of score_mod, or None
    mask: object  # the jaxpr of mask_mod, or None
    metas: tuple  # (shape, dtype) of inputs, score consts, mask consts
    counts: tuple  # how many of each
    trained: tuple  # indices of the inputs whose gradient is computed


def _tile_grids(b, h, q_pos, k_pos):
    full = (1, 1, 1, 1)
    return (
        jnp.full(full, b, jnp.int32),
        jnp.full(full, h, jnp.int32),
        q_pos.reshape(1, 1, -1, 1),
        k_pos.reshape(1, 1, 1, -1),
    )


def _to_kernel(x):
    """Kernels read arrays of at least one axis, and no booleans."""
    x = jnp.asarray(x)
    return jnp.atleast_1d(x.astype(jnp.int32) if x.dtype == jnp.bool_ else x)


def _from_kernel(ref, meta):
    shape, dtype = meta
    return ref[...].reshape(shape).astype(dtype)


class _Tile:
    """The mods of one program, their arrays loaded once, applied to tiles;
    the ids, key mask and slopes (`data`, refs or None) read per tile."""

    def __init__(self, geo, mods, refs, b, scalars, data):
        self.geo, self.mods, self.b, self.offset = geo, mods, b, scalars[0]
        self.words = (scalars[1], scalars[2]) if geo.dropout else None
        self.q_ids, self.k_ids, self.key_mask, self.slopes = data
        values = [_from_kernel(r, m) for r, m in zip(refs, mods.metas, strict=True)]
        n_in, n_score, _ = mods.counts
        self.inputs = values[:n_in]
        self.score_consts = values[n_in : n_in + n_score]
        self.mask_consts = values[n_in + n_score :]

    def positions(self, block):
        return block * self.geo.block + lax.iota(jnp.int32, self.geo.block)

    def row(self, ref, block):
        """Tile `block` of a row (ids, key mask): a slice, never a gather."""
        return ref[pl.ds(block * self.geo.block, self.geo.block)]

    def raw(self, q, k):
        """`scale * q k^T` in float32."""
        dot = jnp.dot(q, k.T, preferred_element_type=jnp.float32)
        return dot * self.geo.scale

    def score(self, raw, h, q_block, k_block, trained=()):
        """ALiBi, then `score_mod`, on the tile; `trained` replace the
        differentiated inputs (so that `jax.vjp` sees them as arguments)."""
        if self.slopes is not None:
            q_pos = self.offset + self.positions(q_block)
            distance = jnp.abs(q_pos[:, None] - self.positions(k_block)[None, :])
            raw = raw - self.slopes[h] * distance.astype(jnp.float32)
        if self.mods.score is None:
            return raw
        inputs = list(self.inputs)
        for i, x in zip(self.mods.trained, trained, strict=False):
            inputs[i] = x
        fn = jax_core.jaxpr_as_fun(
            jax_core.ClosedJaxpr(self.mods.score, self.score_consts)
        )
        grids = _tile_grids(
            self.b,
            h,
            self.offset + self.positions(q_block),
            self.positions(k_block),
        )
        return fn(raw[None, None], *grids, *inputs)[0][0, 0].astype(jnp.float32)

    def dropout(self, h, q_block, k_block):
        """Dropout's factors of the tile, float32 `(block, block)`, or None:
        the hash of the `keras.ops` paths (int32 xor, shift, multiply)."""
        if not self.geo.dropout:
            return None
        geo = self.geo
        return attention_dropout_scale(
            self.words,
            geo.dropout,
            self.b,
            h,
            self.positions(q_block)[:, None],
            self.positions(k_block)[None, :],
            geo.heads,
            geo.q_len,
        )

    def keep(self, h, q_block, k_block, masked, rows=False):
        """Bool `(block, block)`: real keys (and real queries, with `rows`),
        and `mask_mod`, the segment ids and the key mask where the tile is
        `masked`."""
        geo = self.geo
        shape = (geo.block, geo.block)
        k_pos = self.positions(k_block)
        keep = jnp.broadcast_to((k_pos < geo.k_len)[None, :], shape)
        if rows:
            keep &= (self.positions(q_block) < geo.q_len)[:, None]
        if masked and self.mods.mask is not None:
            fn = jax_core.jaxpr_as_fun(
                jax_core.ClosedJaxpr(self.mods.mask, self.mask_consts)
            )
            grids = _tile_grids(self.b, h, self.offset + self.positions(q_block), k_pos)
            keep &= jnp.broadcast_to(fn(*grids)[0], (1, 1, *shape))[0, 0]
        if masked and self.q_ids is not None:
            q_ids, k_ids = self.row(self.q_ids, q_block), self.row(self.k_ids, k_block)
            keep &= q_ids[:, None] == k_ids[None, :]
        if masked and self.key_mask is not None:
            keep &= (self.row(self.key_mask, k_block) != 0)[None, :]
        return keep


def _visit(lists, row, body, carry):
    """`body(block, masked, carry)` over the `PARTIAL` then the `FULL` blocks of
    `row` (`lists` as `pallas_geometry._visit_lists` makes them, as refs): two
    loops, so that full tiles never evaluate `mask_mod`, and no branch in
    either."""
    p_cols, p_count, f_cols, f_count = lists
    for cols, count, masked in ((p_cols, p_count, True), (f_cols, f_count, False)):
        carry = lax.fori_loop(
            0,
            count[row],
            lambda t, c, cols=cols, masked=masked: body(cols[row, t], masked, c),
            carry,
        )
    return carry


def _dropped(x, factors):
    """`x` times dropout's factors (None: no dropout)."""
    return x if factors is None else x * factors


def _unseen_zeroed(x, keep, masked):
    """The key or value tile `x` with zeros at the keys no query of a masked
    tile sees (past S too): their weight is 0, but `0 * NaN` is NaN in the
    products, forward and backward. A select on the loaded tile, no gather."""
    if not masked:
        return x
    # A maximum over int32, not `jnp.any`: Triton's lowering has no
    # `reduce_or` (tests/ops/test_lowering.py found it).
    seen = jnp.max(keep.astype(jnp.int32), axis=0) > 0
    return jnp.where(seen[:, None], x, jnp.zeros((), x.dtype))


def _probabilities(s, keep, lse):
    """The softmax weights recomputed from the saved log-sum-exp; 0 where
    hidden (and in rows that saw no key, whose lse is -inf)."""
    lse = jnp.where(lse == -jnp.inf, 0.0, lse)
    return jnp.where(keep, jnp.exp(jnp.where(keep, s, -jnp.inf) - lse[:, None]), 0.0)
