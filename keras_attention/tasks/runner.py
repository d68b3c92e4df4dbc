"""The steps every training subcommand shares: build the model in the
strategy's scope, train it resumably, save it, and write the run's metrics.

Each task (`translate`, `classify`, `caption`, `gan`) supplies only what is
its own: the data, the model builder, the `fit` arguments, the evaluation and
the plots.
"""

import json
import os

import keras

from keras_attention.tasks import distribute
from keras_attention.tasks.common import (
    fit_resumable,
    phase,
    write_json,
    write_metrics,
)

HISTORY_FILE = "history.json"


def train_or_load(
    out_dir,
    name,
    strategy,
    build,
    fit_arguments,
    epochs,
    seed,
    jit_compile=None,
    time_budget_minutes=None,
    callbacks=None,
    verbose=1,
    model_file="model.keras",
    export=None,
    announce=None,
    model_key=None,
):
    """The model and history of a finished run in `out_dir`, or else a model
    built, trained (resuming an interrupted training) and saved there.

    A run's training is finished when `history.json` exists: it is written
    last, after `model_file` and the exports, each written whole under
    another name and then renamed, so a kill at any moment leaves either a
    finished run or one that resumes.

    Args:
        out_dir: the run's folder (of this worker, under a strategy).
        name: what is built, for the progress lines.
        strategy: the `tf.distribute` strategy (or None) to build in.
        build: `build(jit_compile) -> model`, compiled; called in the
            strategy's scope after seeding with `seed`.
        fit_arguments: `fit_arguments(model) -> dict` of the task's own
            `fit_resumable` arguments (`train_data`, `validation_data`,
            `patience`, ...). The tasks' datasets shuffle themselves, so
            `fit` does not.
        epochs: most training epochs.
        seed: the random seed of the initialisation.
        jit_compile: train with XLA; None: what was measured faster for
            `model_key` on this device (`distribute.jit_for`).
        time_budget_minutes: no epoch starts that would end later than this.
        callbacks: extra Keras callbacks for `fit`.
        verbose: Keras progress bar setting.
        model_file: the file name of the saved model.
        export: `export(model)` saves anything else the run leaves (the GAN's
            sampler, say).
        announce: `announce(model) -> str`, the line printed before training
            (default: the parameter count and epochs).
        model_key: `"task/model"`, the model's name in the `xla` suite.

    Returns:
        `(model, history)`, the history as `fit_resumable` returns it.
    """
    model_path = os.path.join(out_dir, model_file)
    history_path = os.path.join(out_dir, HISTORY_FILE)
    if os.path.exists(history_path) and os.path.exists(model_path):
        phase(f"{model_path} is already trained; evaluating it again")
        with open(history_path) as f:
            return keras.saving.load_model(model_path), json.load(f)
    keras.utils.set_random_seed(seed)
    jit_compile, why = distribute.jit_for(strategy, jit_compile, model_key)
    phase(f"building {name} ({distribute.describe(strategy)}, {why})")
    with distribute.scope(strategy):
        model = build(jit_compile)
    arguments = dict(fit_arguments(model))
    # Training batches are whole (the tasks drop the remainder); the last
    # validation batch may not split between devices.
    arguments["train_data"] = distribute.local_batches(
        arguments["train_data"], strategy
    )
    if arguments.get("validation_data") is not None:
        arguments["validation_data"] = distribute.local_batches(
            arguments["validation_data"], strategy, uneven=True
        )
    arguments["callbacks"] = [*arguments.get("callbacks", []), *(callbacks or [])]
    phase(
        announce(model)
        if announce
        else f"training {model.count_params():,} parameters for up to {epochs} epochs"
    )
    with distribute.training_scope(model, strategy):
        history = fit_resumable(
            model,
            out_dir=out_dir,
            epochs=epochs,
            time_budget_minutes=time_budget_minutes,
            verbose=verbose,
            shuffle=False,
            **arguments,
        )
    save_model(model, model_path)
    if export is not None:
        export(model)
    write_json(history_path, history)
    return model, history


def save_model(model, path):
    """`model.save(path)` through a temporary file renamed to `path`, so that
    the file exists only complete."""
    folder, name = os.path.split(path)
    partial = os.path.join(folder, f"partial.{name}")
    model.save(partial)
    os.replace(partial, path)
    return path


def compile_with_adam(
    model,
    jit_compile,
    from_logits=True,
    weighted_accuracy=True,
    reduction="sum_over_batch_size",
    learning_rate=1e-3,
):
    """Compiles `model` as every sequence and text model here trains: Adam at
    `learning_rate` (1e-3) with gradients clipped at norm 1, sparse
    categorical cross-entropy, and accuracy (weighted by the padding mask for
    token sequences).
    `reduction="mean_with_sample_weight"` makes the loss the mean over the
    weighted targets (masked tokens) rather than over all of them."""
    accuracy = {"weighted_metrics" if weighted_accuracy else "metrics": ["accuracy"]}
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=from_logits, reduction=reduction
        ),
        jit_compile=jit_compile,
        **accuracy,
    )
    return model


def finish_run(out_dir, metrics, summary):
    """Writes `metrics.json` and prints the run's one-line summary."""
    write_metrics(out_dir, metrics)
    phase(f"{summary}; wrote {out_dir}")
    return metrics
