import gzip

import numpy as np
import pytest

from keras_attention.data.captioned_scenes import (
    ITEM_SIZES,
    compose_scenes,
    describe,
    relation,
)
from keras_attention.data.fashion_mnist import (
    FASHION_MNIST_CLASSES,
    load_fashion_mnist,
    read_idx,
)
from keras_attention.data.files import DataFormatError


def _items(num_per_class=3):
    """Synthetic 28x28 items: class c is a square of brightness 20 * (c + 1)."""
    labels = np.repeat(np.arange(10), num_per_class).astype("uint8")
    images = np.zeros((len(labels), 28, 28), "uint8")
    for i, label in enumerate(labels):
        images[i, 4:24, 4:24] = 20 * (label + 1)
    return images, labels


def _idx(shape, payload=None, magic=b"\x00\x00\x08"):
    header = (
        magic + bytes([len(shape)]) + b"".join(int(d).to_bytes(4, "big") for d in shape)
    )
    if payload is None:
        payload = bytes(int(np.prod(shape)))
    return header + payload


def test_read_idx_plain_and_gzipped(tmp_path):
    data = _idx((2, 3), bytes(range(6)))
    (tmp_path / "a.idx").write_bytes(data)
    (tmp_path / "a.idx.gz").write_bytes(gzip.compress(data))
    for name in ("a.idx", "a.idx.gz"):
        array = read_idx(tmp_path / name)
        assert array.dtype == np.uint8 and array.tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize(
    "content, message",
    [
        (_idx((2, 3), magic=b"\x00\x00\x0d"), "not an unsigned-byte IDX"),
        (_idx((2, 3), bytes(5)), r"5 bytes of data; its header \(2, 3\) says 6"),
        (b"\x00\x00\x08\x02\x00\x00", "ends inside its header"),
        (b"PK\x03\x04 a zip", "not an unsigned-byte IDX"),
    ],
)
def test_read_idx_rejects_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad.idx"
    path.write_bytes(content)
    with pytest.raises(DataFormatError, match=message):
        read_idx(path)


def test_read_idx_rejects_broken_gzip(tmp_path):
    path = tmp_path / "bad.gz"
    path.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataFormatError, match="gzip"):
        read_idx(path)


@pytest.mark.needs_package("dataset-fashion-mnist")
def test_fashion_mnist_from_the_debian_package():
    images, labels = load_fashion_mnist("test")
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)
    assert np.bincount(labels).tolist() == [1000] * 10
    assert len(FASHION_MNIST_CLASSES) == 10


def test_missing_folder_names_the_package(tmp_path):
    with pytest.raises(
        FileNotFoundError, match="apt-get install dataset-fashion-mnist"
    ):
        load_fashion_mnist("train", directory=str(tmp_path / "nowhere"))


def test_relation_follows_the_larger_offset():
    left, right = (0, 0, 10, 10), (2, 30, 12, 40)
    assert relation(left, right) == "to the left of"
    assert relation(right, left) == "to the right of"
    top, bottom = (0, 0, 10, 10), (30, 5, 40, 15)
    assert relation(top, bottom) == "above" and relation(bottom, top) == "below"


def test_describe_gives_one_phrasing_per_subject():
    captions = describe(
        ["ankle boot", "bag", "top"],
        ["small", "large", "large"],
        [(0, 0, 18, 18), (0, 30, 28, 58), (34, 0, 62, 28)],
    )
    assert captions == [
        "a small ankle boot to the left of a bag and a top below the ankle boot",
        "a bag above a top and a small ankle boot to the left of the bag",
        "a top below a small ankle boot and a bag above the top",
    ]


def test_composed_scenes_match_their_boxes_and_captions():
    images, labels = _items()
    scenes = compose_scenes(images, labels, 40, canvas_size=64, seed=3)
    assert scenes.images.shape == (40, 64, 64, 1) and len(scenes) == 40
    assert scenes.images.dtype == np.float32 and scenes.images.max() <= 1.0
    for image, boxes, classes, captions in zip(
        scenes.images, scenes.boxes, scenes.classes, scenes.captions, strict=True
    ):
        present = classes >= 0
        assert 2 <= present.sum() <= 3 and len(captions) == present.sum()
        assert len(set(classes[present])) == present.sum()  # distinct classes
        covered = np.zeros(image.shape[:2], bool)
        for box, label in zip(boxes[present], classes[present], strict=True):
            top, left, bottom, right = box
            assert bottom - top in ITEM_SIZES.values() and bottom - top == right - left
            assert not covered[top:bottom, left:right].any()  # no overlap
            covered[top:bottom, left:right] = True
            # The brightest pixel inside the box is the item's own brightness.
            peak = image[top:bottom, left:right].max() * 255
            assert abs(peak - 20 * (label + 1)) <= 1
            assert FASHION_MNIST_CLASSES[label] in captions[0]
        assert not image[~covered].any()  # nothing outside the boxes


def test_scenes_are_deterministic_per_seed():
    images, labels = _items()
    a = compose_scenes(images, labels, 5, seed=1)
    b = compose_scenes(images, labels, 5, seed=1)
    c = compose_scenes(images, labels, 5, seed=2)
    assert a.captions == b.captions and np.array_equal(a.images, b.images)
    assert a.captions != c.captions


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"canvas_size": 40}, "at least 58"),
        ({"min_items": 1}, "2 <= min_items <= max_items <= 3"),
        ({"max_items": 4}, "2 <= min_items <= max_items <= 3"),
        ({"num_scenes": 0}, "`num_scenes` must be a positive integer"),
    ],
)
def test_bad_scene_settings(kwargs, message):
    images, labels = _items()
    options = {"num_scenes": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        compose_scenes(images, labels, **options)


def test_items_must_be_28_by_28():
    with pytest.raises(ValueError, match=r"\(N, 28, 28\).*\(4, 32, 32\)"):
        compose_scenes(np.zeros((4, 32, 32)), np.zeros(4), 2)
