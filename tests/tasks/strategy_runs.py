"""Training runs under `tf.distribute` strategies, each in a fresh process
(logical devices and multi-worker collectives are set up when TensorFlow
starts): `python -m tests.tasks.strategy_runs mirrored OUT CAPTIONS_FOLDER`
trains the captioner (Keras' train step, with a model loss) and SAGAN (its
own step) on one device and mirrored over two logical CPU devices and writes
their loss curves to `OUT/curves.json`; `python -m tests.tasks.strategy_runs
tasks OUT` trains `translate` (Keras' train step) and the class-conditional
`gan` (its own two-optimizer step) under `MultiWorkerMirroredStrategy` where
`TF_CONFIG` is set, and `translate` alone on one device otherwise (the
baseline of its loss curve)."""

import json
import os
import sys

from tests.tasks.held_out import score_few_held_out_pairs

# The captioner's run: Keras' train step with a model loss (the doubly
# stochastic penalty), which Keras scales per replica like the others.
CAPTION = {
    "epochs": 2,
    "batch_size": 32,
    "beam_width": 1,
    "encoder_filters": (4, 8),
    "units": 16,
    "dropout": 0.0,
    "jit_compile": False,
    "verbose": 0,
}


def mirrored(out, captions_folder):
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )
    from keras_attention.tasks.caption import run_caption
    from keras_attention.tasks.distribute import make_strategy
    from keras_attention.tasks.resumable import read_epoch_log

    # One strategy object per process: two over the same devices would
    # number their collective ops alike.
    strategies = {"default": None, "mirrored": make_strategy("mirrored")}
    curves = {"replicas": strategies["mirrored"].num_replicas_in_sync}
    for name, strategy in strategies.items():
        folder = os.path.join(out, f"caption-{name}")
        run_caption(folder, data=captions_folder, strategy=strategy, **CAPTION)
        rows = read_epoch_log(os.path.join(folder, "checkpoints", "epochs.csv"))
        curves[f"caption/{name}"] = [row["loss"] for row in rows]
        history = _train_sagan(strategy or tf.distribute.get_strategy())
        for key in ("d_loss", "g_loss"):
            curves[f"sagan-{key}/{name}"] = history[key]
    with open(os.path.join(out, "curves.json"), "w") as f:
        json.dump(curves, f)


def _train_sagan(strategy):
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_attention.models import SAGAN

    keras.utils.set_random_seed(0)
    images = np.random.default_rng(0).uniform(-1, 1, (128, 8, 8, 1))
    labels = np.arange(128) % 3
    dataset = tf.data.Dataset.from_tensor_slices(
        (images.astype("float32"), labels.astype("int32"))
    ).batch(32)
    with strategy.scope():
        gan = SAGAN(
            image_shape=(8, 8, 1),
            latent_dim=8,
            generator_width=8,
            discriminator_width=8,
            num_classes=3,
            attention_resolution=4,
            ema_decay=0.9,
            seed=0,
            synchronized_batch_norm=strategy.num_replicas_in_sync > 1,
        )
        gan.compile(jit_compile=False)
    return gan.fit(dataset, epochs=3, verbose=0).history


# Tiny runs of a subcommand that trains on (inputs, targets) pairs with Keras'
# train step, without dropout (its masks differ between one and several
# workers), and of the class-conditional GAN on (images, labels) with its own;
# without XLA (a strategy turns it off), two epochs of a global batch of 32.
# The other subcommands go through the same runner (tasks/runner.py: the
# strategy's scope, its datasets, a folder per worker).
TASKS = {
    "translate": {
        "data": "dates",
        "model": "transformer",
        "num_train": 320,
        "beam_width": 1,
        "hidden_dim": 32,
        "num_heads": 2,
        "num_encoder_layers": 1,
        "num_decoder_layers": 1,
        "intermediate_dim": 64,
    },
    "gan": {
        "data": "digits",
        "conditional": True,
        "width": 8,
        "num_train": 512,
        "fid_samples": 50,
    },
}


def tasks(out):
    from keras_attention.tasks import gan, translate
    from keras_attention.tasks.distribute import make_strategy

    score_few_held_out_pairs()
    run = {"translate": translate.run_translate, "gan": gan.run_gan}
    # One strategy for both runs: a multi-worker one can be made once.
    workers = "TF_CONFIG" in os.environ
    strategy = make_strategy("multi-worker" if workers else "default")
    for name, options in TASKS.items():
        if name == "gan" and not workers:
            continue  # the workers' GAN runs are compared with each other only
        if name != "gan":  # SAGAN has no dropout
            options = {**options, "dropout": 0.0}
        run[name](
            os.path.join(out, name),
            strategy=strategy,
            epochs=2,
            batch_size=32,
            jit_compile=False,
            verbose=0,
            **options,
        )


if __name__ == "__main__":
    {"mirrored": mirrored, "tasks": tasks}[sys.argv[1]](*sys.argv[2:])
