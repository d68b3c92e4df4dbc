"""`keras-attention gan`: train and evaluate SAGAN, and its ablation."""

import dataclasses
import os

import keras
import numpy as np

from keras_attention.data.fashion_pairs import PAIR_CELLS, load_item_cells
from keras_attention.data.labelled_images import load_image_set
from keras_attention.evaluation.image_quality import (
    ImageQuality,
    train_feature_classifier,
)
from keras_attention.evaluation.long_range import LongRangeAgreement
from keras_attention.models import SAGAN, generator_attention, sample_images
from keras_attention.models.sagan import (
    attention_resolutions,
    generator_inputs,
    to_unit_range,
)
from keras_attention.tasks import distribute, runner
from keras_attention.tasks.common import check_training_size, phase, prepare_output
from keras_attention.viz import (
    plot_curves,
    plot_gan_history,
    plot_image_grid,
    plot_metric_spread,
    plot_self_attention,
)

SETTINGS = {
    "width": 16,
    "latent_dim": 128,
    "batch_size": 64,
    "epochs": 5,
    "fid_samples": 5000,
}
GRID_COLUMNS = 8
NUM_ATTENTION_IMAGES = 4
CLASSIFIER_FILE = "classifier.keras"
# The image sets whose two item cells must agree, with the top-left corners
# of those cells: `long_range_agreement` is measured on them.
LONG_RANGE_SETS = {"fashion-pairs": PAIR_CELLS}
# Epochs of the classifier of single items that reads those cells.
ITEM_CLASSIFIER_EPOCHS = 5
VARIANTS = ("attention", "no-attention")
# The figures of each variant in the ablation's `comparison.json`.
SUMMARY_KEYS = (
    "fid",
    "inception_score",
    "long_range_agreement",
    "long_range_agreement_chance",
    "long_range_agreement_real",
    "train_seconds",
)


def image_dataset(images, labels=None, batch_size=64, seed=0, repeat=False):
    """A shuffled `tf.data` pipeline of uint8 images scaled to [-1, 1]
    (with their labels when given), in full batches."""
    import tensorflow as tf

    data = images if labels is None else (images, labels)
    dataset = tf.data.Dataset.from_tensor_slices(data)
    dataset = dataset.shuffle(len(images), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()

    def scale(x, *rest):
        x = tf.cast(x, "float32") / 127.5 - 1.0
        return (x, *rest) if rest else x

    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.map(scale, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)


def grid_inputs(model, columns=GRID_COLUMNS, seed=1):
    """Fixed generator inputs for the sample grids: a row per class for a
    conditional model (8 rows otherwise), so that the grids of successive
    epochs show the same latent vectors."""
    rows = model.num_classes or GRID_COLUMNS
    labels = None
    if model.num_classes:
        labels = np.repeat(np.arange(model.num_classes), columns).astype("int32")
    return generator_inputs(model.generator, rows * columns, labels, seed=seed)


class GANMonitor(keras.callbacks.Callback):
    """After every epoch: the sample grid `samples/epoch_NNN.png` from fixed
    inputs, and, with `quality`, the FID and Inception-style score of
    `num_samples` generated images added to the epoch's logs."""

    def __init__(
        self, out_dir, inputs, quality=None, num_samples=5000, row_titles=None
    ):
        super().__init__()
        self.folder = os.path.join(out_dir, "samples")
        self.inputs = inputs
        self.quality = quality
        self.num_samples = num_samples
        self.row_titles = row_titles

    def on_epoch_end(self, epoch, logs=None):
        sampler = self.model.sampler
        plot_image_grid(
            to_unit_range(sampler.predict(self.inputs, verbose=0)),
            os.path.join(self.folder, f"epoch_{epoch + 1:03d}.png"),
            columns=GRID_COLUMNS,
            row_titles=self.row_titles,
            title=f"epoch {epoch + 1}",
        )
        if self.quality is not None and logs is not None:
            generated = sample_images(sampler, self.num_samples, seed=epoch)
            scores = self.quality(generated)
            logs["fid"] = scores["fid"]
            logs["inception_score"] = scores["inception_score"]
            phase(
                f"epoch {epoch + 1}: FID {scores['fid']:.2f}, Inception-style "
                f"score {scores['inception_score']:.2f}"
            )


def _evaluator(images, out_dir, classifier_path, seed):
    """The `ImageQuality` of a labelled image set (its classifier trained once
    and cached at `classifier_path`), or None without labels."""
    if images.labels is None:
        phase(
            "these images have no classes: FID and the Inception-style score "
            "need a classifier of the real images, so they are not measured"
        )
        return None, None
    path = classifier_path or os.path.join(out_dir, CLASSIFIER_FILE)
    classifier, accuracy = train_feature_classifier(
        images.images, images.labels, images.num_classes, path, seed=seed
    )
    return classifier, accuracy


def item_classifier_path(classifier_path):
    """Where the classifier of single items is cached, next to the FID
    classifier: `classifier.keras` -> `classifier_items.keras`."""
    root, extension = os.path.splitext(classifier_path)
    return f"{root}_items{extension}"


def _long_range_measure(data, image_shape, classifier_path, seed):
    """The `LongRangeAgreement` of a long-range set (`LONG_RANGE_SETS`),
    read by a classifier of the 10,000 Fashion-MNIST test items (none of them
    in the set) in shifted 32x32 cells, trained once and cached; returns it
    with the classifier's held-out accuracy."""
    cells, labels = load_item_cells(seed=seed)
    classifier, accuracy = train_feature_classifier(
        cells,
        labels,
        int(labels.max()) + 1,
        item_classifier_path(classifier_path),
        epochs=ITEM_CLASSIFIER_EPOCHS,
        seed=seed,
    )
    return LongRangeAgreement(classifier, image_shape, LONG_RANGE_SETS[data]), accuracy


@dataclasses.dataclass(eq=False)
class ImageGeneration(runner.Task):
    """`keras-attention gan`: SAGAN (or its ablation without self-attention)
    trained on an image set and measured every epoch; its arguments are
    `run_gan`'s own."""

    data: str = "fashion-mnist"
    attention: bool = True
    conditional: bool = False
    steps_per_epoch: int | None = None
    width: int = SETTINGS["width"]
    latent_dim: int = SETTINGS["latent_dim"]
    attention_resolution: int | None = None
    ema_decay: float | None = None
    fid_samples: int = SETTINGS["fid_samples"]
    classifier_path: str | None = None
    image_size: int = 32
    channels: int = 1

    command = "gan"
    # The `xla` suite's key is "gan/sagan" whatever the variant.
    model = "sagan"
    batch_size = SETTINGS["batch_size"]
    epochs = SETTINGS["epochs"]
    # The whole GAN (both networks and optimizers); the sampler, which is
    # what a user generates with, goes to model.keras.
    model_file = "gan.keras"
    exports = {"model.keras": "sampler"}

    @property
    def title(self):
        return "SAGAN" if self.attention else "SAGAN without attention"

    def load(self, context):
        options, data = context.options, self.data
        phase(f"loading {data}")
        images = load_image_set(data, self.image_size, self.channels)
        check_training_size(
            options.batch_size,
            min(options.num_train or len(images.images), len(images.images)),
            "images",
            num_train=options.num_train,
            available=len(images.images),
        )
        if options.num_train is not None:
            images = images._replace(
                images=images.images[: options.num_train],
                labels=None
                if images.labels is None
                else images.labels[: options.num_train],
            )
        if self.conditional and images.labels is None:
            raise ValueError(
                f"A conditional GAN needs classes; '{data}' has none (put the "
                "images in one subfolder per class)."
            )
        self.images = images
        self.resolution = self.attention_resolution
        allowed = attention_resolutions(images.images.shape[1])
        if self.resolution is None:
            self.resolution = min(16, allowed[-1])
        elif self.attention and self.resolution not in allowed:
            raise ValueError(
                f"`attention_resolution` must be one of {allowed} for the "
                f"{images.images.shape[1]}x{images.images.shape[1]} images of "
                f"'{data}'; received {self.resolution!r}."
            )
        classifier, self.classifier_accuracy = _evaluator(
            images, context.out_dir, self.classifier_path, options.seed
        )
        self.long_range = None
        if data in LONG_RANGE_SETS:
            self.long_range, self.item_classifier_accuracy = _long_range_measure(
                data,
                images.images.shape[1:],
                self.classifier_path or os.path.join(context.out_dir, CLASSIFIER_FILE),
                options.seed,
            )
        self.quality = None
        # The first `fid_samples` images of this order are the FID reference,
        # the next ones measure the real-data floor.
        self.order = np.random.default_rng(options.seed).permutation(len(images.images))
        if classifier is not None:
            self.quality = ImageQuality(
                classifier, images.images[self.order[: self.fid_samples]]
            )
        self.row_titles = list(images.class_names) if self.conditional else None

    def build(self, context, jit_compile):
        width, images = self.width, self.images
        gan = SAGAN(
            image_shape=images.images.shape[1:],
            latent_dim=self.latent_dim,
            generator_width=width,
            discriminator_width=width,
            num_classes=images.num_classes if self.conditional else None,
            attention=self.attention,
            attention_resolution=self.resolution,
            ema_decay=self.ema_decay,
            seed=context.options.seed,
            # Under keras.distribution (JAX) the step is one program over the
            # global batch, whose statistics batch norm computes already.
            synchronized_batch_norm=distribute.num_replicas(context.strategy) > 1
            and not distribute.is_keras_distribution(context.strategy),
        )
        gan.compile(jit_compile=jit_compile)
        return gan

    def fit_arguments(self, context, gan):
        options, images = context.options, self.images
        monitor = GANMonitor(
            context.out_dir,
            grid_inputs(gan),
            self.quality,
            self.fid_samples,
            row_titles=self.row_titles,
        )
        return {
            "train_data": image_dataset(
                images.images,
                images.labels if self.conditional else None,
                options.batch_size,
                options.seed,
                repeat=self.steps_per_epoch is not None,
            ),
            "validation_data": None,
            "callbacks": [keras.callbacks.TerminateOnNaN()],
            "epoch_metrics": [monitor],
            "steps_per_epoch": self.steps_per_epoch,
        }

    def announce(self, context, gan):
        images = self.images.images
        return (
            f"{self.title}{' (class-conditional)' if self.conditional else ''} on "
            f"{self.data}: {len(images)} images {images.shape[1:]}, generator "
            f"{gan.generator.count_params():,} and discriminator "
            f"{gan.discriminator.count_params():,} parameters, up to "
            f"{context.options.epochs} epochs"
        )

    def report(self, context, gan, history):
        options, images, name = context.options, self.images.images, self.title
        quality, fid_samples, seed = self.quality, self.fid_samples, options.seed
        metrics = {
            "model": "sagan" if self.attention else "sagan-no-attention",
            "data": self.data,
            "conditional": self.conditional,
            "seed": seed,
            "epochs": history["epochs"],
            "steps": history["epochs"]
            * (self.steps_per_epoch or len(images) // options.batch_size),
            "train_seconds": history["train_seconds"],
            "train_images": len(images),
            "generator_parameters": gan.generator.count_params(),
            "discriminator_parameters": gan.discriminator.count_params(),
            "final_d_loss": history["d_loss"][-1],
            "final_g_loss": history["g_loss"][-1],
            "nan_free": bool(
                np.all(np.isfinite(history["d_loss"] + history["g_loss"]))
            ),
        }
        if self.attention:
            for network, key in (
                (gan.sampler, "generator"),
                (gan.discriminator, "discriminator"),
            ):
                metrics[f"attention_gamma_{key}"] = float(
                    keras.ops.convert_to_numpy(
                        network.get_layer("self_attention").gamma
                    )
                )
        generated = real = None
        if quality is not None or self.long_range is not None:
            phase(f"measuring {fid_samples} generated images")
            generated = gan.sample(fid_samples, seed=seed + 12345)
            real = images[self.order[fid_samples : 2 * fid_samples]]
        if quality is not None:
            scores = quality(generated)
            floor = quality(real)
            metrics.update(
                {
                    **scores,
                    "fid_samples": fid_samples,
                    "fid_real_floor": floor["fid"],
                    "inception_score_real": floor["inception_score"],
                    "classifier_held_out_accuracy": self.classifier_accuracy,
                    "fid_per_epoch": [round(v, 3) for v in history.get("fid", [])],
                }
            )
        if self.long_range is not None:
            found, ceiling = self.long_range(generated), self.long_range(real)
            metrics.update(
                {
                    "long_range_agreement": found["agreement"],
                    "long_range_agreement_chance": found["chance"],
                    "long_range_agreement_real": ceiling["agreement"],
                    "long_range_agreement_real_chance": ceiling["chance"],
                    "item_classifier_held_out_accuracy": (
                        self.item_classifier_accuracy
                    ),
                }
            )
        plot_image_grid(
            to_unit_range(gan.sampler.predict(grid_inputs(gan), verbose=0)),
            os.path.join(context.out_dir, "samples.png"),
            columns=GRID_COLUMNS,
            row_titles=self.row_titles,
            title=f"{name} on {self.data}, {history['epochs']} epochs",
        )
        plot_gan_history(
            history,
            os.path.join(context.out_dir, "losses.png"),
            title=f"{name} on {self.data}",
        )
        if self.attention:
            plot_attention_maps(
                gan.sampler, os.path.join(context.out_dir, "attention.png"), seed
            )
        fid_text = f"FID {metrics['fid']:.2f}, " if "fid" in metrics else ""
        if "long_range_agreement" in metrics:
            fid_text += (
                f"long-range agreement {metrics['long_range_agreement']:.3f} "
                f"(chance {metrics['long_range_agreement_chance']:.3f}, real "
                f"{metrics['long_range_agreement_real']:.3f}), "
            )
        return metrics, (
            f"{name} on {self.data}: {fid_text}{history['epochs']} epochs in "
            f"{history['train_seconds']:.0f} s"
        )


def run_gan(out_dir, data="fashion-mnist", **kwargs):
    """Trains SAGAN (or its no-attention ablation) on an image set, measures
    it every epoch, and writes everything to `out_dir`.

    Writes `metrics.json` (final FID and Inception-style score, with the
    real-data floor; for a long-range set (`LONG_RANGE_SETS`), the
    `long_range_agreement` of the generated images with its chance level and
    the real-data ceiling, see `keras_attention.evaluation.long_range`),
    `history.json` and `checkpoints/epochs.csv` (losses,
    FID per epoch), `samples/epoch_NNN.png`, `samples.png`, `losses.png`,
    `attention.png` (where generated images attend), `model.keras` (the
    generator, the weight average with `ema_decay`) and `gan.keras` (both
    networks). Training checkpoints every epoch and a re-runner.run with the same
    `out_dir` resumes; a finished runner.run is evaluated again without training
    (`runner.run`).

    Args:
        out_dir: output folder.
        data: `"fashion-mnist"`, `"fashion-pairs"` (64x64, two same-class
            items in opposite corners), `"mnist"`, `"digits"` or a folder of
            images (class subfolders for labels).
        attention: use self-attention in both networks (default True).
        conditional: class-conditional (needs labels).
        steps_per_epoch: steps per epoch (default: one pass over the images).
        width: channels of the networks at full resolution (default 16).
        latent_dim: size of `z` (default 128).
        attention_resolution: map size of the attention, one of
            `attention_resolutions(image size)` (default 16, or the largest
            the image allows).
        ema_decay: keep an average of the generator's weights.
        fid_samples: images generated for FID (and real images as reference;
            default 5000).
        classifier_path: where the evaluation classifier is (or is to be)
            cached; default `out_dir/classifier.keras`. Runs that are compared
            must share it. A long-range set's classifier of single items goes
            next to it (`item_classifier_path`).
        image_size: side of a folder's images after resizing (default 32).
        channels: 1 or 3 for a folder's images (default 1).
        **kwargs: the GAN's own arguments above (`ImageGeneration`'s fields),
            and `options` (a `runner.TrainingOptions`) or its fields by name
            (`epochs`, `batch_size`, `seed`, ...; default 5 epochs of batches
            of 64). Over several replicas the generator's batch norm is
            synchronized, so that a step is the same as on one device.

    Returns:
        The metrics dict.
    """
    return runner.run_task(ImageGeneration, out_dir, data=data, **kwargs)


def plot_attention_maps(generator, path, seed=0, num_images=NUM_ATTENTION_IMAGES):
    """The SAGAN paper's figure for a generator: a few generated images, and
    for four query positions (a quarter in from each corner's side) the map
    of where each attends."""
    inputs = generator_inputs(generator, num_images, seed=seed)
    images, weights = generator_attention(generator, inputs)
    side = int(round(weights.shape[1] ** 0.5))
    low, high = side // 4, side - 1 - side // 4
    points = [(low, low), (low, high), (high, low), (high, high)]
    return plot_self_attention(
        images,
        weights,
        points,
        path,
        title=f"generator self-attention ({side}x{side} map): where each marked "
        "position attends",
    )


def summarize_ablation(results, seeds):
    """The ablation's `comparison.json`: for each variant, the seeds and, for
    each of `SUMMARY_KEYS` its runs report (FID, the score, the long-range
    agreement on a long-range set, the training time), the value per seed,
    their mean and standard deviation (`KEY`, `KEY_mean`, `KEY_std`).

    Args:
        results: `{variant: [metrics per seed]}`.
        seeds: the seeds, in the order of the runs.

    Returns:
        `{variant: {"seeds": [...], KEY: [...], KEY_mean: ..., KEY_std: ...}}`.
    """
    summary = {}
    for variant, runs in results.items():
        summary[variant] = {"seeds": list(seeds)}
        for key in SUMMARY_KEYS:
            if key in runs[0]:
                figures = runner.spread([r[key] for r in runs])
                summary[variant][key] = figures["values"]
                summary[variant][f"{key}_mean"] = figures["mean"]
                summary[variant][f"{key}_std"] = figures["std"]
    return summary


def ablation(out_dir, seeds=(0, 1), data="fashion-mnist", **kwargs):
    """SAGAN with and without self-attention, trained with the same settings
    (`run_gan`'s arguments) and seeds, in `out_dir/<variant>-seed<k>`,
    measured with one shared classifier; writes `comparison.json` (mean and
    runner.spread of FID, the score and, on a long-range set, the long-range
    agreement per variant), `comparison.png` and
    `fid_curves.png` (FID per epoch of every runner.run).

    Returns:
        `{variant: [metrics per seed]}`.
    """
    options, own = runner.TrainingOptions.take(kwargs)
    # The shared classifier in this worker's folder of the comparison.
    strategy, summary_dir = distribute.prepare(options.strategy, out_dir)
    own.setdefault("classifier_path", os.path.join(summary_dir, CLASSIFIER_FILE))

    def plot(results, folder):
        if "fid" not in results["attention"][0]:
            return
        fid = {
            v: runner.spread([r["fid"] for r in runs]) for v, runs in results.items()
        }
        plot_metric_spread(
            {variant: {"fid": figures["values"]} for variant, figures in fid.items()},
            metrics=("fid",),
            path=os.path.join(folder, "comparison.png"),
            title=f"SAGAN on {data}: FID with and without self-attention "
            f"({len(seeds)} seeds; lower is better)",
        )
        plot_curves(
            {
                f"{variant}, seed {seed}": metrics["fid_per_epoch"]
                for variant, runs in results.items()
                for seed, metrics in zip(seeds, runs, strict=True)
            },
            path=os.path.join(folder, "fid_curves.png"),
            ylabel="FID (lower is better)",
            title=f"SAGAN on {data}: FID per epoch",
        )
        phase(
            f"FID with attention {fid['attention']['mean']:.2f} +- "
            f"{fid['attention']['std']:.2f}, without "
            f"{fid['no-attention']['mean']:.2f} +- {fid['no-attention']['std']:.2f}"
        )
        if "long_range_agreement" in results["attention"][0]:
            agreement = {
                v: runner.spread([r["long_range_agreement"] for r in runs])
                for v, runs in results.items()
            }
            phase(
                "long-range agreement with attention "
                f"{agreement['attention']['mean']:.3f} +- "
                f"{agreement['attention']['std']:.3f}, without "
                f"{agreement['no-attention']['mean']:.3f} +- "
                f"{agreement['no-attention']['std']:.3f} (real images "
                f"{results['attention'][0]['long_range_agreement_real']:.3f})"
            )

    results, _ = runner.compare(
        out_dir,
        lambda variant: ImageGeneration(data, attention=variant == "attention", **own),
        VARIANTS,
        options.replace(strategy=strategy),
        seeds=seeds,
        summarize=lambda results: summarize_ablation(results, seeds),
        plots=[plot],
        folder=lambda variant, seed: f"{variant}-seed{seed}",
    )
    return results


def sample_files(model, out_dir, num_images=64, seed=0):
    """Writes `samples.png` from a saved generator (`model.keras`) and, when
    it has self-attention, `attention.png`."""
    out_dir = prepare_output(out_dir)
    images = sample_images(model, num_images, seed=seed)
    path = os.path.join(out_dir, "samples.png")
    plot_image_grid(images, path, columns=GRID_COLUMNS)
    written = [path]
    if any(layer.name == "self_attention" for layer in model.layers):
        path = os.path.join(out_dir, "attention.png")
        plot_attention_maps(model, path, seed)
        written.append(path)
    return written
