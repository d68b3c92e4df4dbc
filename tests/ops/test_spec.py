"""The attention specification: its block map (empty, partial, full) against
the dense mask it summarizes, by interval arithmetic and by evaluation, and a
dense mask read as a mask part."""

import numpy as np
import pytest
from keras import ops

from keras_attention.ops import mods
from keras_attention.ops.spec import (
    EMPTY,
    FULL,
    PARTIAL,
    BlockGrid,
    Part,
    build_spec,
    dense_mask_part,
)

rng = np.random.default_rng(5)
B, T, S, N, H = 2, 13, 21, 3, 4  # neither length a multiple of the block
BLOCK = 4
QUERY = np.zeros((B, T, N, H), "float32")
KEY = np.zeros((B, S, N, H), "float32")


def reference_map(allowed):
    """The block map of a dense `(B, N, T, S)` mask, by NumPy: padded keys
    never allowed, padded queries never deciding."""
    num_q, num_k = -(-T // BLOCK), -(-S // BLOCK)
    padded = np.zeros((B, N, num_q * BLOCK, num_k * BLOCK), bool)
    padded[:, :, :T, :S] = allowed
    real_rows = np.zeros(num_q * BLOCK, bool)
    real_rows[:T] = True
    tiles = padded.reshape(B, N, num_q, BLOCK, num_k, BLOCK)
    rows = real_rows.reshape(num_q, BLOCK)[None, None, :, :, None, None]
    some = tiles.any(axis=(0, 1, 3, 5))
    every = (tiles | ~rows).all(axis=(0, 1, 3, 5))
    return np.where(every, FULL, np.where(some, PARTIAL, EMPTY))


def dense(spec, offset):
    """The spec's mask on the whole grid, `(B, N, T, S)`."""
    allowed = np.ones((B, N, T, S), bool)
    if spec.mask_mod is not None:
        grids = mods.index_grids(B, N, offset + np.arange(T), np.arange(S))
        allowed = allowed & ops.convert_to_numpy(spec.mask_mod(*grids))
    if spec.mask is not None:
        allowed = allowed & spec.mask
    return allowed


def block_map(spec, offset):
    grid = BlockGrid.of(QUERY, KEY, BLOCK, offset)
    tile_mask = None if spec.mask is None else grid.pad_mask(spec.mask)
    return ops.convert_to_numpy(spec.block_map(grid, tile_mask))


def padding():
    mask = np.ones((B, 1, 1, S), bool)
    mask[0, ..., 9:] = False
    return mask


CALLS = {
    "causal": {"is_causal": True},
    "causal-window": {"is_causal": True, "sliding_window": 5},
    "window": {"sliding_window": 6},
    "documents": {
        "segment_ids": (
            np.array([[0] * 6 + [1] * 7] * B),
            np.array([[0] * 8 + [1] * 13] * B),
        )
    },
    "custom": {"mask_mod": mods.prefix_lm_mask_mod([3, 10])},
    "padding-causal": {"mask": padding(), "is_causal": True},
    "random-dense": {"mask": rng.random((B, N, T, S)) > 0.1},
}


@pytest.mark.parametrize("offset", [0, 8])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_block_map_summarizes_the_dense_mask(name, offset):
    spec = build_spec(scale=1.0, query_offset=offset, **CALLS[name])
    want = reference_map(dense(spec, offset))
    np.testing.assert_array_equal(block_map(spec, offset), want)
    if set(spec.mask_kinds()) & {"causal", "window"}:
        # The interval arithmetic of the causal mask and the window agrees
        # with the same functions evaluated tile by tile.
        evaluated = spec._replace(mask_parts=(Part(spec.mask_mod),))
        np.testing.assert_array_equal(block_map(evaluated, offset), want)


def test_tiles_between_documents_are_empty():
    documents = np.array([[0] * 8 + [1] * 13])
    query = np.zeros((1, 21, N, H), "float32")
    spec = build_spec(scale=1.0, is_causal=True, segment_ids=(documents, documents))
    got = ops.convert_to_numpy(spec.block_map(BlockGrid.of(query, query, 4)))
    # Documents at 0-7 and 8-20; tiles of 4: blocks 0-1 and 2-5, causal; the
    # diagonal tiles partial, the last key block (one key and padding) too.
    want = np.zeros((6, 6), int)
    want[:2, :2] = [[PARTIAL, EMPTY], [FULL, PARTIAL]]
    want[2:, 2:] = np.tril(np.full((4, 4), FULL), -1) + np.diag([PARTIAL] * 4)
    want[5, 5] = PARTIAL
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(B, N, T, S), (B, 1, 1, S), (1, 1, T, S)])
def test_a_dense_mask_read_as_a_part_is_the_mask(shape):
    mask = rng.random(shape) > 0.3
    offset = 8
    part = dense_mask_part(mask, offset)
    assert part.kind == "dense"
    spec = build_spec(scale=1.0, query_offset=offset)._replace(mask_parts=(part,))
    np.testing.assert_array_equal(
        dense(spec, offset), np.broadcast_to(mask, (B, N, T, S))
    )
