"""FlexAttention as one fused Pallas kernel (JAX): score and mask functions
inside FlashAttention-2's tiled online softmax, forward and backward.

The grid runs one program per batch row, head and block of queries; each walks
over the blocks of keys that the caller's block map does not mark empty, so a
causal, windowed or document mask costs only the tiles it keeps. `score_mod`
and `mask_mod` are the functions `keras_attention.ops.mods` builds, called on
one tile at a time. The backward pass recomputes each tile from the saved
log-sum-exp (FlashAttention's recurrence) in two kernels: one per block of
queries for the gradients of the queries and of `score_mod_inputs`, one per
block of keys (and key/value head) for those of the keys and values.

This module needs JAX: only the JAX backend imports it, lazily.

References:
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
    - [Dao, 2023. FlashAttention-2](https://arxiv.org/abs/2307.08691)
    - [He et al., 2024. FlexAttention](https://pytorch.org/blog/flexattention/)
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from keras_attention.ops.pallas_tiles import (
    _dropped,
    _Mods,
    _probabilities,
    _Tile,
    _tile_grids,
    _to_kernel,
    _unseen_zeroed,
    _visit,
)

# The kinds of tile in a block map.
EMPTY, PARTIAL, FULL = 0, 1, 2


def flex_attention(
    query,
    key,
    value,
    *,
    scale,
    block_map,
    block_size,
    score_mod=None,
    score_mod_inputs=(),
    mask_mod=None,
    segment_ids=None,
    alibi_slopes=None,
    key_mask=None,
    query_offset=0,
    interpret=False,
    dropout_rate=0.0,
    dropout_words=None,
):
    """`softmax(score_mod(scale * Q K^T))` over the keys `mask_mod` keeps,
    times V, per head, in one Pallas kernel, with its own gradient.

    Keys and values may have fewer heads than the queries (grouped-query
    attention): query head `n` reads key/value head `n // (N / N_kv)` through
    the kernels' block index, never through a copy, and the gradients of the
    keys and values sum over the group inside the kernel. A query that sees no
    key gets zeros and a log-sum-exp of -inf, never NaN. The gradient of the
    log-sum-exp is exact too: `dS = P * (dP - rowsum(dO * O) + dlse)`.

    Documents (`segment_ids`), ALiBi (`alibi_slopes`) and a padding mask over
    the keys (`key_mask`) are read natively, never by gather: the ids and the
    mask as kernel inputs sliced into tiles like the keys (as the JAX and
    splash kernels read segment ids), the slope of a program's head as one
    scalar load. The score of query `i` for key `j` is `scale * q . k`, minus
    ALiBi's `slope_h * |i - j|` (`i` counted from `query_offset`), through
    `score_mod`; the key is seen where `mask_mod`, the segment ids and the
    key mask all allow it.

    Limits:

    - Tested only in Pallas' interpret mode (CPU). The kernels keep to what
      `jax.experimental.pallas.ops.gpu.attention` lowers with Triton (ref
      loads and stores with `pl.ds`, `pl.program_id`, `lax.fori_loop` with
      bounds read from a ref, float32 accumulation), but their Triton
      lowering is unverified, and some of it cannot work as written: the
      Triton backend has no gather, so mods that `ops.take` into an array
      (`document_mask_mod`, `prefix_lm_mask_mod`, `alibi_score_mod`, a
      custom mod reading a table) and T5's `relative_position_score_mod`
      (a gather, and a scatter-add in its gradient) run in interpret mode
      only: pass documents, ALiBi and padding as `segment_ids`,
      `alibi_slopes` and `key_mask` instead, which are gather-free (a test
      checks the jaxprs, forward and backward); the mods' rank-4 tiles
      (`(1, 1, block, block)`) are unverified there too; Triton wants
      power-of-two tiles of at least 16 (`block_size`; head sizes are
      padded to a power of two here).
    - Each program reads the whole keys and values of its head (sliced into
      tiles with `pl.ds`, as the JAX kernel does) and every array the mods
      read, whole: the mods' arrays should be small.
    - The gradient of each float `score_mod_inputs` array is summed from one
      partial sum per query program, `B * N * ceil(T / block_size)` copies of
      it: meant for small tables such as T5's.
    - The mods are traced once, on a tile's shapes; a mod must be a pure
      function of its arguments and the arrays it reads.

    Args:
        query: `(B, T, N, H)`, float32 or bfloat16.
        key: `(B, S, N_kv, H)`, `N_kv` a divisor of `N`.
        value: `(B, S, N_kv, H_v)`.
        scale: the multiplier of `q . k`, a Python float.
        block_map: int `(ceil(T / block_size), ceil(S / block_size))`, per
            tile of queries and keys: 0 (`EMPTY`) no query sees a key there,
            the tile is never loaded; 1 (`PARTIAL`) `mask_mod`,
            `segment_ids` and `key_mask` decide inside the tile; 2 (`FULL`)
            every query sees every key (the masks are not evaluated: the map
            is trusted, and must account for all three). Other values count
            as empty. May be traced. Keys past S and queries past T, in the last
            tiles, are hidden whatever it says.
        block_size: the number of queries and of keys in a tile.
        score_mod: `score_mod(score, b, h, q_idx, kv_idx, *score_mod_inputs)`,
            the FlexAttention signature of `keras_attention.ops.mods`,
            called on one tile: `score` `(1, 1, block, block)`, `b` and `h`
            `(1, 1, 1, 1)`, `q_idx` `(1, 1, block, 1)`, `kv_idx`
            `(1, 1, 1, block)`, all int32 but `score` (float32).
        score_mod_inputs: arrays `score_mod` takes last (a trainable bias
            table): their gradients are computed. Arrays a mod reads from its
            closure become kernel inputs too (`jax.closure_convert`).
        mask_mod: `mask_mod(b, h, q_idx, kv_idx)`, True where the query may
            see the key; evaluated only in the `PARTIAL` tiles.
        segment_ids: a pair `(query_ids (B, T), key_ids (B, S))` of ints:
            query `i` sees key `j` only if their ids are equal (JAX's
            `SegmentIds`); applied in the `PARTIAL` tiles, as `mask_mod`.
        alibi_slopes: float `(N,)`, one per query head: ALiBi's
            `-slope_h * |i - j|` is added to every visited tile's scores,
            before `score_mod`. Constants: they get no gradient.
        key_mask: bool `(B, S)`, True where a key may be seen (padding);
            applied in the `PARTIAL` tiles, as `mask_mod`.
        query_offset: the absolute position of the first query (int or
            scalar int32 array): the `q_idx` of the mods counts from it.
        interpret: run Pallas' interpreter (any device, CPUs included).
        dropout_rate: attention dropout of the normalized weights (a Python
            float in [0, 1)), its mask drawn inside the tiles, in the forward
            and both backward kernels, from `dropout_words`.
        dropout_words: int32 `(2,)`, the mask's key words
            (`keras_attention.ops.random.dropout_words`): the mask is
            `keras_attention.ops.random.attention_dropout_scale`'s, the same
            as the `keras.ops` paths draw.

    Returns:
        `(output, lse)`: `(B, T, N, H_v)` in the dtype of `query`, and the
        log-sum-exp of each query's scores `(B, N, T)`, float32.

    Example:

    >>> q = jax.random.normal(jax.random.key(0), (1, 16, 2, 8))
    >>> causal = [[2, 0], [1, 2]]  # block_size 8: the diagonal tiles mask
    >>> out, lse = flex_attention(
    ...     q, q, q, scale=8**-0.5, block_map=jnp.array(causal), block_size=8,
    ...     mask_mod=lambda b, h, i, j: i >= j, interpret=True)
    >>> out.shape, lse.shape
    ((1, 16, 2, 8), (1, 2, 16))

    References:
        - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
        - [Dao, 2023. FlashAttention-2](https://arxiv.org/abs/2307.08691)
        - [He et al., 2024. FlexAttention](https://pytorch.org/blog/flexattention/)
    """
    geo = _geometry(query, key, value, block_size, scale, interpret, dropout_rate)
    block_map = jnp.asarray(block_map)
    expected = (geo.q_blocks, geo.k_blocks)
    if block_map.shape != expected or not jnp.issubdtype(block_map.dtype, jnp.integer):
        raise ValueError(
            "`block_map` must be int (ceil(T / block_size), ceil(S / block_size)) "
            f"= {expected} for T={geo.q_len}, S={geo.k_len}, "
            f"block_size={block_size}; received dtype {block_map.dtype} and "
            f"shape {block_map.shape}."
        )
    if score_mod is None and score_mod_inputs:
        raise ValueError("`score_mod_inputs` were given without a `score_mod`.")
    mods, inputs, consts = _hoist_mods(score_mod, score_mod_inputs, mask_mod, geo)
    data = _tile_data(geo, segment_ids, alibi_slopes, key_mask)
    block_map = block_map.astype(jnp.int32)
    # The kernels' int32 scalars: the offset, then the dropout's key words.
    offset = jnp.reshape(jnp.asarray(query_offset, jnp.int32), (1,))
    if geo.dropout:
        if dropout_words is None:
            raise ValueError("`dropout_rate` > 0 needs `dropout_words`.")
        words = jnp.reshape(jnp.asarray(dropout_words).astype(jnp.int32), (2,))
        offset = jnp.concatenate([offset, words])
    tables = (offset, *_visit_lists(block_map), *_visit_lists(block_map.T))

    def pad(x, length, depth):
        return jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, depth)))

    q = pad(query, geo.q_blocks * geo.block, geo.depth_pad - geo.depth)
    k = pad(key, geo.k_blocks * geo.block, geo.depth_pad - geo.depth)
    v = pad(value, geo.k_blocks * geo.block, geo.value_pad - geo.value_depth)
    out, lse = _attention(geo, mods)(q, k, v, inputs, (tables, consts, data))
    return out[:, : geo.q_len, :, : geo.value_depth], lse[:, :, : geo.q_len]


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


def _tile_data(geo, segment_ids, alibi_slopes, key_mask):
    """`(query_ids, key_ids, key_mask, slopes)`, each None or an array the
    kernels read tile by tile: the rows padded to whole blocks, int32."""

    def row(x, name, keys):
        x, length = jnp.asarray(x), geo.k_len if keys else geo.q_len
        if x.shape != (geo.batch, length):
            raise ValueError(
                f"`{name}` must be (B, {'S' if keys else 'T'}) = "
                f"{(geo.batch, length)}; received shape {x.shape}."
            )
        padded = (geo.k_blocks if keys else geo.q_blocks) * geo.block
        return jnp.pad(x.astype(jnp.int32), ((0, 0), (0, padded - length)))

    q_ids = k_ids = mask = slopes = None
    if segment_ids is not None:
        if not isinstance(segment_ids, (tuple, list)) or len(segment_ids) != 2:
            raise ValueError("`segment_ids` must be a pair (query_ids, key_ids).")
        q_ids = row(segment_ids[0], "query_ids", keys=False)
        k_ids = row(segment_ids[1], "key_ids", keys=True)
    if key_mask is not None:
        key_mask = jnp.asarray(key_mask)
        if key_mask.dtype != jnp.bool_:
            raise ValueError(f"`key_mask` must be bool; received {key_mask.dtype}.")
        mask = row(key_mask, "key_mask", keys=True)
    if alibi_slopes is not None:
        slopes = lax.stop_gradient(jnp.asarray(alibi_slopes, jnp.float32))
        if slopes.shape != (geo.heads,):
            raise ValueError(
                f"`alibi_slopes` must be (N,) = ({geo.heads},), one per query "
                f"head; received shape {slopes.shape}."
            )
    return q_ids, k_ids, mask, slopes


# -- the mods, as jaxprs whose arrays are kernel inputs -------------------------


def _hoist_mods(score_mod, score_mod_inputs, mask_mod, geo):
    """The mods traced once on a tile's shapes. Pallas kernels cannot capture
    arrays, so every array a mod reads (its inputs, its closure) becomes an
    explicit kernel input; those that may be differentiated join the inputs
    whose gradients the backward kernel computes."""
    zero = jnp.zeros((), jnp.int32)
    pos = jnp.zeros((geo.block,), jnp.int32)
    grids = _tile_grids(zero, zero, pos, pos)
    tile = jnp.zeros((1, 1, geo.block, geo.block), jnp.float32)
    inputs, score_jaxpr, score_consts = (), None, ()
    if score_mod is not None:
        inputs = tuple(jnp.asarray(x) for x in score_mod_inputs)
        converted, perturbed = jax.closure_convert(score_mod, tile, *grids, *inputs)
        inputs += tuple(jnp.asarray(x) for x in perturbed)
        closed = jax.make_jaxpr(converted)(tile, *grids, *inputs)
        out = closed.out_avals
        if len(out) != 1 or out[0].shape != tile.shape:
            raise ValueError(
                "`score_mod(score, b, h, q_idx, kv_idx)` must return one array "
                f"of the shape of `score`, {tile.shape}; received {out}."
            )
        score_jaxpr, score_consts = closed.jaxpr, tuple(closed.consts)
    mask_jaxpr, mask_consts = None, ()
    if mask_mod is not None:
        closed = jax.make_jaxpr(mask_mod)(*grids)
        out = closed.out_avals
        if (
            len(out) != 1
            or out[0].dtype != jnp.bool_
            or jnp.broadcast_shapes(out[0].shape, tile.shape) != tile.shape
        ):
            raise ValueError(
                "`mask_mod(b, h, q_idx, kv_idx)` must return one boolean array "
                f"broadcastable to {tile.shape} on a tile; received {out}."
            )
        mask_jaxpr, mask_consts = closed.jaxpr, tuple(closed.consts)
    arrays = [jnp.asarray(x) for x in (*inputs, *score_consts, *mask_consts)]
    trained = tuple(
        i for i, x in enumerate(inputs) if jnp.issubdtype(x.dtype, jnp.floating)
    )
    mods = _Mods(
        score_jaxpr,
        mask_jaxpr,
        tuple((x.shape, x.dtype) for x in arrays),
        (len(inputs), len(score_consts), len(mask_consts)),
        trained,
    )
    return mods, inputs, tuple(arrays[len(inputs) :])


# -- kernels --------------------------------------------------------------------


def _forward_kernel(q_ref, k_ref, v_ref, data, offset_ref, *refs, geo, mods):
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


def _dq_kernel(
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, data, offset_ref, *refs, geo, mods
):
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


# -- pallas_call and the custom gradient ---------------------------------------


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


def _forward(geo, mods, q, k, v, inputs, statics):
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


def _backward(geo, mods, q, k, v, inputs, statics, out, lse, d_out, d_lse):
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


def _attention(geo, mods):
    """`(q, k, v, inputs, statics) -> (out, lse)` on padded arrays, with the
    kernels' gradient: for q, k, v and the float `inputs`; none for
    `statics` (the offset, the visit lists, the mods' constant arrays, the
    ids, key mask and ALiBi slopes)."""

    @jax.custom_vjp
    def attend(q, k, v, inputs, statics):
        return tuple(_forward(geo, mods, q, k, v, inputs, statics))

    def forward(q, k, v, inputs, statics):
        out, lse = _forward(geo, mods, q, k, v, inputs, statics)
        return (out, lse), (q, k, v, inputs, statics, out, lse)

    def backward(residuals, cotangents):
        dq, dk, dv, d_inputs = _backward(geo, mods, *residuals, *cotangents)
        return dq, dk, dv, d_inputs, None

    attend.defvjp(forward, backward)
    return attend
