"""Checks of what the task runners write: a picture that shows something, a
`.keras` archive that holds the model, a vocabulary file of tokens."""

import json
import zipfile

import numpy as np
from PIL import Image


def assert_picture(path, min_size=(100, 100)):
    """`path` decodes as a PNG of at least `min_size` (width, height) pixels
    with something drawn on it: not one flat colour."""
    with Image.open(path) as image:
        assert image.format == "PNG", (path, image.format)
        width, height = image.size
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert width >= min_size[0] and height >= min_size[1], (path, image.size)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    drawn = 1.0 - counts.max() / len(pixels)  # pixels off the background
    assert len(colours) > 1 and drawn > 0.005, f"{path} is blank ({drawn:.4f})"


def assert_keras_archive(path, class_name):
    """`path` is a `.keras` archive of a model of class `class_name`, with
    its weights."""
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        config = json.loads(archive.read("config.json"))
    assert {"config.json", "metadata.json", "model.weights.h5"} <= names, names
    assert config["class_name"] == class_name, config["class_name"]


def vocabulary_lines(path):
    """The tokens of a vocabulary file (one per line), checked to be
    distinct and non-empty."""
    tokens = path.read_text(encoding="utf-8").splitlines()
    assert tokens and all(tokens), f"{path} has an empty line"
    assert len(set(tokens)) == len(tokens), f"{path} repeats a token"
    return tokens
