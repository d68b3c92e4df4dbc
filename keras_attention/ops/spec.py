"""One attention call as data: the specification every path reads.

`dot_product_attention` turns its arguments, once per call, into an
`AttentionSpec`: a dense mask and a dense bias (what only exists as tensors),
the mask parts (functions `mask_mod(b, h, q_idx, kv_idx)` that must all hold:
the causal mask, a sliding window, packed documents, a user's `mask_mod`), the
score parts (functions `score_mod(score, b, h, q_idx, kv_idx)` applied in
order: ALiBi, a user's `score_mod`, the soft cap) and, per tile of queries and
keys, the block map: empty, partial or full (splash attention's `MaskInfo`,
FlexAttention's `BlockMask`). The standard path evaluates the parts on the
whole `(T, S)` grid, the chunked path and the Pallas kernel tile by tile over
the block map, and `plan_attention` (see `keras_attention.ops.plan`) reads
the parts' kinds to decide which kernel serves the call. A new variant is one
more part: every path then takes it.

Each part is a `Part(fn, kind, window)`. Kinds the kernels know: `"causal"`,
`"window"` (`window` keys, causal or not: `kind="window"` with the causal
mask as a part of its own), `"documents"`, `"alibi"` (a bias: SDPA takes it
as one), `"soft_cap"`; anything else is `"custom"`, which every `keras.ops`
path and the Pallas kernel evaluate and no vendor kernel takes. Causal and
window parts also give their block map by interval arithmetic; the others
are evaluated block by block.

References:
    - [He et al., 2024. FlexAttention](https://pytorch.org/blog/flexattention/)
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
"""

from collections.abc import Callable
from typing import Any, NamedTuple

from keras import ops

from keras_attention._checks import static_shape
from keras_attention.ops.mods import (
    alibi_score_mod,
    causal_mask_mod,
    document_mask_mod,
    evaluate_mask_mod,
    evaluate_score_mod,
    index_grids,
    soft_cap_score_mod,
)
from keras_attention.ops.random import attention_dropout_scale

# The block map's values.
EMPTY, PARTIAL, FULL = 0, 1, 2


class Part(NamedTuple):
    """One mask or score function of a call, and what kernels know of it:
    its kind, the window's size, and the values a kernel reads instead of
    calling `fn` (the query and key ids of `"documents"`, the slopes of
    `"alibi"`, the cap of `"soft_cap"`)."""

    fn: Callable
    kind: str = "custom"
    window: int | None = None
    data: tuple = ()


def window_mask_mod(window):
    """`|q_idx - kv_idx| < window`: the symmetric window; with the causal
    part beside it, the `window` most recent keys."""

    def mask_mod(b, h, q_idx, kv_idx):
        return ops.less(ops.abs(q_idx - kv_idx), window)

    return mask_mod


def dense_mask_part(mask, query_offset=0):
    """A dense boolean mask broadcastable to `(B, N, T, S)` as a `"dense"`
    mask part, for kernels that read masks only as functions:
    `mask[b, h, q_idx - query_offset, kv_idx]`, an axis of size 1 read at 0."""
    mask = ops.cast(mask, "bool")
    while len(mask.shape) < 4:
        mask = ops.expand_dims(mask, 0)
    sizes = ops.shape(mask)
    flat = ops.reshape(mask, (-1,))

    def index(position, axis):
        return ops.zeros_like(position) if mask.shape[axis] == 1 else position

    def mask_mod(b, h, q_idx, kv_idx):
        rows = ops.clip(q_idx - ops.cast(query_offset, "int32"), 0, sizes[2] - 1)
        cols = ops.clip(kv_idx, 0, sizes[3] - 1)
        flat_index = index(b, 0) * sizes[1] + index(h, 1)
        flat_index = flat_index * sizes[2] + index(rows, 2)
        return ops.take(flat, flat_index * sizes[3] + index(cols, 3))

    return Part(mask_mod, "dense")


class AttentionSpec(NamedTuple):
    """What one call computes, read by every path (module docstring).

    Attributes:
        scale: the multiplier of `query . key`.
        query_offset: the absolute position of the first query.
        mask: boolean tensor broadcastable to `(B, N, T, S)`, or None.
        bias: float tensor added to the scaled scores, or None (paths that
            never build `(T, S)` scores cannot take it).
        mask_parts: `Part`s whose functions must all allow a key.
        score_parts: `Part`s applied to the scores in order; a `"custom"` one
            takes `score_mod_inputs` as its last arguments.
        score_mod_inputs: the tensors a custom score part reads.
        dropout_rate: the probability of dropping each normalized weight
            (a Python float; 0 for none).
        dropout_words: int32 `(2,)` key words of the dropout mask
            (`keras_attention.ops.random.dropout_words`), or None.
    """

    scale: Any
    query_offset: Any = 0
    mask: Any = None
    bias: Any = None
    mask_parts: tuple = ()
    score_parts: tuple = ()
    score_mod_inputs: tuple = ()
    dropout_rate: float = 0.0
    dropout_words: Any = None

    def dropout_scale(self, b, h, q_row, kv_idx, heads, query_length):
        """Float32 factors of the weights at these indices (broadcast):
        `1 / (1 - rate)` kept, 0 dropped; None without dropout. `q_row`
        counts from the first query, `h` the query heads."""
        if not self.dropout_rate:
            return None
        return attention_dropout_scale(
            self.dropout_words,
            self.dropout_rate,
            b,
            h,
            q_row,
            kv_idx,
            heads,
            query_length,
        )

    def mask_kinds(self):
        return tuple(part.kind for part in self.mask_parts)

    def score_kinds(self):
        return tuple(part.kind for part in self.score_parts)

    @property
    def is_causal(self):
        return "causal" in self.mask_kinds()

    @property
    def window(self):
        """The sliding window's size, or None."""
        return next((p.window for p in self.mask_parts if p.kind == "window"), None)

    @property
    def mask_mod(self):
        """All the mask parts as one `mask_mod`, or None."""
        fns = [part.fn for part in self.mask_parts]
        if not fns:
            return None

        def mask_mod(b, h, q_idx, kv_idx):
            allowed = fns[0](b, h, q_idx, kv_idx)
            for fn in fns[1:]:
                allowed = ops.logical_and(allowed, fn(b, h, q_idx, kv_idx))
            return allowed

        return mask_mod

    @property
    def score_mod(self):
        """All the score parts as one `score_mod(score, b, h, q_idx, kv_idx,
        *score_mod_inputs)`, or None."""
        parts = self.score_parts
        if not parts:
            return None

        def score_mod(score, b, h, q_idx, kv_idx, *inputs):
            for part in parts:
                extra = inputs if part.kind == "custom" else ()
                score = part.fn(score, b, h, q_idx, kv_idx, *extra)
            return score

        return score_mod

    def grids(self, batch, heads, query_length, key_length):
        """`b, h, q_idx, kv_idx` of the whole `(B, N, T, S)` grid."""
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
            self.query_offset, "int32"
        )
        key_positions = ops.arange(key_length, dtype="int32")
        return index_grids(batch, heads, query_positions, key_positions)

    def dense_scores(self, query, key, raw_scores):
        """The `(B, N, T, S)` scores of the standard path from the scaled
        `raw_scores` (in their dtype): plus the bias, through the score
        parts."""
        scores = raw_scores
        if self.bias is not None:
            scores = scores + ops.cast(self.bias, scores.dtype)
        score_mod = self.score_mod
        if score_mod is not None:
            grids = self._grids_of(query, key)
            scores = evaluate_score_mod(
                score_mod, scores, grids, tuple(self.score_mod_inputs)
            )
        return scores

    def dense_mask(self, query, key):
        """The dense mask and every mask part's, merged: broadcastable to
        `(B, N, T, S)`, or None when every query sees every key."""
        mask = self.mask
        if self.mask_parts:
            shape = static_shape(query)
            expected = (shape[0], shape[2], shape[1], static_shape(key)[1])
            grids = self._grids_of(query, key)
            parts = evaluate_mask_mod(self.mask_mod, grids, expected)
            mask = parts if mask is None else ops.logical_and(mask, parts)
        return mask

    def _grids_of(self, query, key):
        batch, query_length, heads = ops.shape(query)[:3]
        return self.grids(batch, heads, query_length, ops.shape(key)[1])

    def seen_keys(self, query, key, block_size=256):
        """Bool `(B, N, S)`: the keys some query of each head may see under
        every mask part and the dense mask together, evaluated one block of
        queries at a time (never `(T, S)`). For the kernels that read the
        parts as functions (FlexAttention, tokamax): what they cannot see
        is zeroed before they read it."""
        grid = BlockGrid.of(query, key, block_size, self.query_offset)
        batch, heads, static_batch, static_heads = grid.heads_of
        key_length = grid.key_length
        key_positions = ops.arange(key_length, dtype="int32")
        tile_mask = None if self.mask is None else grid.pad_mask(self.mask)
        mask_mod = self.mask_mod

        def step(i, seen):
            rows = grid.query_positions(i * block_size, block_size)
            allowed = ops.ones((1, 1, block_size, 1), "bool")
            if mask_mod is not None:
                grids = index_grids(batch, heads, rows, key_positions)
                expected = (static_batch, static_heads, block_size, None)
                allowed = evaluate_mask_mod(mask_mod, grids, expected)
            if tile_mask is not None:
                dense = tile_mask
                if dense.shape[-2] != 1:
                    shape = ops.shape(dense)
                    start, size = (0, 0, i * block_size, 0), list(shape)
                    size[2] = block_size
                    dense = ops.slice(dense, start, size)
                dense = dense[..., :key_length]
                allowed = ops.logical_and(allowed, dense)
            allowed = ops.broadcast_to(allowed, (batch, heads, block_size, key_length))
            return ops.logical_or(seen, ops.any(allowed, axis=2))

        seen = ops.zeros((batch, heads, key_length), "bool")
        return ops.fori_loop(0, grid.num_query_blocks, step, seen)

    def block_map(self, grid, tile_mask=None):
        """Int32 `(query blocks, key blocks)` of `grid` (a `BlockGrid`):
        `EMPTY` where no query of the block may see a key of the other (for
        any batch row and head), `FULL` where every query sees every key,
        else `PARTIAL`. `tile_mask` is the dense mask padded to whole blocks
        (rank 4), or None."""
        some, every = grid.key_blocks_within()
        for part in self.mask_parts:
            some_part, every_part = _part_blocks(part, grid)
            some = ops.logical_and(some, some_part)
            every = ops.logical_and(every, every_part)
        if tile_mask is not None:
            some_part, every_part = _dense_blocks(tile_mask, grid)
            some = ops.logical_and(some, some_part)
            every = ops.logical_and(every, every_part)
        return ops.where(every, FULL, ops.where(some, PARTIAL, EMPTY))


def build_spec(
    *,
    scale,
    query_offset=0,
    mask=None,
    bias=None,
    is_causal=False,
    sliding_window=None,
    segment_ids=None,
    mask_mod=None,
    alibi_slopes=None,
    score_mod=None,
    score_mod_inputs=(),
    soft_cap=None,
    dropout_rate=0.0,
    dropout_words=None,
):
    """The `AttentionSpec` of `dot_product_attention`'s arguments (checked
    there; `segment_ids` a pair `(query_ids (B, T), key_ids (B, S))`): the
    mask parts in the order causal, window, documents, the user's; the score
    parts ALiBi, the user's, the soft cap."""
    mask_parts = []
    if is_causal:
        mask_parts.append(Part(causal_mask_mod, "causal"))
    if sliding_window is not None:
        mask_parts.append(
            Part(window_mask_mod(sliding_window), "window", sliding_window)
        )
    if segment_ids is not None:
        ids = tuple(ops.cast(x, "int32") for x in segment_ids)
        documents = document_mask_mod(*ids, query_offset=query_offset)
        mask_parts.append(Part(documents, "documents", data=ids))
    if mask_mod is not None:
        mask_parts.append(Part(mask_mod))
    score_parts = []
    if alibi_slopes is not None:
        slopes = ops.cast(ops.convert_to_tensor(alibi_slopes), "float32")
        score_parts.append(Part(alibi_score_mod(slopes), "alibi", data=(slopes,)))
    if score_mod is not None:
        score_parts.append(Part(score_mod))
    if soft_cap is not None:
        cap = Part(soft_cap_score_mod(soft_cap), "soft_cap", data=(soft_cap,))
        score_parts.append(cap)
    return AttentionSpec(
        scale=scale,
        query_offset=query_offset,
        mask=mask,
        bias=bias,
        mask_parts=tuple(mask_parts),
        score_parts=tuple(score_parts),
        score_mod_inputs=tuple(score_mod_inputs),
        dropout_rate=float(dropout_rate),
        dropout_words=dropout_words,
    )


class BlockGrid(NamedTuple):
    """Where the tiles of one call lie: the tile size, the number of query
    and key blocks, the lengths, the first query's position and
    `(batch, heads, static batch, static heads)`."""

    block_size: int
    num_query_blocks: Any
    num_key_blocks: Any
    query_length: Any
    key_length: Any
    query_offset: Any
    heads_of: tuple

    @classmethod
    def of(cls, query, key, block_size, query_offset=0):
        """The grid of `(B, T, N, H)` queries over `(B, S, N_kv, H)` keys."""
        batch, query_length, heads = ops.shape(query)[:3]
        key_length = ops.shape(key)[1]
        shape = static_shape(query)
        return cls(
            block_size,
            (query_length + block_size - 1) // block_size,
            (key_length + block_size - 1) // block_size,
            query_length,
            key_length,
            ops.cast(query_offset, "int32"),
            (batch, heads, shape[0], shape[2]),
        )

    def pad_mask(self, mask):
        """A dense mask broadcastable to `(B, N, T, S)` as rank 4, its query
        and key axes (where not 1) padded with False to whole blocks."""
        mask = ops.cast(mask, "bool")
        while len(mask.shape) < 4:
            mask = ops.expand_dims(mask, 0)
        size = self.block_size
        rows, cols = 0, 0
        if mask.shape[-2] != 1:
            rows = self.num_query_blocks * size - self.query_length
        if mask.shape[-1] != 1:
            cols = self.num_key_blocks * size - self.key_length
        padding = [[0, 0], [0, 0], [0, rows], [0, cols]]
        return ops.pad(mask, padding, constant_values=False)

    def query_positions(self, first_row, count):
        """Absolute positions of `count` query rows from `first_row`; the
        padding rows of the last block repeat the last query's."""
        rows = ops.minimum(
            first_row + ops.arange(count, dtype="int32"), self.query_length - 1
        )
        return self.query_offset + rows

    def key_positions(self, first_col, count):
        """Positions of `count` keys from `first_col`, clamped as above."""
        return ops.minimum(
            first_col + ops.arange(count, dtype="int32"), self.key_length - 1
        )

    def bounds(self):
        """First and last real positions of each query block `(Q, 1)` and
        each key block `(1, K)`."""
        size = self.block_size
        query_blocks = ops.arange(self.num_query_blocks, dtype="int32")
        key_blocks = ops.arange(self.num_key_blocks, dtype="int32")
        q_first = self.query_offset + query_blocks * size
        q_last = (
            self.query_offset
            + ops.minimum((query_blocks + 1) * size, self.query_length)
            - 1
        )
        k_first = key_blocks * size
        k_last = ops.minimum((key_blocks + 1) * size, self.key_length) - 1
        return q_first[:, None], q_last[:, None], k_first[None, :], k_last[None, :]

    def key_blocks_within(self):
        """`(some, every)` before any mask: every tile has a key; a tile of
        the last key block, padded past the end, is never full."""
        shape = (self.num_query_blocks, self.num_key_blocks)
        key_blocks = ops.arange(self.num_key_blocks, dtype="int32")
        whole = ops.less_equal((key_blocks + 1) * self.block_size, self.key_length)
        return ops.ones(shape, "bool"), ops.logical_and(
            ops.ones(shape, "bool"), whole[None, :]
        )


def _part_blocks(part, grid):
    """`(some, every)` `(Q, K)` of one mask part: by interval arithmetic for
    the causal mask and a window, else by evaluation."""
    q_first, q_last, k_first, k_last = grid.bounds()
    if part.kind == "causal":
        return ops.less_equal(k_first, q_last), ops.less_equal(k_last, q_first)
    if part.kind == "window":
        reach = part.window - 1
        some = ops.logical_and(
            ops.less_equal(k_first, q_last + reach),
            ops.greater_equal(k_last, q_first - reach),
        )
        every = ops.logical_and(
            ops.less_equal(k_last, q_first + reach),
            ops.greater_equal(k_first, q_last - reach),
        )
        return some, every
    return _evaluated_blocks(part.fn, grid)


def _any_over_leading_axes(x, count, reduce=ops.any):
    """A reduction over the first `count` axes, one axis at a time: Keras
    before 3.12 reduces a tuple of axes one after the other on PyTorch, each
    index then naming an axis of the already reduced tensor."""
    for _ in range(count):
        x = reduce(x, axis=0)
    return x


def _evaluated_blocks(mask_mod, grid):
    """`(some, every)` `(Q, K)` of a mask function, one query block at a time
    against every key: `(B, N, block_size, S)` at most, never `(T, S)`."""
    size, num_key_blocks = grid.block_size, grid.num_key_blocks
    padded_keys = num_key_blocks * size
    key_pos = grid.key_positions(0, padded_keys)
    batch, heads, static_batch, static_heads = grid.heads_of

    def step(i, blocks):
        grids = index_grids(batch, heads, grid.query_positions(i * size, size), key_pos)
        expected = (static_batch, static_heads, size, None)
        allowed = evaluate_mask_mod(mask_mod, grids, expected)
        allowed = ops.broadcast_to(allowed, (batch, heads, size, padded_keys))
        per_key = ops.reshape(allowed, (batch, heads, size, num_key_blocks, size))
        some = _any_over_leading_axes(ops.any(per_key, axis=-1), 3)
        every = _any_over_leading_axes(ops.all(per_key, axis=-1), 3, ops.all)
        row = ops.stack([ops.cast(some, "int32"), ops.cast(every, "int32")])
        return ops.slice_update(blocks, (0, i, 0), row[:, None])

    blocks = ops.zeros((2, grid.num_query_blocks, num_key_blocks), "int32")
    blocks = ops.fori_loop(0, grid.num_query_blocks, step, blocks)
    return ops.greater(blocks[0], 0), ops.greater(blocks[1], 0)


def _dense_blocks(tile_mask, grid):
    """`(some, every)` broadcastable to `(Q, K)` of the dense mask padded to
    whole blocks (padding rows and columns False; a row's padding never
    decides, as its outputs are dropped)."""
    rows_real = ops.less(
        ops.arange(grid.num_query_blocks * grid.block_size, dtype="int32"),
        grid.query_length,
    )
    some = _any_over_leading_axes(tile_mask, 2)  # (rows or 1, cols or 1)
    every = _any_over_leading_axes(tile_mask, 2, ops.all)
    if some.shape[0] != 1:
        every = ops.logical_or(every, ops.logical_not(rows_real)[:, None])
        some = ops.any(
            ops.reshape(some, (grid.num_query_blocks, grid.block_size, -1)), 1
        )
        every = ops.all(
            ops.reshape(every, (grid.num_query_blocks, grid.block_size, -1)), 1
        )
    if some.shape[-1] != 1:
        rows = ops.shape(some)[0]
        some = ops.any(
            ops.reshape(some, (rows, grid.num_key_blocks, grid.block_size)), 2
        )
        every = ops.all(
            ops.reshape(every, (rows, grid.num_key_blocks, grid.block_size)), 2
        )
    return some, every
