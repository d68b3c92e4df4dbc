import contextlib
import io
import json

import keras
import numpy as np
import pytest
from PIL import Image

from keras_attention import cli
from keras_attention.data import FASHION_MNIST_CLASSES, Scenes, train_word_piece
from keras_attention.data.tokenization import END_ID, START_ID
from keras_attention.tasks import caption
from keras_attention.tasks.caption import (
    bleu_scores,
    box_overlap,
    compare,
    localization,
    run_caption,
    words_of,
)
from keras_attention.tasks.resumable import read_epoch_log
from tests.tasks.callbacks import StopAt
from tests.tasks.outputs import assert_keras_archive, assert_picture, vocabulary_lines

SHAPES = {"bar": (2, 10, 6, 22), "block": (4, 4, 12, 12)}


def shape_scene(rng, size=24):
    """A canvas with one bright bar or block, left or right, and its two
    captions."""
    shape = rng.choice(list(SHAPES))
    side = rng.choice(["left", "right"])
    top, left, bottom, right = SHAPES[shape]
    image = np.zeros((size, size), "uint8")
    shift = 0 if side == "left" else size // 2 - 2
    image[top + 6 : bottom + 6, left + shift : min(right + shift, size)] = 255
    return image, [f"a {shape} on the {side}", f"the {shape} is on the {side}"]


def write_shapes_folder(folder, num_images):
    """A folder of `num_images` shape scenes and their `captions.tsv`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    lines = []
    for i in range(num_images):
        image, captions = shape_scene(rng)
        Image.fromarray(image).save(folder / f"{i}.png")
        lines += [f"{i}.png\t{caption}" for caption in captions]
    (folder / "captions.tsv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="session")
def shapes_folder(tmp_path_factory):
    return write_shapes_folder(tmp_path_factory.mktemp("shapes"), 120)


@pytest.fixture(scope="session")
def caption_run(shapes_folder, tmp_path_factory):
    """A 2-epoch run stopped at the start of its second epoch (a crash), then
    the command line's same run in the same folder: the folder and what the
    command printed."""
    out = tmp_path_factory.mktemp("caption")
    with pytest.raises(KeyboardInterrupt):
        run_caption(
            out,
            data=str(shapes_folder),
            epochs=2,
            batch_size=16,
            beam_width=2,
            callbacks=[StopAt(1)],
            verbose=0,
        )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli.main(
            [
                "caption",
                "--data",
                str(shapes_folder),
                "--epochs",
                "2",
                "--batch-size",
                "16",
                "--beam",
                "2",
                "--out",
                str(out),
            ]
        )
    return out, printed.getvalue()


@pytest.fixture(scope="session")
def caption_dir(caption_run):
    return caption_run[0]


@pytest.mark.slow
@pytest.mark.xdist_group("caption_dir")
def test_interrupted_training_resumes(caption_run):
    out, printed = caption_run
    assert "resuming after epoch 1" in printed and "epoch 1/2:" not in printed
    assert "epoch 2/2:" in printed
    logged = read_epoch_log(out / "checkpoints" / "epochs.csv")
    assert [row["epoch"] for row in logged] == [0, 1]


@pytest.mark.slow
@pytest.mark.xdist_group("caption_dir")
def test_caption_learns_a_folder_and_writes_metrics_and_plots(caption_dir):
    metrics = json.loads((caption_dir / "metrics.json").read_text())
    for key in ("bleu1", "bleu2", "bleu3", "bleu4", "beam2_bleu4"):
        assert 0.0 <= metrics[key] <= 100.0
    assert metrics["model"] == "attention" and metrics["test_images"] == 12
    assert 0.0 <= metrics["exact_caption_rate"] <= 1.0
    assert metrics["epochs"] == 2 and len(metrics["samples"]) == 5
    assert "attention_in_box" not in metrics  # a user's images have no boxes
    assert_keras_archive(caption_dir / "model.keras", "ShowAttendTell")
    assert_picture(caption_dir / "captions.png")
    assert_picture(caption_dir / "attention_0.png")
    vocabulary = vocabulary_lines(caption_dir / "vocabulary.txt")
    assert {"bar", "block", "left", "right"} <= set(vocabulary)


@pytest.mark.slow
@pytest.mark.xdist_group("caption_dir")
def test_loaded_model_captions_an_image_file(caption_dir, tmp_path, capsys):
    rng = np.random.default_rng(5)
    image, captions = shape_scene(rng)
    Image.fromarray(image).save(tmp_path / "mine.png")
    cli.main(
        [
            "caption",
            "--load",
            str(caption_dir / "model.keras"),
            "--out",
            str(tmp_path),
            str(tmp_path / "mine.png"),
        ]
    )
    line = capsys.readouterr().out.strip().splitlines()[-1]
    # caption <TAB> mean log-prob <TAB> path [<TAB> (low confidence)]
    caption, score, path, *flag = line.split("\t")
    assert path.endswith("mine.png")
    assert float(score) <= 0 and flag in ([], ["(low confidence)"])
    vocabulary = set(" ".join(captions).split()) | {"bar", "block", "left", "right"}
    assert set(caption.split()) <= vocabulary
    assert_picture(tmp_path / "mine_attention.png")


@pytest.mark.slow
def test_compare_writes_bleu_side_by_side(shapes_folder, tmp_path):
    results = compare(
        tmp_path,
        ["attention", "no-attention"],
        data=str(shapes_folder),
        epochs=1,
        beam_width=1,
        verbose=0,
        encoder_filters=(4, 8),
        units=16,
    )
    summary = json.loads((tmp_path / "comparison.json").read_text())
    assert set(summary) == {"attention", "no-attention"}
    assert summary["attention"]["bleu4"] == results["attention"]["bleu4"]
    assert_picture(tmp_path / "comparison.png")
    assert (tmp_path / "no-attention" / "model.keras").exists()


def test_an_unknown_model_is_refused(tmp_path):
    with pytest.raises(ValueError, match="attention"):
        run_caption(tmp_path, model="transformer")


def test_box_overlap_is_the_share_of_each_cell_inside_the_box():
    whole = box_overlap((2, 2), (8, 8), (0, 0, 8, 8))
    np.testing.assert_allclose(whole, 1.0)
    quarter = box_overlap((2, 2), (8, 8), (0, 0, 4, 4))
    np.testing.assert_allclose(quarter, [1, 0, 0, 0])
    straddling = box_overlap((2, 2), (8, 8), (2, 2, 6, 6))
    np.testing.assert_allclose(straddling, [0.25] * 4)
    # Uniform attention puts the box's area share inside it: chance level.
    uniform = np.full(4, 0.25)
    assert uniform @ straddling == pytest.approx(16 / 64)


class _StubCaptioner:
    """A model that looks exactly at one grid cell for every word."""

    start_token_id = START_ID
    grid_shape = (2, 2)

    def __init__(self, tokenizer, cell):
        self.tokenizer = tokenizer
        self.cell = cell

    def attention_weights(self, images, decoder_ids):
        weights = np.zeros((*np.shape(decoder_ids), 4), "float32")
        weights[..., self.cell] = 1.0
        return weights


def test_localization_measures_attention_inside_the_named_item():
    bag, shirt = (
        FASHION_MNIST_CLASSES.index("bag"),
        FASHION_MNIST_CLASSES.index("shirt"),
    )
    scenes = Scenes(
        images=np.zeros((1, 8, 8, 1), "float32"),
        captions=[["a bag above a shirt"]],
        boxes=np.array([[[0, 0, 4, 4], [4, 4, 8, 8]]], "int32"),
        classes=np.array([[bag, shirt]], "int32"),
    )
    tokenizer = train_word_piece(["a bag above a shirt and a coat"] * 20, 60)
    ids = [tokenizer.token_to_id(w) for w in "a bag above a shirt and a coat".split()]
    token_ids = np.array([[*ids, END_ID]], "int32")
    looking_top_left = localization(_StubCaptioner(tokenizer, 0), scenes, token_ids)
    # "bag" is in the top-left box, "shirt" is not; "coat" is not in the scene.
    np.testing.assert_allclose(looking_top_left["in_box"], [1.0, 0.0])
    np.testing.assert_allclose(looking_top_left["chance"], [0.25, 0.25])
    assert looking_top_left["unmatched"] == 1


def test_bleu_against_every_phrasing():
    references = [["a bag above a shirt", "a shirt below a bag"], ["a small top"]]
    perfect = bleu_scores(["a shirt below a bag", "a small top"], references)
    assert perfect == {f"bleu{n}": pytest.approx(100.0) for n in range(1, 5)}
    wrong = bleu_scores(["a coat below a bag", "a small top"], references)
    assert wrong["bleu1"] > wrong["bleu4"] and wrong["bleu4"] < 100.0


def test_words_of_stops_at_the_end_token():
    tokenizer = train_word_piece(["a bag above a shirt"] * 20, 60)
    ids = [tokenizer.token_to_id(w) for w in ("a", "bag")]
    assert words_of(tokenizer, [*ids, END_ID, ids[1], 0]) == "a bag"


@pytest.mark.slow
@pytest.mark.xdist_group("caption_dir")
def test_loaded_captioner_is_the_trained_one(caption_dir):
    model = keras.saving.load_model(caption_dir / "model.keras")
    assert model.attention is True
    # The tokenizer of the run, vocabulary file and all.
    vocabulary = vocabulary_lines(caption_dir / "vocabulary.txt")
    assert model.tokenizer.get_vocabulary() == vocabulary
    assert model.vocabulary_size == len(vocabulary)


def test_overlays_of_a_batch_are_those_of_each_image_alone(tmp_path, monkeypatch):
    """The report captions its overlay images in one batch: each image's
    words and attention maps are those it gets captioned alone."""
    rng = np.random.default_rng(0)
    scenes = [shape_scene(rng) for _ in range(3)]
    images = np.stack([image[..., None] / 255.0 for image, _ in scenes])
    texts = [caption for _, captions in scenes for caption in captions]
    keras.utils.set_random_seed(0)
    model = caption.build_model(
        "attention",
        24,
        (24, 24, 1),
        encoder_filters=(4, 8),
        units=16,
        tokenizer=train_word_piece(texts, 24),
    )
    drawn = []
    monkeypatch.setattr(
        caption,
        "plot_caption_attention",
        lambda image, words, weights, grid, path, title, boxes: drawn.append(
            (path, words, weights, title)
        ),
    )
    paths = [tmp_path / f"{i}.png" for i in range(3)]
    batched = caption.plot_overlays(model, images, paths)
    alone = [caption.plot_overlay(model, images[i], paths[i]) for i in range(3)]
    assert batched == alone
    for (path, words, weights, title), again in zip(drawn[:3], drawn[3:], strict=True):
        assert (path, words, title) == (again[0], again[1], again[3])
        assert weights.shape[0] == len(words)
        np.testing.assert_allclose(weights, again[2], atol=1e-6)
