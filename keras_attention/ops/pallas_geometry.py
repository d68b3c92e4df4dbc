"""The geometry of the Pallas kernel (`keras_attention.ops.pallas_flex`): the
static sizes of a call (`_Geometry`), the visit lists that turn the block map
into the loops of a program, the `BlockSpec`s that give each program of a
grid its tiles (a block of queries or keys of one head, the key/value head
that a query head reads, the rows of a group of heads, the row statistics),
and the `pallas_call` of a kernel over its grid, shared by the forward
(`pallas_forward`) and the backward (`pallas_backward`) kernels.

This module needs JAX: only the Pallas kernel's modules import it.
"""

import functools
from typing import NamedTuple

import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

# The kinds of tile in a block map.
EMPTY, PARTIAL, FULL = 0, 1, 2


class _Geometry(NamedTuple):
    """The static sizes of one call."""

    batch: int
    q_len: int
    k_len: int
    heads: int
    groups: int  # query heads per key/value head
    depth: int
    value_depth: int
    depth_pad: int  # head sizes padded to a power of two, for Triton
    value_pad: int
    block: int
    q_blocks: int
    k_blocks: int
    scale: float
    interpret: bool
    dropout: float  # the rate, 0.0 without dropout


def _geometry(query, key, value, block_size, scale, interpret, dropout=0.0):
    """The `_Geometry` of a call; a ValueError for arrays that are not
    `(B, T, N, H)` queries and `(B, S, N_kv, H)`, `(B, S, N_kv, H_v)` keys and
    values of one float dtype, or a `block_size` that is not a positive int."""
    shapes = [x.shape for x in (query, key, value)]
    if any(len(s) != 4 for s in shapes):
        raise ValueError(f"query, key and value must be 4-D; received {shapes}.")
    (batch, q_len, heads, depth), (_, k_len, kv_heads, _), _ = shapes
    if (
        {s[0] for s in shapes} != {batch}
        or shapes[2][1] != k_len
        or shapes[1][3] != depth
        or shapes[2][2] != kv_heads
        or heads % kv_heads
    ):
        raise ValueError(
            "Expected query (B, T, N, H), key (B, S, N_kv, H) and value "
            f"(B, S, N_kv, H_v) with N_kv dividing N; received {shapes}."
        )
    dtypes = [jnp.dtype(x.dtype) for x in (query, key, value)]
    if len(set(dtypes)) != 1 or not jnp.issubdtype(dtypes[0], jnp.floating):
        raise ValueError(f"query, key and value must share a float dtype: {dtypes}.")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"`block_size` must be a positive int; received {block_size}.")
    return _Geometry(
        batch,
        q_len,
        k_len,
        heads,
        heads // kv_heads,
        depth,
        shapes[2][3],
        pl.next_power_of_2(depth),
        pl.next_power_of_2(shapes[2][3]),
        block_size,
        pl.cdiv(q_len, block_size),
        pl.cdiv(k_len, block_size),
        float(scale),
        bool(interpret),
        float(dropout),
    )


def _visit_lists(block_map):
    """Per row of the map, its `PARTIAL` columns first (in order) and how many,
    then the same for `FULL`: the loops of a program run over these, so an
    empty tile costs no iteration and no branch (FlexAttention's
    `kv_indices` / `kv_num_blocks`)."""
    columns = jnp.arange(block_map.shape[1], dtype=jnp.int32)
    lists = []
    for kind in (PARTIAL, FULL):
        chosen = block_map == kind
        order = jnp.argsort(jnp.where(chosen, columns, columns + len(columns)), axis=1)
        lists += [order.astype(jnp.int32), jnp.sum(chosen, axis=1, dtype=jnp.int32)]
    return tuple(lists)


# -- the tiles of each program, and the pallas_call ----------------------------


def _tiles(block, depth):
    """Program `(b, head, t)` reads tile `t` of `block` rows of `head` of a
    `(B, length, heads, depth)` array (and writes it, as an output)."""
    return pl.BlockSpec((None, block, None, depth), lambda b, n, t: (b, t, n, 0))


def _kv_rows(geo, length, depth):
    """Every row of the key/value head that query head `h` reads: the groups
    of grouped-query attention go through the index map, never a copy."""
    return pl.BlockSpec(
        (None, length, None, depth), lambda b, h, i: (b, 0, h // geo.groups, 0)
    )


def _group_rows(geo, length, depth=None):
    """Every row of the query heads of key/value head `n` (of the `(B, T, N,
    depth)` queries, or, without `depth`, of the `(B, N, T)` row statistics)."""
    if depth is None:
        return pl.BlockSpec((None, geo.groups, length), lambda b, n, j: (b, n, 0))
    return pl.BlockSpec((None, length, geo.groups, depth), lambda b, n, j: (b, 0, n, 0))


def _row_stats(block):
    """Tile `i` of head `h` of a `(B, N, T)` row statistic (lse, delta)."""
    return pl.BlockSpec((None, None, block), lambda b, h, i: (b, h, i))


def _whole(x):
    """Every program reads the whole array."""
    return pl.BlockSpec(x.shape, lambda *_: (0,) * x.ndim)


def _data_specs(data):
    """Program `(b, ...)` reads row `b` of the ids and the key mask (sliced
    into tiles with `pl.ds`, as the keys are) and every slope (loading its
    head's as one scalar); None where an array is absent."""
    *rows, slopes = data
    return (
        *[
            None
            if x is None
            else pl.BlockSpec((None, x.shape[1]), lambda b, *_: (b, 0))
            for x in rows
        ],
        None if slopes is None else _whole(slopes),
    )


def _call(kernel, geo, mods, name, grid, specs, out_shape, args):
    """`kernel` run by one program per cell of `grid`: `specs` are the
    `BlockSpec`s of the first inputs and of the outputs; the inputs past them
    (the mods' arrays) are read whole."""
    in_specs, out_specs = specs
    return pl.pallas_call(
        functools.partial(kernel, geo=geo, mods=mods),
        grid=grid,
        in_specs=in_specs + [_whole(x) for x in args[len(in_specs) :]],
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2),
        interpret=geo.interpret,
        name=name,
    )(*args)
