"""Image datasets that install offline: Fashion-MNIST from the Debian package
`dataset-fashion-mnist`, read from its IDX files."""

import gzip
import os

import numpy as np

from keras_attention.data.files import DataFormatError
from keras_attention.data.packages import require_data

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
# The ten classes, named as a caption would say them.
FASHION_MNIST_CLASSES = (
    "top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_UNSIGNED_BYTE = 0x08


def read_idx(path):
    """Reads an IDX file of unsigned bytes (the MNIST format), gzipped or not.

    Args:
        path: the file.

    Returns:
        A uint8 array with the file's dimensions.

    Raises:
        FileNotFoundError: if `path` does not exist.
        DataFormatError: if the header is not that of an unsigned-byte IDX
            file or the data is shorter or longer than the header says.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"IDX file not found: '{path}'.")
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as file:
            data = file.read()
    except (OSError, EOFError) as error:
        raise DataFormatError(f"'{path}' cannot be read as gzip: {error}.") from error
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != _UNSIGNED_BYTE:
        raise DataFormatError(
            f"'{path}' is not an unsigned-byte IDX file: it starts with "
            f"{data[:4]!r}, expected b'\\x00\\x00\\x08' and the number of "
            "dimensions."
        )
    rank = data[3]
    header = 4 + 4 * rank
    if len(data) < header:
        raise DataFormatError(
            f"'{path}' ends inside its header ({len(data)} bytes, expected at "
            f"least {header} for {rank} dimensions)."
        )
    shape = tuple(
        int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(rank)
    )
    size = int(np.prod(shape))
    if len(data) - header != size:
        raise DataFormatError(
            f"'{path}' has {len(data) - header} bytes of data; its header "
            f"{shape} says {size}."
        )
    return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def load_fashion_mnist(split="train", directory=FASHION_MNIST_DIR):
    """Fashion-MNIST images and labels.

    Args:
        split: `"train"` (60,000) or `"test"` (10,000).
        directory: the folder of the four IDX files.

    Returns:
        `(images, labels)`: uint8 `(N, 28, 28)` and uint8 `(N,)` indices into
        `FASHION_MNIST_CLASSES`.
    """
    if split not in _FILES:
        raise ValueError(f"`split` must be one of {tuple(_FILES)}; received {split!r}.")
    require_data(
        directory,
        FASHION_MNIST_DIR,
        FASHION_MNIST_PACKAGE,
        "Fashion-MNIST",
        f"Fashion-MNIST folder not found: '{directory}'. Install it with "
        f"`apt-get install {FASHION_MNIST_PACKAGE}`.",
    )
    images_file, labels_file = (os.path.join(directory, f) for f in _FILES[split])
    images, labels = read_idx(images_file), read_idx(labels_file)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataFormatError(
            f"'{images_file}' and '{labels_file}' do not match: images "
            f"{images.shape}, labels {labels.shape}; expected (N, 28, 28) and (N,)."
        )
    return images, labels
