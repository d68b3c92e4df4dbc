"""`keras-attention caption`: train, evaluate and use an image captioner."""

import os

import numpy as np

from keras_attention.data.captioning import load_caption_data, load_image
from keras_attention.data.fashion_mnist import FASHION_MNIST_CLASSES
from keras_attention.data.pipeline import caption_dataset, encode_captions
from keras_attention.data.tokenization import END_ID
from keras_attention.decoding import mean_log_probs
from keras_attention.models import ShowAttendTell
from keras_attention.names import CAPTION_MODELS
from keras_attention.tasks import runner
from keras_attention.tasks.common import (
    cached_word_piece,
    check_training_size,
    phase,
)
from keras_attention.viz import (
    plot_caption_attention,
    plot_caption_grid,
    plot_localization,
    plot_metric_spread,
)

# Model name -> whether the decoder attends over the image.
MODELS = dict(zip(CAPTION_MODELS, (True, False), strict=True))
SETTINGS = {
    "vocabulary_size": 500,
    "max_caption_length": 24,  # tokens, [START] and [END] included
    "epochs": 12,
    "patience": 3,
    "encoder_filters": (16, 32, 64),
}
EVAL_BATCH_SIZE = 100
NUM_OVERLAYS = 4
NUM_GRID_IMAGES = 16
# The figures of each model in `comparison.json`.
SUMMARY_KEYS = (
    "bleu1",
    "bleu2",
    "bleu3",
    "bleu4",
    "exact_caption_rate",
    "attention_in_box",
    "attention_chance",
    "train_seconds",
    "epochs",
)
# The words of a caption that name a scene's item, mapped to its class.
NAME_WORDS = {
    word: label
    for label, name in enumerate(FASHION_MNIST_CLASSES)
    for word in name.split()
}


def build_model(name, vocabulary_size, image_shape, settings=SETTINGS, **kwargs):
    """The captioner called `name` (one of `MODELS`) sized for the data."""
    if name not in MODELS:
        raise ValueError(f"`model` must be one of {list(MODELS)}; received {name!r}.")
    kwargs.setdefault("encoder_filters", settings["encoder_filters"])
    return ShowAttendTell(
        vocabulary_size,
        image_shape=image_shape,
        attention=MODELS[name],
        max_caption_length=settings["max_caption_length"] - 1,
        **kwargs,
    )


def caption_images(model, images, beam_width=1, length_penalty=0.6):
    """Captions images with a model that carries its tokenizer.

    Args:
        model: a trained `ShowAttendTell` with a `tokenizer`.
        images: `(N, H, W, C)` in [0, 1], of the model's `image_shape`.
        beam_width: 1 for greedy search, more for beam search.
        length_penalty: alpha of the beam-search length penalty.

    Returns:
        `(captions, token_ids)`: N strings, and int32 `(N, T)` tokens ending
        with `[END]` and 0-padded.
    """
    if model.tokenizer is None:
        raise ValueError(
            "This model has no tokenizer; train it with `keras-attention "
            "caption`, or pass `tokenizer=` when building it."
        )
    images = np.asarray(images, "float32")
    outputs = []
    for start in range(0, len(images), EVAL_BATCH_SIZE):
        batch = images[start : start + EVAL_BATCH_SIZE]
        rows = len(batch)
        # One batch size, so that XLA compiles the search once.
        batch = np.pad(batch, ((0, EVAL_BATCH_SIZE - rows), (0, 0), (0, 0), (0, 0)))
        tokens = model.generate(
            batch, beam_width=beam_width, length_penalty=length_penalty
        )
        outputs.append(np.asarray(tokens)[:rows])
    token_ids = np.concatenate(outputs)
    return [words_of(model.tokenizer, row) for row in token_ids], token_ids


def caption_with_confidence(model, images, beam_width=1, length_penalty=0.6):
    """Captions images and scores each caption by the model's mean token
    log-probability (see `keras_attention.decoding.mean_log_probs`): images
    unlike the training data still get a caption, but a lower score.

    Args:
        model, images, beam_width, length_penalty: as `caption_images`'s.

    Returns:
        A list of `(caption, mean_log_prob)`, one per image: the caption
        `caption_images` gives, and the mean over its tokens (its `[END]`
        included) of `log p(token | image, previous tokens)`, a float <= 0.
    """
    captions, token_ids = caption_images(model, images, beam_width, length_penalty)
    scores = caption_log_probs(model, images, token_ids)
    return [
        (caption, float(score)) for caption, score in zip(captions, scores, strict=True)
    ]


def caption_log_probs(model, images, token_ids):
    """The mean token log-probability of captions `token_ids` (int `(N, T)`,
    as `caption_images` returns them) of `images` under the model: float32
    `(N,)`."""
    images = np.asarray(images, "float32")
    return mean_log_probs(model, {"images": images}, token_ids, EVAL_BATCH_SIZE)


def words_of(tokenizer, token_ids):
    """The caption of generated tokens: the words up to `[END]`."""
    words = []
    for token in token_ids:
        if int(token) == END_ID:
            break
        if int(token) > END_ID:
            words.append(tokenizer.id_to_token(int(token)))
    return " ".join(words).replace(" ##", "")


def box_overlap(grid_shape, image_shape, box):
    """The share of each grid cell that lies inside a box.

    Args:
        grid_shape: `(h, w)` of the attention grid (row-major locations).
        image_shape: `(H, W)` of the image.
        box: `(top, left, bottom, right)` in pixels, bottom/right exclusive.

    Returns:
        float32 `(h * w,)`: for each cell, the fraction of its pixels inside
        the box; `weights @ overlap` is the attention mass inside the box.
    """
    h, w = grid_shape
    height, width = image_shape[:2]
    top, left, bottom, right = box
    rows = np.arange(h + 1) * height / h
    cols = np.arange(w + 1) * width / w
    row_in = np.clip(np.minimum(rows[1:], bottom) - np.maximum(rows[:-1], top), 0, None)
    col_in = np.clip(np.minimum(cols[1:], right) - np.maximum(cols[:-1], left), 0, None)
    cell_area = (height / h) * (width / w)
    return (np.outer(row_in, col_in) / cell_area).reshape(-1).astype("float32")


def localization(model, scenes, token_ids):
    """Attention localization on generated captions.

    For each generated word that names an item of its scene, the share of
    that step's attention inside the item's box, and the share of the image
    the box covers (the level of attention spread evenly).

    Args:
        model: a `ShowAttendTell` with attention.
        scenes: `Scenes` with boxes and classes.
        token_ids: int `(N, T)` generated for `scenes.images`.

    Returns:
        dict with `in_box` and `chance` (one value per named word) and
        `unmatched` (the number of generated names of items the scene lacks).
    """
    tokenizer = model.tokenizer
    image_shape = scenes.images.shape[1:3]
    in_box, chance, unmatched = [], [], 0
    for start in range(0, len(token_ids), EVAL_BATCH_SIZE):
        tokens = np.asarray(token_ids[start : start + EVAL_BATCH_SIZE], "int32")
        decoder_ids = np.concatenate(
            [np.full((len(tokens), 1), model.start_token_id, "int32"), tokens[:, :-1]],
            axis=1,
        )
        weights = np.asarray(
            model.attention_weights(
                scenes.images[start : start + len(tokens)], decoder_ids
            ),
            "float32",
        )
        for row, (scene_tokens, scene_weights) in enumerate(
            zip(tokens, weights, strict=True)
        ):
            scene = start + row
            for t, token in enumerate(scene_tokens):
                if int(token) == END_ID or int(token) == 0:
                    break
                label = NAME_WORDS.get(tokenizer.id_to_token(int(token)))
                if label is None:
                    continue
                items = np.flatnonzero(scenes.classes[scene] == label)
                if not len(items):
                    unmatched += 1
                    continue
                box = scenes.boxes[scene, items[0]]
                overlap = box_overlap(model.grid_shape, image_shape, box)
                in_box.append(float(scene_weights[t] @ overlap))
                area = (box[2] - box[0]) * (box[3] - box[1])
                chance.append(area / (image_shape[0] * image_shape[1]))
    return {
        "in_box": np.array(in_box),
        "chance": np.array(chance),
        "unmatched": unmatched,
    }


def bleu_scores(hypotheses, references):
    """Corpus BLEU-1 .. BLEU-4 (sacrebleu, 0-100) against every reference
    of each hypothesis."""
    from sacrebleu.metrics import BLEU

    most = max(len(r) for r in references)
    streams = [[r[k] if k < len(r) else None for r in references] for k in range(most)]
    return {
        f"bleu{n}": float(
            BLEU(max_ngram_order=n).corpus_score(hypotheses, streams).score
        )
        for n in range(1, 5)
    }


def evaluate(model, scenes, beam_width=1):
    """BLEU-1..4 and the exact-caption rate of the model's captions of
    `scenes`; returns `(metrics, captions, token_ids)`."""
    captions, token_ids = caption_images(model, scenes.images, beam_width)
    metrics = bleu_scores(captions, scenes.captions)
    metrics["exact_caption_rate"] = float(
        np.mean([c in refs for c, refs in zip(captions, scenes.captions, strict=True)])
    )
    return metrics, captions, token_ids


def localization_metrics(located):
    """The figures of `localization`'s result for `metrics.json` (none when
    no generated word named an item of its scene)."""
    in_box, chance = located["in_box"], located["chance"]
    if not len(in_box):
        return {}
    return {
        "attention_in_box": float(in_box.mean()),
        "attention_chance": float(chance.mean()),
        "attention_in_box_ratio": float(in_box.mean() / chance.mean()),
        "attention_in_box_quartiles": [
            float(q) for q in np.percentile(in_box, [25, 50, 75])
        ],
        "attention_above_chance_rate": float(np.mean(in_box > chance)),
        "named_words": int(len(in_box)),
        "named_words_not_in_scene": located["unmatched"],
    }


class Captioning(runner.Task):
    """`keras-attention caption`: an image captioner trained on `data`,
    evaluated on its test split (BLEU-1..4, exact captions and, with
    attention on scenes with boxes, how much attention falls on the named
    item), with per-word attention overlays, a caption grid and the
    localization histogram. Early stopping on validation loss keeps the best
    epoch."""

    command = "caption"
    epochs = SETTINGS["epochs"]

    def __init__(self, data="scenes", model="attention", beam_width=3, **model_kwargs):
        if model not in MODELS:
            raise ValueError(
                f"`model` must be one of {list(MODELS)}; received {model!r}."
            )
        self.data, self.model, self.beam_width = data, model, beam_width
        self.model_kwargs = model_kwargs

    def load(self, context):
        options = context.options
        phase(f"loading {self.data}")
        self.splits = splits = load_caption_data(
            self.data, seed=options.seed, num_train=options.num_train
        )
        check_training_size(options.batch_size, len(splits["train"]), "images")
        texts = [c for captions in splits["train"].captions for c in captions]
        self.tokenizer = cached_word_piece(
            os.path.join(context.out_dir, "vocabulary.txt"),
            texts,
            SETTINGS["vocabulary_size"],
            lowercase=True,
        )
        self.image_shape = splits["train"].images.shape[1:]
        phase(
            f"{len(splits['train'])} training images ({len(texts)} captions), "
            f"{len(splits['test'])} test images, vocabulary "
            f"{self.tokenizer.vocabulary_size()}, images {self.image_shape}"
        )

    def build(self, context, jit_compile):
        net = build_model(
            self.model,
            self.tokenizer.vocabulary_size(),
            self.image_shape,
            SETTINGS,
            tokenizer=self.tokenizer,
            **self.model_kwargs,
        )
        return runner.compile_with_adam(net, jit_compile)

    def fit_arguments(self, context, model):
        def dataset(scenes, **kwargs):
            ids = encode_captions(
                scenes.captions, self.tokenizer, SETTINGS["max_caption_length"]
            )
            return caption_dataset(
                scenes.images,
                ids,
                context.options.batch_size,
                seed=context.options.seed,
                **kwargs,
            )

        return {
            "train_data": dataset(
                self.splits["train"], shuffle=True, drop_remainder=True
            ),
            "validation_data": dataset(self.splits["valid"]),
            "patience": SETTINGS["patience"],
        }

    def report(self, context, net, history):
        test, out_dir, beam_width = (
            self.splits["test"],
            context.out_dir,
            self.beam_width,
        )
        phase(f"captioning {len(test)} test images (greedy)")
        metrics, captions, token_ids = evaluate(net, test)
        located = None
        if net.attention and test.boxes is not None:
            # Measured on the greedy captions only: the beam-search pass below
            # reports BLEU and exact captions.
            located = localization(net, test, token_ids)
            metrics.update(localization_metrics(located))
        if beam_width > 1:
            phase(f"captioning again with beam search (width {beam_width})")
            beam, _, _ = evaluate(net, test, beam_width=beam_width)
            metrics.update(
                {
                    f"beam{beam_width}_{k}": v
                    for k, v in beam.items()
                    if k.startswith(("bleu", "exact"))
                }
            )
        plot_caption_grid(
            test.images[:NUM_GRID_IMAGES],
            captions[:NUM_GRID_IMAGES],
            os.path.join(out_dir, "captions.png"),
            references=test.captions[:NUM_GRID_IMAGES],
        )
        if net.attention:
            count = min(NUM_OVERLAYS, len(test))
            plot_overlays(
                net,
                test.images[:count],
                [os.path.join(out_dir, f"attention_{i}.png") for i in range(count)],
                boxes=None if test.boxes is None else test.boxes[:count],
            )
            if located is not None and len(located["in_box"]):
                plot_localization(
                    located["in_box"],
                    located["chance"],
                    os.path.join(out_dir, "localization.png"),
                )
        metrics.update(
            {
                "model": self.model,
                "data": self.data,
                "train_images": len(self.splits["train"]),
                "test_images": len(test),
                "parameters": net.count_params(),
                "epochs": history["epochs"],
                "train_seconds": history["train_seconds"],
                "final_valid_token_accuracy": history["val_accuracy"][-1],
                "samples": [
                    {"generated": c, "references": r}
                    for c, r in zip(captions[:5], test.captions[:5], strict=True)
                ],
            }
        )
        summary = (
            f"{self.model} on {self.data}: BLEU-4 {metrics['bleu4']:.1f}, exact "
            f"captions {metrics['exact_caption_rate']:.3f}"
        )
        if "attention_in_box" in metrics:
            summary += (
                f"; attention in box {metrics['attention_in_box']:.2f} vs chance "
                f"{metrics['attention_chance']:.2f}"
            )
        return metrics, summary + f"; trained {history['train_seconds']:.0f} s"


def run_caption(out_dir, data="scenes", model="attention", beam_width=3, **kwargs):
    """Trains a captioner, evaluates it on the test split and writes
    `metrics.json`, `model.keras`, per-word attention overlays, a caption
    grid and the localization histogram under `out_dir` (`runner.run`: an
    interrupted training resumes, a finished one is evaluated again).

    Args:
        out_dir: output folder.
        data: `"scenes"` or a folder of images with `captions.tsv`.
        model: `"attention"` (Show, Attend and Tell) or `"no-attention"` (the
            same decoder with the image vector only).
        beam_width: beam width of a second evaluation (1 skips it).
        **kwargs: `options` (a `runner.TrainingOptions`) or its fields by name
            (`epochs`, `batch_size`, `seed`, ...; default batch 32, at most
            `SETTINGS["epochs"]` epochs; `num_train` is the number of
            training scenes, `"scenes"` only); the rest go to
            `ShowAttendTell`. Under a strategy, the doubly stochastic penalty
            is a model loss, which Keras scales per replica like the others.

    Returns:
        The metrics dict.
    """
    return runner.run_task(
        Captioning, out_dir, data=data, model=model, beam_width=beam_width, **kwargs
    )


def compare(out_dir, models=tuple(MODELS), data="scenes", beam_width=3, **kwargs):
    """Runs `run_caption` for each model in `out_dir/<model>` and writes
    `comparison.json` and `comparison.png` (BLEU-1..4 side by side)."""
    bleu = ("bleu1", "bleu2", "bleu3", "bleu4")

    def plot(results, folder):
        plot_metric_spread(
            {name: {k: [runs[0][k]] for k in bleu} for name, runs in results.items()},
            metrics=bleu,
            path=os.path.join(folder, "comparison.png"),
            title=f"Captioning {data}: BLEU on the test images",
        )

    return runner.compare_models(
        out_dir,
        Captioning,
        models,
        SUMMARY_KEYS,
        plot,
        data=data,
        beam_width=beam_width,
        **kwargs,
    )


def plot_overlay(model, image, path, boxes=None):
    """Captions one image greedily and draws the attention of every word."""
    return plot_overlays(model, [image], [path], [boxes])[0]


def plot_overlays(model, images, paths, boxes=None):
    """Captions images greedily, in one batch, and draws the attention of
    every word of each (Xu et al., 2015, https://arxiv.org/abs/1502.03044).

    Args:
        model: a trained `ShowAttendTell` with attention and a `tokenizer`.
        images: `(N, H, W, C)` in [0, 1].
        paths: N PNG paths, one per image.
        boxes: optional, one entry (or None) per image: the named item's
            box, outlined on its figure.

    Returns:
        The N captions.
    """
    tokens, weights = model.generate(np.asarray(images), return_attention=True)
    tokens, weights = np.asarray(tokens), np.asarray(weights)
    captions = []
    for i, path in enumerate(paths):
        words = []
        for token in tokens[i]:
            words.append(model.tokenizer.id_to_token(int(token)) if token else "")
            if int(token) == END_ID or not token:
                break
        caption = words_of(model.tokenizer, tokens[i])
        plot_caption_attention(
            images[i],
            words,
            weights[i, : len(words)],
            model.grid_shape,
            path=path,
            title=caption,
            boxes=None if boxes is None else boxes[i],
        )
        captions.append(caption)
    return captions


def caption_files(model, paths, out_dir=None, beam_width=1):
    """Captions image files with a trained model; with `out_dir`, also
    writes each image's attention overlay there as `<name>_attention.png`.

    Returns:
        The captions, one per path.
    """
    images = _read_images(model, paths)
    captions, _ = caption_images(model, images, beam_width)
    _write_overlays(model, paths, images, out_dir)
    return captions


def caption_files_with_confidence(model, paths, out_dir=None, beam_width=1):
    """`caption_files`, with each caption's score.

    Returns:
        A list of `(caption, mean_log_prob)`, one per path (see
        `caption_with_confidence`).
    """
    images = _read_images(model, paths)
    captions = caption_with_confidence(model, images, beam_width)
    _write_overlays(model, paths, images, out_dir)
    return captions


def _read_images(model, paths):
    height, width, channels = model.image_shape
    return np.stack([load_image(p, (height, width), channels) for p in paths])


def _write_overlays(model, paths, images, out_dir):
    if out_dir is None or not model.attention:
        return
    names = [os.path.splitext(os.path.basename(path))[0] for path in paths]
    overlays = [os.path.join(out_dir, f"{name}_attention.png") for name in names]
    plot_overlays(model, images, overlays)
