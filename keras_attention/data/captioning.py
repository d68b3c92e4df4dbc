"""A user's own captioning data: a folder of images and a captions file."""

import os

import numpy as np

from keras_attention.data.captioned_scenes import Scenes, scene_splits
from keras_attention.data.files import DataFormatError, list_lines, read_data_file

CAPTIONS_FILE = "captions.tsv"
_EXPECTED = (
    "a UTF-8 text file with one `image file<TAB>caption` per line (an image "
    "may have several lines, one per caption)"
)


def load_image(path, image_size, channels):
    """Reads an image file (any format Pillow reads) as float32
    `(height, width, channels)` in [0, 1], resized to `image_size`
    `(height, width)`, and converted to 1 (grey) or 3 (RGB) channels."""
    from PIL import Image, UnidentifiedImageError

    if channels not in (1, 3):
        raise ValueError(f"`channels` must be 1 or 3; received {channels}.")
    try:
        with Image.open(path) as image:
            image = image.convert("L" if channels == 1 else "RGB")
            image = image.resize((image_size[1], image_size[0]), Image.BILINEAR)
            pixels = np.asarray(image, "float32") / 255.0
    except FileNotFoundError:
        raise FileNotFoundError(f"Image not found: '{path}'.") from None
    except (UnidentifiedImageError, OSError) as error:
        raise DataFormatError(f"'{path}' cannot be read as an image: {error}") from None
    return pixels.reshape(image_size[0], image_size[1], channels)


def read_captioned_images(directory, image_size=(64, 64), channels=1):
    """Reads a folder of images and its captions file.

    The folder holds the images and `captions.tsv`, a UTF-8 file with one
    `image file<TAB>caption` per line, the file name relative to the folder;
    an image with several captions has several lines. Blank lines and lines
    starting with `#` are skipped.

    Args:
        directory: the folder.
        image_size: `(height, width)` every image is resized to.
        channels: 1 (grey) or 3 (RGB).

    Returns:
        `Scenes` with the images (in the order they first appear in the file)
        and their captions; `boxes` and `classes` are None (no boxes are
        known, so attention localization is not measured).

    Raises:
        FileNotFoundError: if the folder, the captions file or an image it
            names does not exist.
        DataFormatError: naming the file and the lines, if a line has no tab
            or an empty side, a line is not UTF-8, the file has no captions,
            or an image cannot be read.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: '{directory}'.")
    path = os.path.join(directory, CAPTIONS_FILE)
    data = read_data_file(path, "Captions file", _EXPECTED)
    captions = {}
    problems = []
    for line_number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as error:
            problems.append((line_number, f"bytes that are not UTF-8 at {error.start}"))
            continue
        if not line.strip() or line.startswith("#"):
            continue
        name, tab, caption = line.partition("\t")
        if not tab or not name.strip() or not caption.strip():
            problems.append((line_number, f"{line[:40]!r}"))
            continue
        captions.setdefault(name.strip(), []).append(caption.strip())
    if problems:
        numbers = [n for n, _ in problems]
        raise DataFormatError(
            f"'{path}' has malformed lines ({list_lines(numbers)}); line "
            f"{problems[0][0]} has {problems[0][1]}. Expected {_EXPECTED}."
        )
    if not captions:
        raise DataFormatError(f"'{path}' has no captions. Expected {_EXPECTED}.")
    images = np.stack(
        [
            load_image(os.path.join(directory, name), image_size, channels)
            for name in captions
        ]
    )
    return Scenes(images, list(captions.values()), boxes=None, classes=None)


def load_caption_data(data="scenes", seed=0, num_train=None, image_size=(64, 64)):
    """The train, validation and test splits of a captioning dataset.

    Args:
        data: `"scenes"` (composed Fashion-MNIST scenes, see `scene_splits`)
            or the path of a folder for `read_captioned_images`, split
            80/10/10 at random.
        seed: the seed of the scenes or of the split.
        num_train: number of training scenes (`"scenes"` only; default
            20,000).
        image_size: `(height, width)` of a folder's images.

    Returns:
        dict `{"train", "valid", "test"}` of `Scenes`.
    """
    if data == "scenes":
        sizes = {"num_train": num_train} if num_train else {}
        return scene_splits(seed=seed, **sizes)
    scenes = read_captioned_images(data, image_size)
    count = len(scenes)
    if count < 3:
        raise DataFormatError(
            f"'{data}' has {count} captioned image(s); a train/validation/test "
            "split needs at least 3."
        )
    order = np.random.default_rng(seed).permutation(count)
    num_test = num_valid = max(1, count // 10)
    parts = {
        "test": order[:num_test],
        "valid": order[num_test : num_test + num_valid],
        "train": order[num_test + num_valid :],
    }
    return {
        name: Scenes(
            scenes.images[index], [scenes.captions[i] for i in index], None, None
        )
        for name, index in parts.items()
    }
