"""The order every training subcommand follows, and the options they share.

A task (`translate`, `classify`, `caption`, `gan`, `lm`, `pretrain`) is a
`Task`: it supplies what is its own (the data, the model, the `fit`
arguments, the evaluation, plots and summary line). `run` owns the order:
make the strategy and the output folder, load the data, build the model in
the strategy's scope, train it resumably (or load a finished run), save it,
evaluate it and write `metrics.json`. `compare` trains several models (and
seeds) of one task side by side and writes `comparison.json`.
"""

import dataclasses
import json
import os
import shutil

import keras
import numpy as np

from keras_attention.tasks import distribute, run_folder
from keras_attention.tasks.common import phase, write_json, write_metrics
from keras_attention.tasks.resumable import checkpoint_bytes, fit_resumable
from keras_attention.utils.files import written_whole

HISTORY_FILE = "history.json"
COMPARISON_FILE = "comparison.json"


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The options every training subcommand takes (the command line's shared
    flags), documented here once.

    Args:
        epochs: most training epochs; None: the task's default for its data.
        batch_size: the global training batch; None: the task's default.
        time_budget_minutes: no epoch starts that would end later than this
            many minutes of training (comparisons at equal training time).
        seed: seeds the splits, the initialisation and the shuffling.
        num_train: train on only this many examples (quick runs, tests).
        jit_compile: train with XLA; None compiles unless the `xla` suite
            measured the model faster without XLA on this kind of device
            (`tasks.distribute.jit_for`). Off under a distribution strategy.
        verbose: how training shows its progress: `"auto"`, Keras' bar at
            a terminal and one line per epoch elsewhere (a log file), or
            Keras' own 0, 1 or 2 (`tasks.epoch_callbacks.progress`).
        callbacks: extra Keras callbacks for `fit`.
        strategy: the `tf.distribute` strategy or Keras distribution to train
            with, by name (`tasks.distribute.make_strategy`) or object;
            `batch_size` is the global batch.
        restart: delete what an earlier run left in the folder (checkpoints,
            model, history, metrics) and train afresh.
    """

    epochs: int | None = None
    batch_size: int | None = None
    time_budget_minutes: float | None = None
    seed: int = 0
    num_train: int | None = None
    jit_compile: bool | None = None
    verbose: int | str = "auto"
    callbacks: tuple = ()
    strategy: object = "default"
    restart: bool = False

    @classmethod
    def take(cls, arguments):
        """`(options, rest)` from the keyword arguments of a task's entry
        point: `arguments["options"]` (default `TrainingOptions()`) with the
        fields named in `arguments` replaced, and the rest of `arguments`
        (the task's own)."""
        arguments = dict(arguments)
        options = arguments.pop("options", None) or cls()
        fields = {f.name for f in dataclasses.fields(cls)}
        given = {name: arguments.pop(name) for name in fields & set(arguments)}
        if "callbacks" in given:
            given["callbacks"] = tuple(given["callbacks"] or ())
        return dataclasses.replace(options, **given), arguments

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


class Task:
    """What a training subcommand supplies to `run`; one instance per run.

    `run` calls, in order: `load(context)` (read the data and check that
    the options fit it, before anything trains), `build(context,
    jit_compile)` (in the strategy's scope), `fit_arguments(context,
    model)`, then, once trained or loaded, `report(context, model,
    history)`. `context` is a `Run`: the output folder, the options (with
    the task's defaults filled in) and the strategy.
    """

    # The subcommand; `command/model` is the model's key in the `xla` suite.
    command = None
    model = None
    batch_size = 32
    epochs = 10
    model_file = "model.keras"
    # The parts of the trained model saved beside `model_file`: {file name:
    # the model's attribute that holds the part}.
    exports = {}

    def load(self, context):
        raise NotImplementedError

    def build(self, context, jit_compile):
        raise NotImplementedError

    def fit_arguments(self, context, model):
        raise NotImplementedError

    def report(self, context, model, history):
        """`(metrics, summary)`: the run's figures and its one-line summary;
        writes the run's plots."""
        raise NotImplementedError

    @property
    def title(self):
        """What the progress lines call the model (default: `model`)."""
        return self.model

    def announce(self, context, model):
        """The line printed before training; None: the parameter count and
        epochs."""

    def export(self, context, model):
        """Saves what the run leaves besides `model_file`: the `exports`."""
        for name, part in self.exports.items():
            save_model(getattr(model, part), os.path.join(context.out_dir, name))


@dataclasses.dataclass(frozen=True)
class Run:
    """What `run` hands a task's steps."""

    out_dir: str
    options: TrainingOptions
    strategy: object


def run(task, out_dir, options=None):
    """Trains (or resumes, or loads) `task`'s model in `out_dir`, evaluates
    it and writes `metrics.json`; returns the metrics.

    Re-run with the same folder, an interrupted training resumes where it
    stopped and a finished one is evaluated again without training. The run
    holds the folder (`run_folder.hold`): a second run there is refused.
    """
    options = options or TrainingOptions()
    options = options.replace(
        epochs=options.epochs or task.epochs,
        batch_size=options.batch_size or task.batch_size,
    )
    strategy, out_dir = distribute.prepare(
        options.strategy, out_dir, options.batch_size, options.seed
    )
    with run_folder.hold(out_dir):
        if options.restart:
            start_afresh(out_dir, task.model_file)
        context = Run(out_dir, options, strategy)
        task.load(context)
        model, history = train_or_load(
            out_dir,
            task.title,
            strategy,
            lambda jit_compile: task.build(context, jit_compile),
            lambda model: task.fit_arguments(context, model),
            options,
            model_file=task.model_file,
            export=lambda model: task.export(context, model),
            announce=lambda model: task.announce(context, model),
            model_key=f"{task.command}/{task.model}",
        )
        metrics, summary = task.report(context, model, history)
        return finish_run(out_dir, metrics, summary)


def run_task(task_class, out_dir, **arguments):
    """`run` of `task_class(**rest)`, where `arguments` hold the
    `TrainingOptions` (`options` or its fields by name) and the rest, the
    task's own (`TrainingOptions.take`)."""
    options, rest = TrainingOptions.take(arguments)
    return run(task_class(**rest), out_dir, options)


def start_afresh(out_dir, model_file="model.keras"):
    """Deletes what a run leaves in `out_dir` (its checkpoints, model,
    history and metrics), so that the next training starts from scratch;
    other files stay."""
    removed = []
    checkpoints = os.path.join(out_dir, "checkpoints")
    if os.path.isdir(checkpoints):
        shutil.rmtree(checkpoints)
        removed.append("checkpoints/")
    for name in (model_file, HISTORY_FILE, "metrics.json"):
        path = os.path.join(out_dir, name)
        if os.path.exists(path):
            os.remove(path)
            removed.append(name)
    if removed:
        phase(f"--restart: deleted {', '.join(removed)} from {out_dir}")


def compare(
    out_dir,
    make_task,
    names,
    options=None,
    *,
    summarize,
    seeds=None,
    plots=(),
    folder=None,
):
    """Runs `make_task(name)` for every name (and seed) under one strategy,
    each in its own folder, then writes `comparison.json` and the plots.

    Args:
        out_dir: the comparison's folder; each run writes in a subfolder.
        make_task: `make_task(name) -> Task`.
        names: the models (or variants) to compare.
        options: the `TrainingOptions` of every run.
        summarize: `summarize(results) -> dict`, written as
            `comparison.json` (`first_seed_figures` and `spread` help).
        seeds: the seeds to train each name with (default: `options.seed`).
        plots: functions `plot(results, out_dir)` drawing the comparison.
        folder: `folder(name, seed) -> str`, a run's subfolder; default
            `<name>` for one seed, `<name>/seed<k>` for several.

    Returns:
        `(results, summary)`: `{name: [metrics, one per seed]}` and what was
        written to `comparison.json`.
    """
    options = options or TrainingOptions()
    seeds = list(seeds or [options.seed])
    if folder is None:

        def folder(name, seed):
            return name if len(seeds) == 1 else os.path.join(name, f"seed{seed}")

    # One strategy for all runs (a multi-worker one can be made only once);
    # each run writes in its own folder, the summary in this worker's.
    runs_dir = out_dir
    strategy, out_dir = distribute.prepare(options.strategy, out_dir)
    results = {name: [] for name in names}
    with run_folder.hold(out_dir):
        for seed in seeds:
            for name in names:
                results[name].append(
                    run(
                        make_task(name),
                        os.path.join(runs_dir, folder(name, seed)),
                        options.replace(seed=seed, strategy=strategy),
                    )
                )
        summary = summarize(results)
        write_json(os.path.join(out_dir, COMPARISON_FILE), summary, indent=2)
        for plot in plots:
            plot(results, out_dir)
    phase(f"comparison written to {out_dir}")
    return results, summary


def first_seed_figures(results, keys):
    """`{name: {key: value}}` of each name's first run, for the `keys` it
    has (the summary of a comparison with one seed)."""
    return {
        name: {key: runs[0][key] for key in keys if key in runs[0]}
        for name, runs in results.items()
    }


def compare_once(out_dir, make_task, names, options, summary_keys, plots=()):
    """`compare` with one seed, summarized by each name's `summary_keys`
    (`first_seed_figures`); returns `{name: metrics}` of each name's run."""
    results, _ = compare(
        out_dir,
        make_task,
        names,
        options,
        summarize=lambda results: first_seed_figures(results, summary_keys),
        plots=plots,
    )
    return {name: runs[0] for name, runs in results.items()}


def compare_models(out_dir, task_class, models, summary_keys, plot, **arguments):
    """`compare_once` of `task_class(model=name, **rest)` for each of the
    `models`, drawing `plot`; `arguments` as `run_task`'s."""
    options, rest = TrainingOptions.take(arguments)
    return compare_once(
        out_dir,
        lambda name: task_class(model=name, **rest),
        models,
        options,
        summary_keys,
        plots=[plot],
    )


def spread(values):
    """The values of a figure over seeds with their mean and standard
    deviation."""
    return {
        "values": list(values),
        "mean": float(np.mean(values)),
        "std": float(np.std(values)),
    }


def read_history(run_dir):
    """The `history.json` a finished run left in `run_dir`."""
    with open(os.path.join(run_dir, HISTORY_FILE)) as f:
        return json.load(f)


def train_or_load(
    out_dir,
    name,
    strategy,
    build,
    fit_arguments,
    options,
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
        options: the `TrainingOptions` (`epochs`, `seed`, `jit_compile`,
            `time_budget_minutes`, `callbacks`, `verbose`; `jit_compile=None`
            is what was measured faster for `model_key` on this device).
        model_file: the file name of the saved model.
        export: `export(model)` saves anything else the run leaves (the GAN's
            sampler, say).
        announce: `announce(model) -> str or None`, the line printed before
            training (None: the parameter count and epochs).
        model_key: `"task/model"`, the model's name in the `xla` suite.

    Returns:
        `(model, history)`, the history as `fit_resumable` returns it.
    """
    model_path = os.path.join(out_dir, model_file)
    history_path = os.path.join(out_dir, HISTORY_FILE)
    if os.path.exists(history_path) and os.path.exists(model_path):
        finished = _load_finished(model_path, history_path)
        if finished is not None:
            return finished
    keras.utils.set_random_seed(options.seed)
    jit_compile, why = distribute.jit_for(strategy, options.jit_compile, model_key)
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
    arguments["callbacks"] = [
        *arguments.get("callbacks", []),
        *options.callbacks,
        *distribute.callbacks_for(strategy),
    ]
    line = announce(model) if announce else None
    phase(
        line
        or f"training {model.count_params():,} parameters for up to "
        f"{options.epochs} epochs"
    )
    with distribute.training_scope(model, strategy):
        history = fit_resumable(
            model,
            out_dir=out_dir,
            epochs=options.epochs,
            time_budget_minutes=options.time_budget_minutes,
            verbose=options.verbose,
            shuffle=False,
            **arguments,
        )
    save_model(model, model_path)
    if export is not None:
        export(model)
    write_json(history_path, history)
    if distribute.spans_processes(strategy):
        # Every computation on weights that span processes is one program
        # that all processes must compile and run together. The report's
        # eager ones (the attention plots) hung so: one process waiting to
        # compile an op while the other ran ahead. Each process reports on a
        # copy of the trained model that it holds alone.
        model = keras.saving.load_model(model_path)
    return model, history


def _load_finished(model_path, history_path):
    """`(model, history)` of a finished run, or None (with a line saying
    why) when either file cannot be read: the run then rebuilds its model
    from the final weights in its checkpoints."""
    try:
        with open(history_path) as f:
            history = json.load(f)
        model = keras.saving.load_model(model_path)
    except Exception as error:  # noqa: BLE001 (any failure: rebuild it)
        message = str(error).strip().splitlines()
        phase(
            f"{model_path} or {history_path} cannot be read "
            f"({message[0][:120] if message else type(error).__name__}); "
            "rebuilding it from the checkpoints"
        )
        return None
    phase(f"{model_path} is already trained; evaluating it again")
    return model, history


def save_model(model, path):
    """`model.save(path)`, written whole (`written_whole`)."""
    with written_whole(path, checkpoint_bytes(model)) as partial:
        model.save(partial)
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
