import numpy as np
import pytest

from keras_attention import names
from keras_attention.data.fashion_mnist import load_fashion_mnist
from keras_attention.data.fashion_pairs import (
    CANVAS_SIZE,
    CELL_SIZE,
    ITEM_SIZE,
    MAX_SHIFT,
    PAIR_CELLS,
    compose_pairs,
    item_cells,
    load_fashion_pairs,
    load_item_cells,
    pair_cells,
    pair_indices,
)
from keras_attention.data.labelled_images import (
    IMAGE_SETS,
    load_digits_images,
    load_image_set,
)

needs_fashion_mnist = pytest.mark.needs_package("dataset-fashion-mnist")


def _items(num_items=50, num_classes=4, seed=0):
    """Synthetic items: item i is a full 28x28 square of value i + 1, so a
    canvas tells which items it holds and where."""
    labels = np.random.default_rng(seed).integers(0, num_classes, num_items)
    images = np.broadcast_to(
        (np.arange(num_items) + 1).astype("uint8")[:, None, None],
        (num_items, ITEM_SIZE, ITEM_SIZE),
    ).copy()
    return images, labels


def _where(cell, side=ITEM_SIZE):
    """The value and the (top, left) of the one square in a cell."""
    rows, cols = np.nonzero(cell)
    assert len(rows) == side * side
    assert rows.max() - rows.min() == cols.max() - cols.min() == side - 1
    return int(cell[rows[0], cols[0]]), (int(rows.min()), int(cols.min()))


def test_pairs_hold_two_items_of_one_class_in_opposite_cells():
    items, labels = _items()
    canvases, pair_labels, indices = compose_pairs(items, labels, seed=3)
    expected = sum(n // 2 for n in np.bincount(labels))
    assert canvases.shape == (expected, CANVAS_SIZE, CANVAS_SIZE, 1)
    assert canvases.dtype == np.uint8 and pair_labels.dtype == np.int32
    assert indices.shape == (expected, 2)
    # Each item at most once, and both items of a pair in the pair's class.
    assert len(np.unique(indices)) == indices.size
    np.testing.assert_array_equal(labels[indices[:, 0]], pair_labels)
    np.testing.assert_array_equal(labels[indices[:, 1]], pair_labels)
    shifts = set()
    for canvas, pair in zip(canvases[..., 0], indices, strict=True):
        for (top, left), index in zip(PAIR_CELLS, pair, strict=True):
            value, (dy, dx) = _where(
                canvas[top : top + CELL_SIZE, left : left + CELL_SIZE]
            )
            assert value == index + 1
            assert 0 <= dy <= MAX_SHIFT and 0 <= dx <= MAX_SHIFT
            shifts.add((dy, dx))
        # Nothing outside the two cells.
        assert canvas[:CELL_SIZE, CELL_SIZE:].max() == 0
        assert canvas[CELL_SIZE:, :CELL_SIZE].max() == 0
    assert len(shifts) > 5  # the items are shifted, not all centred


def test_half_size_pairs_hold_items_averaged_down_in_16x16_cells():
    items, labels = _items()
    # Every 2x2 block of item i holds i + 5 once and i + 1 three times: its
    # mean is i + 2.
    items[:, ::2, ::2] += 4
    canvases, _, indices = compose_pairs(items, labels, seed=3, cell_size=16)
    assert canvases.shape == (len(indices), 32, 32, 1)
    shifts = set()
    for canvas, pair in zip(canvases[..., 0], indices, strict=True):
        for (top, left), index in zip(pair_cells(16), pair, strict=True):
            value, (dy, dx) = _where(canvas[top : top + 16, left : left + 16], 14)
            assert value == index + 2
            assert 0 <= dy <= 2 and 0 <= dx <= 2
            shifts.add((dy, dx))
        assert canvas[:16, 16:].max() == 0 and canvas[16:, :16].max() == 0
    assert len(shifts) > 5
    cells = item_cells(items[:10], seed=0, cell_size=16)
    assert cells.shape == (10, 16, 16, 1)
    assert [_where(cell, 14)[0] for cell in cells[..., 0]] == list(range(2, 12))


def test_pairs_are_determined_by_the_seed():
    items, labels = _items()
    first = compose_pairs(items, labels, seed=1)
    again = compose_pairs(items, labels, seed=1)
    other = compose_pairs(items, labels, seed=2)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[2], other[2])
    # Keeping fewer pairs keeps the first ones, shifts included.
    few = compose_pairs(items, labels, num_pairs=5, seed=1)
    np.testing.assert_array_equal(few[0], first[0][:5])
    np.testing.assert_array_equal(few[2], first[2][:5])


def test_pair_indices_leave_an_odd_item_out():
    pairs = pair_indices(np.array([0, 1, 0, 1, 1, 2]), seed=0)
    assert pairs.shape == (2, 2)
    assert sorted(map(sorted, pairs.tolist()))[0] == [0, 2]


def test_bad_items_and_sizes_are_refused():
    items, labels = _items()
    with pytest.raises(ValueError, match=r"\(N, 28, 28\); received \(50, 32, 32\)"):
        compose_pairs(np.zeros((50, 32, 32), "uint8"), labels)
    with pytest.raises(ValueError, match=r"\(50,\) to match `items`; received \(49,\)"):
        compose_pairs(items, labels[:-1])
    with pytest.raises(ValueError, match="`num_pairs` must be at most"):
        compose_pairs(items, labels, num_pairs=1000)
    with pytest.raises(ValueError, match=r"one of \(16, 32\); received 8"):
        compose_pairs(items, labels, cell_size=8)
    with pytest.raises(ValueError, match=r"one of \(16, 32\); received 24"):
        item_cells(items, cell_size=24)


def test_item_cells_shift_single_items_like_the_pairs():
    items, _ = _items(num_items=30)
    cells = item_cells(items, seed=0)
    assert cells.shape == (30, CELL_SIZE, CELL_SIZE, 1) and cells.dtype == np.uint8
    places = [_where(cell) for cell in cells[..., 0]]
    assert [value for value, _ in places] == list(range(1, 31))
    assert all(0 <= dy <= MAX_SHIFT and 0 <= dx <= MAX_SHIFT for _, (dy, dx) in places)
    np.testing.assert_array_equal(cells, item_cells(items, seed=0))


def test_every_built_in_image_set_has_a_known_size():
    assert set(names.GAN_DATA) == set(IMAGE_SETS) == set(names.GAN_IMAGE_SIZES)
    assert load_digits_images().images.shape[1] == names.GAN_IMAGE_SIZES["digits"]


@needs_fashion_mnist
def test_fashion_pairs_come_from_the_training_split():
    images = load_image_set("fashion-pairs")
    assert images.images.shape == (30000, 64, 64, 1)
    assert images.images.dtype == np.uint8 and images.num_classes == 10
    assert np.bincount(images.labels).tolist() == [3000] * 10
    assert names.GAN_IMAGE_SIZES["fashion-pairs"] == images.images.shape[1]
    canvases, labels, indices = load_fashion_pairs(num_pairs=100)
    np.testing.assert_array_equal(canvases, images.images[:100])
    items, item_labels = load_fashion_mnist("train")
    np.testing.assert_array_equal(item_labels[indices[:, 0]], labels)
    np.testing.assert_array_equal(item_labels[indices[:, 1]], labels)
    # Every pixel of the first item lies in the top-left cell.
    assert canvases[0, :CELL_SIZE, :CELL_SIZE].sum() == items[indices[0, 0]].sum()
    assert canvases[0, CELL_SIZE:, CELL_SIZE:].sum() == items[indices[0, 1]].sum()


@needs_fashion_mnist
def test_half_size_fashion_pairs_are_the_same_pairs_averaged_down():
    full, labels, indices = load_fashion_pairs(num_pairs=50)
    half, half_labels, half_indices = load_fashion_pairs(num_pairs=50, cell_size=16)
    assert half.shape == (50, 32, 32, 1)
    np.testing.assert_array_equal(half_indices, indices)
    np.testing.assert_array_equal(half_labels, labels)
    # Averaging keeps an item's ink: each cell's sum is a quarter of the
    # full-size item's, up to the rounding of 196 means.
    items, _ = load_fashion_mnist("train")
    for slot, (top, left) in enumerate(pair_cells(16)):
        ink = half[:, top : top + 16, left : left + 16].sum(axis=(1, 2, 3))
        expected = items[indices[:, slot]].sum(axis=(1, 2)) / 4
        assert np.all(np.abs(ink - expected) <= 98)
    cells, cell_labels = load_item_cells(cell_size=16)
    assert cells.shape == (10000, 16, 16, 1) and len(cell_labels) == 10000
