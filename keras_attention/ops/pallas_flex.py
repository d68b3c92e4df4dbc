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

The kernel's modules: this one, the entry (the call's arguments made kernel
inputs, the custom gradient); `pallas_geometry` (the call's sizes, the visit
lists of the block map, each program's tiles); `pallas_tiles` (what a
program computes on one tile); `pallas_forward` and `pallas_backward` (the
kernels).

This module needs JAX: only the JAX backend imports it, lazily.

References:
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
    - [Dao, 2023. FlashAttention-2](https://arxiv.org/abs/2307.08691)
    - [He et al., 2024. FlexAttention](https://pytorch.org/blog/flexattention/)
"""

import jax
import jax.numpy as jnp
from jax import lax

from keras_attention.ops.pallas_backward import _backward
from keras_attention.ops.pallas_forward import _forward

# EMPTY, PARTIAL and FULL were this module's before the kernel was split:
# importable from here as before (F401).
from keras_attention.ops.pallas_geometry import (
    EMPTY,  # noqa: F401
    FULL,  # noqa: F401
    PARTIAL,  # noqa: F401
    _geometry,
    _visit_lists,
)
from keras_attention.ops.pallas_tiles import _Mods, _tile_grids


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


# -- the custom gradient -------------------------------------------------------


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
