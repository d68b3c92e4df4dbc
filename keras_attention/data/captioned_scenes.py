"""Captioned scenes composed from real Fashion-MNIST images: two or three items
on a canvas, captions generated from the items and their spatial relations,
and every item's bounding box, so that attention localization can be
measured."""

import dataclasses

import numpy as np

from keras_attention._checks import check_positive_int
from keras_attention.data.fashion_mnist import FASHION_MNIST_CLASSES, load_fashion_mnist

ITEM_SIZES = {"large": 28, "small": 18}


@dataclasses.dataclass(frozen=True)
class Scenes:
    """Composed scenes.

    Attributes:
        images: float32 `(N, H, W, 1)` in [0, 1].
        captions: for each scene, a list of captions (several phrasings).
        boxes: int32 `(N, K, 4)`: `(top, left, bottom, right)` of each item,
            bottom and right exclusive; rows of -1 for absent items. None
            when no boxes are known (a user's images).
        classes: int32 `(N, K)`: each item's Fashion-MNIST class, -1 if
            absent; None when unknown.
    """

    images: np.ndarray
    captions: list
    boxes: np.ndarray
    classes: np.ndarray

    def __len__(self):
        return len(self.images)


def _noun_phrase(name, size):
    words = f"small {name}" if size == "small" else name
    return f"{'an' if words[0] in 'aeiou' else 'a'} {words}"


def relation(box, other):
    """Where `box` is relative to `other`: "to the left of", "to the right
    of", "above" or "below", by the larger offset between their centres."""
    dy = (box[0] + box[2]) / 2 - (other[0] + other[2]) / 2
    dx = (box[1] + box[3]) / 2 - (other[1] + other[3]) / 2
    if abs(dx) >= abs(dy):
        return "to the left of" if dx < 0 else "to the right of"
    return "above" if dy < 0 else "below"


def describe(names, sizes, boxes):
    """Every phrasing of a scene: each item in turn is the subject, related to
    the next, and a third item is related to the subject.

    Example:

    >>> boxes = [(0, 0, 28, 28), (5, 36, 23, 54)]
    >>> describe(["bag", "sneaker"], ["large", "small"], boxes)
    ['a bag to the left of a small sneaker', 'a small sneaker to the right of a bag']
    """
    phrases = [_noun_phrase(n, s) for n, s in zip(names, sizes, strict=True)]
    captions = []
    count = len(names)
    for first in range(count):
        second = (first + 1) % count
        where = relation(boxes[first], boxes[second])
        caption = f"{phrases[first]} {where} {phrases[second]}"
        if count == 3:
            third = (first + 2) % count
            caption += (
                f" and {phrases[third]} {relation(boxes[third], boxes[first])} "
                f"the {names[first]}"
            )
        captions.append(caption)
    return captions


def _resize(image, size):
    if size == image.shape[0]:
        return image
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.BILINEAR))


def _overlaps(box, boxes, gap):
    return any(
        box[0] < b[2] + gap
        and b[0] < box[2] + gap
        and box[1] < b[3] + gap
        and b[1] < box[3] + gap
        for b in boxes
    )


def compose_scenes(
    images, labels, num_scenes, canvas_size=64, min_items=2, max_items=3, seed=0
):
    """Composes captioned scenes from item images.

    Each scene has `min_items` to `max_items` items of distinct classes, each
    large (28 pixels) or small (18), placed at random without overlapping,
    and one caption per item as the subject (see `describe`).

    Args:
        images: uint8 `(N, 28, 28)` item images (e.g. `load_fashion_mnist`).
        labels: `(N,)` class indices into `FASHION_MNIST_CLASSES`.
        num_scenes: number of scenes.
        canvas_size: side of the square canvas in pixels.
        min_items: fewest items per scene (at least 2: captions relate two).
        max_items: most items per scene (at most 3).
        seed: random seed (the scenes are deterministic given it).

    Returns:
        `Scenes`.
    """
    check_positive_int("num_scenes", num_scenes)
    check_positive_int("canvas_size", canvas_size)
    if not 2 <= min_items <= max_items <= 3:
        raise ValueError(
            "Scenes have 2 or 3 items: expected 2 <= min_items <= max_items <= 3; "
            f"received min_items={min_items}, max_items={max_items}."
        )
    needed = 2 * ITEM_SIZES["large"] + 2
    if canvas_size < needed:
        raise ValueError(
            f"`canvas_size` must be at least {needed} to hold two large items "
            f"side by side; received canvas_size={canvas_size}."
        )
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.ndim != 3 or images.shape[1:] != (28, 28) or len(images) != len(labels):
        raise ValueError(
            "`images` must be (N, 28, 28) with one label each; received images "
            f"{images.shape} and labels {labels.shape}."
        )
    rng = np.random.default_rng(seed)
    by_class = {c: np.flatnonzero(labels == c) for c in np.unique(labels)}
    canvases = np.zeros((num_scenes, canvas_size, canvas_size, 1), "float32")
    boxes = np.full((num_scenes, max_items, 4), -1, "int32")
    classes = np.full((num_scenes, max_items), -1, "int32")
    captions = []
    scene = 0
    while scene < num_scenes:
        count = int(rng.integers(min_items, max_items + 1))
        chosen = rng.choice(sorted(by_class), size=count, replace=False)
        sizes = [str(rng.choice(list(ITEM_SIZES))) for _ in range(count)]
        placed = []
        for size in sizes:
            side = ITEM_SIZES[size]
            for _ in range(100):
                top, left = rng.integers(0, canvas_size - side + 1, size=2)
                box = (int(top), int(left), int(top) + side, int(left) + side)
                if not _overlaps(box, placed, gap=1):
                    placed.append(box)
                    break
            else:
                break
        if len(placed) < count:  # no room: draw the scene again
            continue
        for k, (label, size, box) in enumerate(zip(chosen, sizes, placed, strict=True)):
            item = images[rng.choice(by_class[label])]
            item = _resize(item, ITEM_SIZES[size]).astype("float32") / 255.0
            canvases[scene, box[0] : box[2], box[1] : box[3], 0] = item
            boxes[scene, k] = box
            classes[scene, k] = label
        names = [FASHION_MNIST_CLASSES[c] for c in chosen]
        captions.append(describe(names, sizes, placed))
        scene += 1
    return Scenes(canvases, captions, boxes, classes)


def scene_splits(
    num_train=20000, num_valid=1000, num_test=1000, canvas_size=64, seed=0
):
    """Train, validation and test scenes: training and validation scenes are
    built from Fashion-MNIST's training images, test scenes from its test
    images, so no test item was seen in training.

    Returns:
        dict `{"train", "valid", "test"}` of `Scenes`.
    """
    train_images, train_labels = load_fashion_mnist("train")
    test_images, test_labels = load_fashion_mnist("test")
    return {
        "train": compose_scenes(
            train_images, train_labels, num_train, canvas_size, seed=seed
        ),
        "valid": compose_scenes(
            train_images, train_labels, num_valid, canvas_size, seed=seed + 1
        ),
        "test": compose_scenes(
            test_images, test_labels, num_test, canvas_size, seed=seed + 2
        ),
    }
