import numpy as np
import pytest
from PIL import Image

from keras_attention.data import DataFormatError
from keras_attention.data.captioning import (
    load_caption_data,
    load_image,
    read_captioned_images,
)


def write_folder(folder, captions, size=(20, 30), mode="RGB"):
    """Images named in `captions` ({name: [caption, ...]}) and captions.tsv."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for name in captions:
        shape = (*size, 3) if mode == "RGB" else size
        pixels = rng.integers(0, 256, shape).astype("uint8")
        Image.fromarray(pixels, mode).save(folder / name)
    lines = ["# image<TAB>caption", ""]
    for name, texts in captions.items():
        lines += [f"{name}\t{text}" for text in texts]
    (folder / "captions.tsv").write_text("\n".join(lines) + "\n")
    return folder


def test_folder_of_images_and_captions(tmp_path):
    folder = write_folder(
        tmp_path / "pics",
        {"cat.png": ["a cat", "a small cat"], "dog.jpg": ["a dog"]},
    )
    scenes = read_captioned_images(folder, image_size=(16, 24))
    assert scenes.images.shape == (2, 16, 24, 1) and scenes.images.dtype == np.float32
    assert 0.0 <= scenes.images.min() and scenes.images.max() <= 1.0
    assert scenes.captions == [["a cat", "a small cat"], ["a dog"]]
    assert scenes.boxes is None and scenes.classes is None
    rgb = read_captioned_images(folder, image_size=(8, 8), channels=3)
    assert rgb.images.shape == (2, 8, 8, 3)


def test_folder_is_split_for_training(tmp_path):
    names = {f"{i}.png": [f"picture {i}"] for i in range(20)}
    folder = write_folder(tmp_path / "pics", names, mode="L")
    splits = load_caption_data(str(folder), seed=3)
    sizes = {name: len(part) for name, part in splits.items()}
    assert sizes == {"train": 16, "valid": 2, "test": 2}
    everything = [c for part in splits.values() for cs in part.captions for c in cs]
    assert sorted(everything) == sorted(c for cs in names.values() for c in cs)


@pytest.mark.parametrize(
    "line, found",
    [("cat.png a cat without a tab", "line 3"), ("cat.png\t", "line 3")],
)
def test_malformed_captions_file_names_the_line(tmp_path, line, found):
    folder = write_folder(tmp_path / "pics", {"cat.png": ["a cat"]})
    (folder / "captions.tsv").write_text(f"cat.png\ta cat\n\n{line}\n")
    with pytest.raises(DataFormatError, match=f"captions.tsv.*{found}"):
        read_captioned_images(folder)


def test_missing_or_unreadable_images_are_named(tmp_path):
    folder = write_folder(tmp_path / "pics", {"cat.png": ["a cat"]})
    (folder / "captions.tsv").write_text("cat.png\ta cat\nghost.png\ta ghost\n")
    with pytest.raises(FileNotFoundError, match="ghost.png"):
        read_captioned_images(folder)
    (folder / "ghost.png").write_text("not an image")
    with pytest.raises(DataFormatError, match="ghost.png.*cannot be read as an image"):
        read_captioned_images(folder)
    with pytest.raises(FileNotFoundError, match="Image folder not found"):
        read_captioned_images(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="Captions file not found"):
        read_captioned_images(tmp_path)


def test_binary_or_empty_captions_file(tmp_path):
    folder = write_folder(tmp_path / "pics", {"cat.png": ["a cat"]})
    (folder / "captions.tsv").write_bytes(b"cat.png\x00\ta cat\n")
    with pytest.raises(DataFormatError, match="binary file.*line 1"):
        read_captioned_images(folder)
    (folder / "captions.tsv").write_text("# nothing yet\n")
    with pytest.raises(DataFormatError, match="has no captions"):
        read_captioned_images(folder)


def test_load_image_converts_channels(tmp_path):
    Image.fromarray(np.full((4, 6, 3), 255, "uint8")).save(tmp_path / "white.png")
    grey = load_image(tmp_path / "white.png", (8, 12), 1)
    assert grey.shape == (8, 12, 1)
    np.testing.assert_allclose(grey, 1.0)
    with pytest.raises(ValueError, match="`channels` must be 1 or 3"):
        load_image(tmp_path / "white.png", (8, 8), 2)
