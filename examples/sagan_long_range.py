"""Does self-attention help a GAN where the structure is long-range? SAGAN
with and without its self-attention blocks on the fashion pairs (64x64
canvases, two Fashion-MNIST items of one class in opposite corners), several
seeds each, measured by FID and by the long-range agreement (do the two
generated items share a class?) as training goes.

It needs only Keras, NumPy, matplotlib and SciPy, so it runs on any backend,
a GPU machine without TensorFlow included:

    KERAS_BACKEND=jax python examples/sagan_long_range.py --out runs/sagan-pairs

`--cell-size 16` runs the same study on canvases of half the side (32x32,
items averaged down to 14x14), about a quarter of the compute: the size a
2-core CPU finishes in a couple of hours.

The two classifiers it measures with are trained first and cached under
`--out`: one of the canvases' pair class (the space FID is measured in) and
one of single items in a cell (it names each cell's class, see
`keras_attention.evaluation.long_range`). Then each (variant, seed) trains in
a process of its own, `--parallel` at a time (they share the accelerator),
and writes `<variant>-seed<k>.json` with its figures every `--eval-every`
steps. `--deadline-minutes` stops every run after the last evaluation that
fits, so a time-limited machine still returns the figures at a step count
that all runs reached. Writes `comparison.json` (per variant and step count:
values per seed, mean, standard deviation and 95% Student-t interval, and the
paired differences), `comparison.png` and `samples.png`. `keras-attention gan
--data fashion-pairs` trains one such run with the whole application
(checkpoints, plots), on TensorFlow. Figures: docs/tutorials/gan.md.

Every measurement also checkpoints its run (`<variant>-seed<k>-step<N>
.weights.h5`: both networks, the weight average and both optimizers). The
same command on the same `--out` resumes each run from its last measurement,
so a study cut off by a deadline, a kill or the end of a session goes on
later, on any backend; a larger `--steps` extends finished runs. The settings
that shape a run must match those it was started with.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

import keras
import numpy as np

from keras_attention.data.fashion_pairs import (
    CELL_SIZES,
    load_fashion_pairs,
    load_item_cells,
    pair_cells,
)
from keras_attention.evaluation import (
    ImageQuality,
    LongRangeAgreement,
    train_feature_classifier,
)
from keras_attention.models import SAGAN
from keras_attention.utils.files import write_text, written_whole

VARIANTS = ("attention", "no-attention")
# `agreement_above_chance` is the agreement less the chance agreement of
# the run's own class frequencies: a generator that draws few classes agrees
# by chance more often, which the bare agreement rewards.
FIGURES = ("fid", "long_range_agreement", "agreement_above_chance")
# As `keras-attention gan`: the FID classifier's and the item classifier's
# epochs.
CLASSIFIER_EPOCHS = 3
ITEM_CLASSIFIER_EPOCHS = 5
NUM_SAMPLES_SHOWN = 8
# What a run's figures depend on besides its step count: a run resumes only
# under the settings it was started with.
RUN_SETTINGS = (
    "cell_size",
    "width",
    "attention_resolution",
    "ema_decay",
    "batch_size",
    "num_pairs",
    "num_measured",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/sagan-long-range")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument(
        "--cell-size",
        type=int,
        default=32,
        choices=CELL_SIZES,
        help="32: 64x64 canvases; 16: 32x32 canvases of items averaged down to 14x14",
    )
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument(
        "--attention-resolution",
        type=int,
        default=None,
        help="side of the feature map the attention blocks work on (default: "
        "half the canvas side, where the paper found attention helps most)",
    )
    parser.add_argument("--ema-decay", type=float, default=0.999)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-pairs", type=int, default=None)
    parser.add_argument(
        "--num-measured", type=int, default=5000, help="images per measurement"
    )
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--deadline-minutes", type=float, default=None)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--run", nargs=2, metavar=("VARIANT", "SEED"))
    args = parser.parse_args(argv)
    if args.attention_resolution is None:
        args.attention_resolution = args.cell_size
    args.variants = args.variants.split(",")
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; expected some of {VARIANTS}")
    for name in (
        "seeds",
        "steps",
        "eval_every",
        "width",
        "batch_size",
        "parallel",
        "num_measured",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps % args.eval_every:
        parser.error(
            f"--steps ({args.steps}) must be a multiple of --eval-every "
            f"({args.eval_every})"
        )
    return args


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_json(path, value):
    write_text(path, json.dumps(value, indent=1))


def measures(args, canvases, labels):
    """The FID measure and the long-range agreement, their classifiers
    trained once under `--out`, and the reference and held-out real
    canvases (seed 0's order: the same for every run)."""
    classifier, accuracy = train_feature_classifier(
        canvases,
        labels,
        10,
        os.path.join(args.out, "classifier.keras"),
        epochs=CLASSIFIER_EPOCHS,
    )
    cells, cell_labels = load_item_cells(seed=0, cell_size=args.cell_size)
    item_classifier, item_accuracy = train_feature_classifier(
        cells,
        cell_labels,
        10,
        os.path.join(args.out, "classifier_items.keras"),
        epochs=ITEM_CLASSIFIER_EPOCHS,
    )
    order = np.random.default_rng(0).permutation(len(canvases))
    count = args.num_measured
    if 2 * count > len(canvases):
        raise ValueError(
            f"--num-measured {count} needs {2 * count} canvases (reference and "
            f"held-out real images); there are {len(canvases)}."
        )
    reference = canvases[order[:count]]
    held_out = canvases[order[count : 2 * count]]
    quality = ImageQuality(classifier, reference)
    agreement = LongRangeAgreement(
        item_classifier, canvases.shape[1:], pair_cells(args.cell_size)
    )
    return (
        quality,
        agreement,
        held_out,
        {
            "classifier_held_out_accuracy": accuracy,
            "item_classifier_held_out_accuracy": item_accuracy,
        },
    )


def run_path(args, variant, seed):
    return os.path.join(args.out, f"{variant}-seed{seed}.json")


def checkpoint_name(variant, seed, step):
    return f"{variant}-seed{seed}-step{step}.weights.h5"


def run_settings(args):
    return {name: getattr(args, name) for name in RUN_SETTINGS}


def read_run(args, variant, seed):
    """The run's record so far, or None before its first measurement.

    Raises `SystemExit` (one line) when the record was made with other
    settings or cannot be read."""
    path = run_path(args, variant, seed)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
        started_with = record["settings"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(
            f"{path} cannot be read ({error}); delete it and its "
            f"{variant}-seed{seed}-step*.weights.h5 to train that run afresh"
        ) from None
    differing = {
        name: value
        for name, value in started_with.items()
        if run_settings(args).get(name, value) != value
    }
    if differing:
        given = ", ".join(
            f"--{name.replace('_', '-')} {getattr(args, name)} (it has {value})"
            for name, value in differing.items()
        )
        raise SystemExit(
            f"{path} was started with other settings: {given}; resume it with "
            "its own settings or choose another --out"
        )
    return record


def reached(record):
    """The step of the run's last measurement (0 before the first)."""
    return record["evaluations"][-1]["step"] if record["evaluations"] else 0


def finished(args, record):
    return record is not None and "samples" in record and reached(record) >= args.steps


class Measure(keras.callbacks.Callback):
    """Every `--eval-every` steps: FID and agreement of `--num-measured`
    generated images, written with the losses to the run's JSON. Stops
    training at `--steps`, or when another interval would pass the deadline
    (intervals timed from the end of the first step, after compilation)."""

    def __init__(self, args, record, quality, agreement, path, deadline):
        super().__init__()
        self.args, self.record, self.path = args, record, path
        self.quality, self.agreement, self.deadline = quality, agreement, deadline
        self.first_step = self.step = reached(record)
        # Training seconds of the runs this one resumes.
        self.seconds_before = (
            record["evaluations"][-1]["seconds"] if record["evaluations"] else 0.0
        )

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step == self.first_step + 1:
            self.mark = time.time()
            self.started = self.mark - self.seconds_before
        if self.step % self.args.eval_every == 0:
            self.measure(logs)
        if self.step >= self.args.steps:
            self.model.stop_training = True

    def measure(self, logs):
        interval = time.time() - self.mark
        generated = self.model.sample(self.args.num_measured, seed=12345 + self.step)
        scores = self.quality(generated)
        agree = self.agreement(generated)
        self.record["evaluations"].append(
            {
                "step": self.step,
                "fid": scores["fid"],
                "inception_score": scores["inception_score"],
                "long_range_agreement": agree["agreement"],
                "long_range_agreement_chance": agree["chance"],
                "d_loss": float(logs["d_loss"]),
                "g_loss": float(logs["g_loss"]),
                "seconds": time.time() - self.started,
            }
        )
        self.checkpoint()
        log(
            f"{self.record['variant']} seed {self.record['seed']}: step "
            f"{self.step}, FID {scores['fid']:.2f}, agreement "
            f"{agree['agreement']:.3f} (chance {agree['chance']:.3f}), "
            f"{interval:.0f} s per {self.args.eval_every} steps"
        )
        self.mark = time.time()
        if self.deadline and self.mark + interval > self.deadline:
            log(f"{self.record['variant']} seed {self.record['seed']}: deadline")
            self.model.stop_training = True

    def checkpoint(self):
        """Saves the model as of this step, then the record that names it,
        then drops the older checkpoint: a kill at any point leaves a record
        whose checkpoint exists."""
        name = checkpoint_name(self.record["variant"], self.record["seed"], self.step)
        with written_whole(os.path.join(self.args.out, name)) as partial:
            self.model.save_weights(partial)
        older = self.record.get("checkpoint")
        self.record["checkpoint"] = name
        write_json(self.path, self.record)
        if older and older != name:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.args.out, older))


def train_one(args, variant, seed, deadline):
    record = read_run(args, variant, seed)
    if finished(args, record):
        return
    canvases, labels, _ = load_fashion_pairs(args.num_pairs, cell_size=args.cell_size)
    quality, agreement, _, _ = measures(args, canvases, labels)
    start = reached(record) if record else 0
    # A resumed run draws a data order of its own rather than the first
    # steps' order again.
    keras.utils.set_random_seed(seed + 1_000_003 * start)
    gan = SAGAN(
        image_shape=canvases.shape[1:],
        latent_dim=128,
        generator_width=args.width,
        discriminator_width=args.width,
        attention=variant == "attention",
        attention_resolution=args.attention_resolution,
        ema_decay=args.ema_decay,
        seed=seed,
    )
    gan.compile(jit_compile=True)
    path = run_path(args, variant, seed)
    if record is None:
        record = {
            "variant": variant,
            "seed": seed,
            "settings": run_settings(args),
            "backend": keras.backend.backend(),
            "generator_parameters": gan.generator.count_params(),
            "discriminator_parameters": gan.discriminator.count_params(),
            "evaluations": [],
        }
    elif record["evaluations"]:
        checkpoint = os.path.join(args.out, record["checkpoint"])
        try:
            gan.load_weights(checkpoint)
        except Exception as error:  # noqa: BLE001 (any failure: unusable)
            raise SystemExit(
                f"{checkpoint} cannot be read ({str(error).splitlines()[0]}); "
                f"delete it and {path} to train {variant}, seed {seed} afresh"
            ) from None
        log(f"{variant} seed {seed}: resuming at step {start}")
        record["backend"] = keras.backend.backend()
    # Whole batches only: a last, smaller batch would compile the step again.
    usable = len(canvases) - len(canvases) % args.batch_size
    images = canvases[:usable].astype("float32") / 127.5 - 1.0
    gan.fit(
        images,
        batch_size=args.batch_size,
        # Whole passes over the canvases; `Measure` stops at `--steps`.
        epochs=-(-(args.steps - start) // (len(images) // args.batch_size)),
        callbacks=[Measure(args, record, quality, agreement, path, deadline)],
        verbose=0,
    )
    if variant == "attention":
        record["attention_gamma"] = {
            name: float(
                keras.ops.convert_to_numpy(network.get_layer("self_attention").gamma)
            )
            for name, network in (
                ("generator", gan.sampler),
                ("discriminator", gan.discriminator),
            )
        }
    record["samples"] = (
        np.round(gan.sample(NUM_SAMPLES_SHOWN, seed=7) * 255).astype(int).tolist()
    )
    write_json(path, record)


def t_interval(values):
    from scipy import stats

    values = np.asarray(values, "float64")
    mean = float(values.mean())
    if len(values) < 2:
        return {"mean": mean, "std": 0.0, "interval": [mean, mean]}
    half = float(stats.t.ppf(0.975, len(values) - 1) * stats.sem(values))
    return {
        "mean": mean,
        "std": float(values.std(ddof=1)),
        "interval": [mean - half, mean + half],
    }


def figure_value(evaluation, figure):
    """One of `FIGURES` from a run's measurement at one step."""
    if figure == "agreement_above_chance":
        return (
            evaluation["long_range_agreement"]
            - evaluation["long_range_agreement_chance"]
        )
    return evaluation[figure]


def summarize(runs, seeds):
    """Per step count that every run reached: each figure's values per seed,
    mean, standard deviation and 95% interval per variant, and the paired
    difference (attention minus no-attention) when both variants ran."""
    steps = sorted(
        set.intersection(
            *({e["step"] for e in run["evaluations"]} for run in runs.values())
        )
    )
    summary = {}
    for step in steps:
        at_step = {}
        for (variant, seed), run in runs.items():
            found = next(e for e in run["evaluations"] if e["step"] == step)
            for figure in FIGURES:
                at_step.setdefault(variant, {}).setdefault(figure, {})[seed] = (
                    figure_value(found, figure)
                )
        entry = {}
        for variant, figures in at_step.items():
            entry[variant] = {
                figure: {
                    "values": [by_seed[s] for s in seeds],
                    **t_interval([by_seed[s] for s in seeds]),
                }
                for figure, by_seed in figures.items()
            }
        if set(VARIANTS) <= set(at_step):
            entry["attention_minus_no_attention"] = {
                figure: t_interval(
                    [
                        at_step["attention"][figure][s]
                        - at_step["no-attention"][figure][s]
                        for s in seeds
                    ]
                )
                for figure in FIGURES
            }
        summary[str(step)] = entry
    return summary


def plot(args, runs, seeds, real):
    from keras_attention.viz import plot_curves, plot_image_grid

    for figure, name in zip(
        FIGURES, ("FID", "agreement", "agreement above chance"), strict=True
    ):
        plot_curves(
            {
                f"{variant}, seed {seed}": [
                    figure_value(e, figure) for e in run["evaluations"]
                ]
                for (variant, seed), run in runs.items()
            },
            path=os.path.join(args.out, f"{figure}.png"),
            xlabel=f"training steps (x{args.eval_every})",
            ylabel=name,
            title=f"SAGAN on fashion pairs: {name} (real data: {real[figure]:.3f})",
        )
    shown = [np.asarray(run["samples"]) for run in runs.values()]
    plot_image_grid(
        np.concatenate(shown).astype("float32") / 255.0,
        path=os.path.join(args.out, "samples.png"),
        columns=NUM_SAMPLES_SHOWN,
        row_titles=[f"{variant} {seed}" for variant, seed in runs],
        title="SAGAN on fashion pairs: samples of each run (weight average)",
    )


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    deadline = None
    if args.deadline_minutes is not None:
        deadline = time.time() + 60 * args.deadline_minutes
    if args.run:
        variant, seed = args.run[0], int(args.run[1])
        train_one(args, variant, seed, float(os.environ.get("SAGAN_DEADLINE", 0)))
        return
    seeds = list(range(args.seeds))
    # Read (and their settings checked) before any long work starts.
    previous = {(v, s): read_run(args, v, s) for s in seeds for v in args.variants}
    log(f"backend {keras.backend.backend()}; loading the fashion pairs")
    canvases, labels, _ = load_fashion_pairs(args.num_pairs, cell_size=args.cell_size)
    quality, agreement, held_out, info = measures(args, canvases, labels)
    real_agreement = agreement(held_out)
    measured = {
        "fid": quality(held_out)["fid"],
        "long_range_agreement": real_agreement["agreement"],
        "long_range_agreement_chance": real_agreement["chance"],
    }
    real = {figure: figure_value(measured, figure) for figure in FIGURES}
    log(
        f"real canvases: FID {real['fid']:.3f}, agreement "
        f"{real['long_range_agreement']:.3f}"
    )
    jobs = []
    for (variant, seed), record in previous.items():
        if finished(args, record):
            log(f"{variant}, seed {seed}: finished at step {reached(record)}")
        else:
            jobs.append((variant, seed))
    environment = dict(os.environ, SAGAN_DEADLINE=str(deadline or 0))
    command = [sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:])]
    running = []
    while jobs or running:
        while jobs and len(running) < args.parallel:
            variant, seed = jobs.pop(0)
            record = previous[(variant, seed)]
            since = f" from step {reached(record)}" if record else ""
            log(f"starting {variant}, seed {seed}{since}")
            running.append(
                subprocess.Popen(
                    [*command, "--run", variant, str(seed)], env=environment
                )
            )
        time.sleep(2)
        for process in [p for p in running if p.poll() is not None]:
            running.remove(process)
            if process.returncode:
                raise SystemExit(f"a run failed with exit code {process.returncode}")
    runs = {}
    for seed in seeds:
        for variant in args.variants:
            with open(run_path(args, variant, seed)) as f:
                runs[(variant, seed)] = json.load(f)
    comparison = {
        "backend": keras.backend.backend(),
        "settings": {
            k: v for k, v in vars(args).items() if k not in ("out", "run", "parallel")
        },
        "real": real,
        **info,
        "chance": {
            f"{variant} seed {seed}": run["evaluations"][-1][
                "long_range_agreement_chance"
            ]
            for (variant, seed), run in runs.items()
        },
        "parameters": {
            variant: [
                runs[(variant, seeds[0])]["generator_parameters"],
                runs[(variant, seeds[0])]["discriminator_parameters"],
            ]
            for variant in args.variants
        },
        "by_step": summarize(runs, seeds),
    }
    write_json(os.path.join(args.out, "comparison.json"), comparison)
    plot(args, runs, seeds, real)
    last = max(comparison["by_step"], key=int, default=None)
    if last is not None:
        for variant in args.variants:
            figures = comparison["by_step"][last][variant]
            log(
                f"step {last}, {variant}: "
                + ", ".join(
                    f"{figure} {figures[figure]['mean']:.3f} "
                    f"{np.round(figures[figure]['interval'], 3).tolist()}"
                    for figure in FIGURES
                )
            )


if __name__ == "__main__":
    main()
