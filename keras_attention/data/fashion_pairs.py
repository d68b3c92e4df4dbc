"""Fashion pairs: a long-range image set built from Fashion-MNIST, for the
SAGAN claim that self-attention helps with distant parts of an image that
must agree (Zhang et al., 2019, "Self-Attention Generative Adversarial
Networks", arXiv:1805.08318).

Each 64x64 canvas holds two Fashion-MNIST items **of the same class**, one in
the top-left 32x32 cell and one in the bottom-right cell, each shifted by up
to `MAX_SHIFT` pixels (both directions, uniform) inside its cell. Their
centres lie about 45 pixels apart (32 along each axis), so a generator must
make two distant parts agree, and which class they share is the one thing
that ties them. The canvas is 64x64 rather than 32x64 because SAGAN's
networks take square images with a power-of-2 side; on it, the two cells are
the two halves of a diagonal of the 32x32 feature map, where the paper found
attention helps most.

A 32x32 cell with its item is the geometry of `load_fashion_mnist_images`
(28x28 padded to 32x32), so the cells of generated canvases can be
classified by a classifier trained on single items (`item_cells`); see
`keras_attention.evaluation.long_range`.

`cell_size=16` builds the same set at half the size, for a CPU: 32x32
canvases of items averaged down to 14x14 (2x2 pixel means) in 16x16 cells,
shifted by up to 2 pixels. A generator's step costs about a quarter as much,
and the two cells are still the two ends of a diagonal of the 16x16 feature
map.
"""

import numpy as np

from keras_attention._checks import check_positive_int
from keras_attention.data.fashion_mnist import load_fashion_mnist

ITEM_SIZE = 28
CELL_SIZE = 32
CANVAS_SIZE = 2 * CELL_SIZE
# The cell sides a set can be built at: the full size, and half of it with
# items averaged down 2x2.
CELL_SIZES = (16, 32)


def pair_cells(cell_size=CELL_SIZE):
    """Top-left corners of the two item cells: the ends of one diagonal."""
    return ((0, 0), (cell_size, cell_size))


def max_shift(cell_size=CELL_SIZE):
    """How far an item may sit from its cell's top and left edges; half of
    it centres the item, as `load_fashion_mnist_images` does at full size."""
    return cell_size - ITEM_SIZE * cell_size // CELL_SIZE


PAIR_CELLS = pair_cells()
MAX_SHIFT = max_shift()


def _check_cell_size(cell_size):
    if cell_size not in CELL_SIZES:
        raise ValueError(
            f"`cell_size` must be one of {CELL_SIZES}; received {cell_size!r}."
        )


def _scaled(items, cell_size):
    """Items averaged down to the size that fits `cell_size` cells."""
    factor = CELL_SIZE // cell_size
    if factor == 1:
        return items
    side = ITEM_SIZE // factor
    blocks = items.reshape(len(items), side, factor, side, factor)
    return np.rint(blocks.mean(axis=(2, 4))).astype("uint8")


def _check_items(items, labels):
    items, labels = np.asarray(items), np.asarray(labels)
    if items.ndim != 3 or items.shape[1:] != (ITEM_SIZE, ITEM_SIZE):
        raise ValueError(
            f"`items` must have shape (N, {ITEM_SIZE}, {ITEM_SIZE}); received "
            f"{items.shape}."
        )
    if labels.shape != (len(items),):
        raise ValueError(
            f"`labels` must have shape ({len(items)},) to match `items`; "
            f"received {labels.shape}."
        )
    return items, labels


def pair_indices(labels, seed=0):
    """Pairs items of the same class, each item in at most one pair.

    Within each class the items are shuffled and taken two at a time (an odd
    one out is left over); the pairs of all classes are then shuffled.

    Args:
        labels: int `(N,)` classes of the items.
        seed: seed of both shuffles.

    Returns:
        int64 `(P, 2)` item indices; `labels[p[0]] == labels[p[1]]` for every
        row `p`.

    Example:
        >>> pair_indices(np.array([0, 1, 0, 1, 1]), seed=0).shape
        (2, 2)
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"`labels` must be 1-D; received shape {labels.shape}.")
    rng = np.random.default_rng(seed)
    pairs = []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        pairs.append(members[: len(members) // 2 * 2].reshape(-1, 2))
    pairs = np.concatenate(pairs) if pairs else np.zeros((0, 2), "int64")
    return pairs[rng.permutation(len(pairs))].astype("int64")


def _place(items, canvas, cell, shifts):
    """Writes each item into its canvas at `cell` + its shift (in place)."""
    side = items.shape[1]
    for index, (item, (dy, dx)) in enumerate(zip(items, shifts, strict=True)):
        top, left = cell[0] + dy, cell[1] + dx
        canvas[index, top : top + side, left : left + side] = item


def compose_pairs(items, labels, num_pairs=None, seed=0, cell_size=CELL_SIZE):
    """Composes square canvases of two same-class items on a diagonal.

    Args:
        items: uint8 `(N, 28, 28)` Fashion-MNIST items.
        labels: int `(N,)` their classes.
        num_pairs: keep the first this many pairs of `pair_indices` (default:
            all, about N / 2).
        seed: seed of the pairing and of the shifts: the same seed gives the
            same canvases.
        cell_size: 32 (64x64 canvases of the items as they are) or 16 (32x32
            canvases of the items averaged down to 14x14).

    Returns:
        `(canvases, pair_labels, indices)`: uint8 `(P, 2 * cell_size,
        2 * cell_size, 1)`, int32 `(P,)` the class both items share, and
        int64 `(P, 2)` the items in the top-left and bottom-right cells.

    Raises:
        ValueError: for items that are not `(N, 28, 28)`, labels that do not
            match them, more pairs asked for than the items make, or a cell
            size not in `CELL_SIZES`.

    Example:
        >>> items = np.full((4, 28, 28), 255, "uint8")
        >>> canvases, classes, _ = compose_pairs(items, np.array([3, 3, 5, 5]))
        >>> canvases.shape, sorted(classes.tolist())
        ((2, 64, 64, 1), [3, 5])
    """
    items, labels = _check_items(items, labels)
    _check_cell_size(cell_size)
    indices = pair_indices(labels, seed)
    if num_pairs is not None:
        check_positive_int("num_pairs", num_pairs)
        if num_pairs > len(indices):
            raise ValueError(
                f"`num_pairs` must be at most {len(indices)} (the same-class "
                f"pairs {len(items)} items make); received {num_pairs}."
            )
        indices = indices[:num_pairs]
    # A stream of its own, so that the shifts of the first pairs do not
    # depend on how many pairs are kept.
    shifts = np.random.default_rng([seed, 1]).integers(
        0, max_shift(cell_size) + 1, (len(indices), 2, 2)
    )
    canvases = np.zeros((len(indices), 2 * cell_size, 2 * cell_size), "uint8")
    for slot, cell in enumerate(pair_cells(cell_size)):
        chosen = _scaled(items[indices[:, slot]], cell_size)
        _place(chosen, canvases, cell, shifts[:, slot])
    return canvases[..., None], labels[indices[:, 0]].astype("int32"), indices


def item_cells(items, seed=0, cell_size=CELL_SIZE):
    """Single items in cells, shifted and scaled as in `compose_pairs`: what
    a classifier of the pairs' cells trains on.

    Args:
        items: uint8 `(N, 28, 28)`.
        seed: seed of the shifts.
        cell_size: as in `compose_pairs`.

    Returns:
        uint8 `(N, cell_size, cell_size, 1)`.

    Example:
        >>> item_cells(np.zeros((3, 28, 28), "uint8")).shape
        (3, 32, 32, 1)
    """
    items, _ = _check_items(items, np.zeros(len(np.asarray(items))))
    _check_cell_size(cell_size)
    shifts = np.random.default_rng([seed, 2]).integers(
        0, max_shift(cell_size) + 1, (len(items), 2)
    )
    cells = np.zeros((len(items), cell_size, cell_size), "uint8")
    _place(_scaled(items, cell_size), cells, (0, 0), shifts)
    return cells[..., None]


def load_fashion_pairs(num_pairs=None, seed=0, cell_size=CELL_SIZE):
    """The fashion pairs of the Fashion-MNIST training split: 30,000 canvases
    (3,000 per class), each of the 60,000 items used once (Debian package
    `dataset-fashion-mnist`).

    Args:
        num_pairs: keep this many (default: all 30,000).
        seed: seed of the pairing and the shifts (default 0, the set that
            `keras-attention gan --data fashion-pairs` trains on).
        cell_size: as in `compose_pairs` (default 32: 64x64 canvases).

    Returns:
        `compose_pairs`' `(canvases, pair_labels, indices)`; the indices point
        into `load_fashion_mnist("train")`.
    """
    items, labels = load_fashion_mnist("train")
    return compose_pairs(items, labels, num_pairs, seed, cell_size)


def load_item_cells(seed=0, cell_size=CELL_SIZE):
    """The 10,000 items of the Fashion-MNIST test split (none of them in a
    training pair) in shifted cells, with their classes: the training set of
    the classifier that reads the pairs' cells.

    Args:
        seed: seed of the shifts.
        cell_size: as in `compose_pairs`.

    Returns:
        `(cells, labels)`: uint8 `(10000, cell_size, cell_size, 1)` and int32
        `(10000,)`.
    """
    items, labels = load_fashion_mnist("test")
    return item_cells(items, seed, cell_size), labels.astype("int32")
