"""`keras-attention gan`: train and evaluate SAGAN, and its ablation."""

import json
import os

import keras
import numpy as np

from keras_attention.data.labelled_images import load_image_set
from keras_attention.evaluation.image_quality import (
    ImageQuality,
    train_feature_classifier,
)
from keras_attention.models import SAGAN, generator_attention, sample_images
from keras_attention.models.sagan import (
    attention_resolutions,
    generator_inputs,
    to_unit_range,
)
from keras_attention.tasks import distribute
from keras_attention.tasks.common import check_training_size, phase, prepare_output
from keras_attention.tasks.runner import finish_run, save_model, train_or_load
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


def run_gan(
    out_dir,
    data="fashion-mnist",
    attention=True,
    conditional=False,
    epochs=SETTINGS["epochs"],
    batch_size=SETTINGS["batch_size"],
    steps_per_epoch=None,
    num_train=None,
    width=SETTINGS["width"],
    latent_dim=SETTINGS["latent_dim"],
    attention_resolution=None,
    ema_decay=None,
    fid_samples=SETTINGS["fid_samples"],
    classifier_path=None,
    jit_compile=None,
    time_budget_minutes=None,
    seed=0,
    image_size=32,
    channels=1,
    callbacks=None,
    strategy="default",
):
    """Trains SAGAN (or its no-attention ablation) on an image set, measures
    it every epoch, and writes everything to `out_dir`.

    Writes `metrics.json` (final FID and Inception-style score, with the
    real-data floor), `history.json` and `checkpoints/epochs.csv` (losses,
    FID per epoch), `samples/epoch_NNN.png`, `samples.png`, `losses.png`,
    `attention.png` (where generated images attend), `model.keras` (the
    generator, the weight average with `ema_decay`) and `gan.keras` (both
    networks). Training checkpoints every epoch and a re-run with the same
    `out_dir` resumes; a finished run is evaluated again without training.

    Args:
        out_dir: output folder.
        data: `"fashion-mnist"`, `"mnist"`, `"digits"` or a folder of images
            (class subfolders for labels).
        attention: use self-attention in both networks.
        conditional: class-conditional (needs labels).
        epochs: training epochs.
        batch_size: images per step.
        steps_per_epoch: steps per epoch (default: one pass over the images).
        num_train: use only the first this many images.
        width: channels of the networks at full resolution.
        latent_dim: size of `z`.
        attention_resolution: map size of the attention (default 16, or the
            largest the image allows).
        ema_decay: keep an average of the generator's weights.
        fid_samples: images generated for FID (and real images as reference).
        classifier_path: where the evaluation classifier is (or is to be)
            cached; default `out_dir/classifier.keras`. Runs that are compared
            must share it.
        jit_compile: train with XLA; None (default) compiles unless the `xla`
            suite measured this model faster without XLA on this kind of
            device (`tasks.distribute.jit_for`). Off under a distribution
            strategy.
        time_budget_minutes: stop before an epoch that would end later.
        seed: seed of initialization, data order and latent vectors.
        image_size: side of a folder's images after resizing.
        channels: 1 or 3 for a folder's images.
        callbacks: extra training callbacks.
        strategy: `tf.distribute` strategy to train with, by name (see
            `keras_attention.tasks.distribute.make_strategy`) or object;
            `batch_size` is the global batch. Over several replicas the
            generator's batch norm is synchronized, so that a step is the
            same as on one device.

    Returns:
        The metrics dict.
    """
    strategy, out_dir = distribute.prepare(strategy, out_dir, batch_size, seed)
    phase(f"loading {data}")
    images = load_image_set(data, image_size, channels)
    check_training_size(
        batch_size,
        min(num_train or len(images.images), len(images.images)),
        "images",
        num_train=num_train,
        available=len(images.images),
    )
    if num_train is not None:
        images = images._replace(
            images=images.images[:num_train],
            labels=None if images.labels is None else images.labels[:num_train],
        )
    if conditional and images.labels is None:
        raise ValueError(
            f"A conditional GAN needs classes; '{data}' has none (put the images "
            "in one subfolder per class)."
        )
    size = images.images.shape[1]
    if attention_resolution is None:
        attention_resolution = min(16, attention_resolutions(size)[-1])
    classifier, classifier_accuracy = _evaluator(images, out_dir, classifier_path, seed)
    quality = None
    # The first `fid_samples` images of this order are the FID reference, the
    # next ones measure the real-data floor.
    order = np.random.default_rng(seed).permutation(len(images.images))
    if classifier is not None:
        quality = ImageQuality(classifier, images.images[order[:fid_samples]])

    name = "SAGAN" if attention else "SAGAN without attention"

    def build(jit_compile):
        gan = SAGAN(
            image_shape=images.images.shape[1:],
            latent_dim=latent_dim,
            generator_width=width,
            discriminator_width=width,
            num_classes=images.num_classes if conditional else None,
            attention=attention,
            attention_resolution=attention_resolution,
            ema_decay=ema_decay,
            seed=seed,
            synchronized_batch_norm=distribute.num_replicas(strategy) > 1,
        )
        gan.compile(jit_compile=jit_compile)
        return gan

    def fit_arguments(gan):
        monitor = GANMonitor(
            out_dir,
            grid_inputs(gan),
            quality,
            fid_samples,
            row_titles=list(images.class_names) if conditional else None,
        )
        return {
            "train_data": image_dataset(
                images.images,
                images.labels if conditional else None,
                batch_size,
                seed,
                repeat=steps_per_epoch is not None,
            ),
            "validation_data": None,
            "callbacks": [keras.callbacks.TerminateOnNaN()],
            "epoch_metrics": [monitor],
            "steps_per_epoch": steps_per_epoch,
        }

    def announce(gan):
        return (
            f"{name}{' (class-conditional)' if conditional else ''} on {data}: "
            f"{len(images.images)} images {images.images.shape[1:]}, generator "
            f"{gan.generator.count_params():,} and discriminator "
            f"{gan.discriminator.count_params():,} parameters, up to {epochs} epochs"
        )

    # The whole GAN (both networks and optimizers) in gan.keras; the sampler,
    # which is what a user generates with, in model.keras.
    gan, history = train_or_load(
        out_dir,
        name,
        strategy,
        build,
        fit_arguments,
        epochs,
        seed,
        jit_compile,
        time_budget_minutes,
        callbacks,
        model_file="gan.keras",
        export=lambda gan: save_model(
            gan.sampler, os.path.join(out_dir, "model.keras")
        ),
        announce=announce,
        model_key="gan/sagan",
    )

    metrics = {
        "model": "sagan" if attention else "sagan-no-attention",
        "data": data,
        "conditional": conditional,
        "seed": seed,
        "epochs": history["epochs"],
        "steps": history["epochs"]
        * (steps_per_epoch or len(images.images) // batch_size),
        "train_seconds": history["train_seconds"],
        "train_images": len(images.images),
        "generator_parameters": gan.generator.count_params(),
        "discriminator_parameters": gan.discriminator.count_params(),
        "final_d_loss": history["d_loss"][-1],
        "final_g_loss": history["g_loss"][-1],
        "nan_free": bool(np.all(np.isfinite(history["d_loss"] + history["g_loss"]))),
    }
    if attention:
        metrics["attention_gamma_generator"] = float(
            keras.ops.convert_to_numpy(gan.sampler.get_layer("self_attention").gamma)
        )
        metrics["attention_gamma_discriminator"] = float(
            keras.ops.convert_to_numpy(
                gan.discriminator.get_layer("self_attention").gamma
            )
        )
    if quality is not None:
        phase(f"measuring {fid_samples} generated images")
        scores = quality(gan.sample(fid_samples, seed=seed + 12345))
        floor = quality(images.images[order[fid_samples : 2 * fid_samples]])
        metrics.update(
            {
                **scores,
                "fid_samples": fid_samples,
                "fid_real_floor": floor["fid"],
                "inception_score_real": floor["inception_score"],
                "classifier_held_out_accuracy": classifier_accuracy,
                "fid_per_epoch": [round(v, 3) for v in history.get("fid", [])],
            }
        )
    inputs = grid_inputs(gan)
    plot_image_grid(
        to_unit_range(gan.sampler.predict(inputs, verbose=0)),
        os.path.join(out_dir, "samples.png"),
        columns=GRID_COLUMNS,
        row_titles=list(images.class_names) if conditional else None,
        title=f"{name} on {data}, {history['epochs']} epochs",
    )
    plot_gan_history(
        history, os.path.join(out_dir, "losses.png"), title=f"{name} on {data}"
    )
    if attention:
        plot_attention_maps(gan.sampler, os.path.join(out_dir, "attention.png"), seed)
    fid_text = f"FID {metrics['fid']:.2f}, " if "fid" in metrics else ""
    return finish_run(
        out_dir,
        metrics,
        f"{name} on {data}: {fid_text}{history['epochs']} epochs in "
        f"{history['train_seconds']:.0f} s",
    )


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


def ablation(out_dir, seeds=(0, 1), data="fashion-mnist", **kwargs):
    """SAGAN with and without self-attention, trained with the same settings
    and seeds, in `out_dir/<variant>-seed<k>`, measured with one shared
    classifier; writes `comparison.json` (mean and spread of FID and the
    score per variant), `comparison.png` and `fid_curves.png` (FID per epoch
    of every run).

    Returns:
        `{variant: [metrics per seed]}`.
    """
    # One strategy for all runs (a multi-worker one can be made only once);
    # each run writes in its own folder, the summary in this worker's.
    runs_dir = out_dir
    strategy, out_dir = distribute.prepare(kwargs.pop("strategy", "default"), out_dir)
    kwargs.setdefault("classifier_path", os.path.join(out_dir, CLASSIFIER_FILE))
    results = {"attention": [], "no-attention": []}
    for seed in seeds:
        for variant in results:
            results[variant].append(
                run_gan(
                    os.path.join(runs_dir, f"{variant}-seed{seed}"),
                    data=data,
                    attention=variant == "attention",
                    seed=seed,
                    strategy=strategy,
                    **kwargs,
                )
            )
    keys = ("fid", "inception_score", "train_seconds")
    summary = {}
    for variant, runs in results.items():
        summary[variant] = {"seeds": list(seeds)}
        for key in keys:
            if key in runs[0]:
                values = [r[key] for r in runs]
                summary[variant][key] = values
                summary[variant][f"{key}_mean"] = float(np.mean(values))
                summary[variant][f"{key}_std"] = float(np.std(values))
    with open(os.path.join(out_dir, "comparison.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if "fid" in results["attention"][0]:
        plot_metric_spread(
            {v: {"fid": s["fid"]} for v, s in summary.items()},
            metrics=("fid",),
            path=os.path.join(out_dir, "comparison.png"),
            title=f"SAGAN on {data}: FID with and without self-attention "
            f"({len(seeds)} seeds; lower is better)",
        )
        plot_curves(
            {
                f"{variant}, seed {seed}": run["fid_per_epoch"]
                for variant, runs in results.items()
                for seed, run in zip(seeds, runs, strict=True)
            },
            path=os.path.join(out_dir, "fid_curves.png"),
            ylabel="FID (lower is better)",
            title=f"SAGAN on {data}: FID per epoch",
        )
        phase(
            "FID with attention "
            f"{summary['attention']['fid_mean']:.2f} +- "
            f"{summary['attention']['fid_std']:.2f}, without "
            f"{summary['no-attention']['fid_mean']:.2f} +- "
            f"{summary['no-attention']['fid_std']:.2f}"
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
