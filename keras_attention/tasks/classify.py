"""`keras-attention classify`: train, evaluate, explain and use a text
classifier."""

import json
import math
import os

import keras
import numpy as np

from keras_attention._checks import check_positive_int, check_positive_number
from keras_attention.data.classification import (
    labelled_sample,
    load_classification_data,
)
from keras_attention.data.pipeline import buckets_within, classification_dataset
from keras_attention.evaluation.attribution import NUM_DELETED_WORDS, deletion_check
from keras_attention.models import HierarchicalAttentionNetwork, TransformerClassifier
from keras_attention.names import CLASSIFICATION_MONITORS
from keras_attention.tasks import runner

# The names marked F401 were this module's before the classifiers moved to
# classify_models: importable from here as before.
from keras_attention.tasks.classify_models import (
    MODELS,
    SETTINGS,
    build_model,
    classify_texts,  # noqa: F401
    encode_for_model,
    explain,
)
from keras_attention.tasks.common import (
    ArgumentError,
    cached_word_piece,
    check_training_size,
    phase,
    write_json,
)
from keras_attention.viz import (
    plot_confusion_matrix,
    plot_learning_curves,
    plot_metric_spread,
)

# The figures of each model and seed in `comparison.json` (and, for attention
# models, the deletion check's).
SUMMARY_KEYS = ("accuracy", "macro_f1", "train_seconds", "epochs")
MONITORS = CLASSIFICATION_MONITORS


class Classification(runner.Task):
    """`keras-attention classify`: a text classifier trained on `data`,
    evaluated on its test split (accuracy, macro-F1, the per-class report,
    the confusion matrix and, for attention models, the deletion check),
    with highlighted explanations of test texts. Training stops after
    `SETTINGS["patience"]` epochs without a better validation loss (or
    macro-F1, `monitor`), and the weights of the best epoch are kept."""

    command = "classify"
    epochs = SETTINGS["epochs"]

    def __init__(
        self,
        data="reviews",
        model="transformer",
        num_explanations=3,
        encoder=None,
        labelled=None,
        learning_rate=None,
        monitor="val_loss",
        **model_kwargs,
    ):
        if model not in MODELS:
            raise ValueError(f"`model` must be one of {MODELS}; received {model!r}.")
        if encoder is not None and model != "transformer":
            raise ValueError(
                f"`encoder` starts a Transformer; received model={model!r}."
            )
        check_positive_int("labelled", labelled, allow_none=True)
        check_positive_number("learning_rate", learning_rate, allow_none=True)
        self.learning_rate = learning_rate or SETTINGS["learning_rate"]
        if monitor not in MONITORS:
            raise ValueError(
                f"`monitor` must be one of {MONITORS}; received {monitor!r}."
            )
        self.monitor = monitor
        self.data, self.model = data, model
        self.num_explanations, self.encoder = num_explanations, encoder
        self.labelled = labelled
        self.model_kwargs = model_kwargs

    def load(self, context):
        options = context.options
        if self.labelled and options.num_train:
            raise ArgumentError(
                "--labelled and --num-train both choose the training texts; give one"
            )
        phase(f"loading {self.data}")
        # With a labelling budget the splits stay those of seed 0 (the
        # split `pretrain` reads by default, so its encoder never saw a
        # validation text); the seed draws the labelled texts instead.
        split_seed = 0 if self.labelled else options.seed
        self.splits = splits = load_classification_data(self.data, seed=split_seed)
        train = splits.train
        if self.labelled:
            if self.labelled > len(train):
                raise ArgumentError(
                    f"--labelled {self.labelled:,} asks for more texts than the "
                    f"{len(train):,} of the training split"
                )
            if self.labelled < splits.num_classes:
                raise ArgumentError(
                    f"--labelled {self.labelled} is fewer texts than the "
                    f"{splits.num_classes} classes: every class needs one"
                )
            labelled = labelled_sample(train, self.labelled, seed=options.seed)
            self.train_texts, self.train_labels = labelled.texts, labelled.labels
            self.repeats = math.ceil(SETTINGS["min_epoch_texts"] / self.labelled)
            phase(
                f"{len(labelled):,} labelled texts drawn by seed {options.seed} "
                f"(per class {np.bincount(labelled.labels).tolist()}), shown "
                f"{self.repeats} time(s) an epoch"
            )
        else:
            self.train_texts = train.texts[: options.num_train or None]
            self.train_labels = train.labels[: len(self.train_texts)]
            self.repeats = 1
        check_training_size(
            options.batch_size,
            len(self.train_texts) * self.repeats,
            "texts",
            num_train=options.num_train,
            available=len(train.texts),
        )
        check_classes(splits, self.train_labels, options.num_train)
        # The pretrained encoder (loaded from `encoder`'s path) and its path.
        self.pretrained, self.encoder_path = self.encoder, None
        if isinstance(self.encoder, (str, os.PathLike)):
            self.encoder_path = os.fspath(self.encoder)
            phase(f"loading the pretrained encoder {self.encoder_path}")
            self.pretrained = keras.saving.load_model(self.encoder_path)
        if self.pretrained is not None:
            if self.pretrained.tokenizer is None:
                raise ValueError(
                    "The encoder has no tokenizer; pretrain it with "
                    "`keras-attention pretrain`, or give it `tokenizer=`."
                )
            self.tokenizer = self.pretrained.tokenizer
        else:
            # From every training text, labelled or not: the vocabulary
            # a pretrained encoder brings is learned from them too.
            self.tokenizer = cached_word_piece(
                os.path.join(context.out_dir, "vocabulary.txt"),
                train.texts if self.labelled else self.train_texts,
                SETTINGS["vocabulary_size"],
                lowercase=SETTINGS["lowercase"],
            )
        phase(
            f"{len(self.train_texts)} training, {len(splits.valid)} validation and "
            f"{len(splits.test)} test texts; {len(splits.class_names)} classes "
            f"{list(splits.class_names)}; vocabulary "
            f"{self.tokenizer.vocabulary_size()}"
        )

    def build(self, context, jit_compile):
        num_classes, class_names = len(self.splits.class_names), self.splits.class_names
        if self.pretrained is not None:
            net = TransformerClassifier.from_pretrained_encoder(
                self.pretrained,
                num_classes,
                class_names=class_names,
                tokenizer=self.tokenizer,
                **self.model_kwargs,
            )
        else:
            net = build_model(
                self.model,
                self.tokenizer.vocabulary_size(),
                num_classes,
                class_names=class_names,
                tokenizer=self.tokenizer,
                **self.model_kwargs,
            )
        # The classifiers output probabilities.
        return runner.compile_with_adam(
            net,
            jit_compile,
            from_logits=False,
            weighted_accuracy=False,
            learning_rate=self.learning_rate,
        )

    def fit_arguments(self, context, net):
        batch_size, valid = context.options.batch_size, self.splits.valid
        phase(f"encoding texts for {self.model}")
        hierarchical = isinstance(net, HierarchicalAttentionNetwork)
        token_ids, labels = encode_for_model(net, self.train_texts), self.train_labels
        token_ids = np.concatenate([token_ids] * self.repeats)
        labels = np.concatenate([labels] * self.repeats)
        # Full batches only: each of the few batch shapes compiles once.
        train_data = classification_dataset(
            token_ids,
            labels,
            batch_size,
            shuffle=True,
            seed=context.options.seed,
            bucket_boundaries=buckets_within(
                SETTINGS["sentence_buckets" if hierarchical else "token_buckets"],
                token_ids.shape[1],
            ),
            drop_remainder=True,
        )
        valid_ids = encode_for_model(net, valid.texts)
        arguments = {
            "train_data": train_data,
            "validation_data": classification_dataset(
                valid_ids, valid.labels, batch_size
            ),
            "patience": SETTINGS["patience"],
            "monitor": self.monitor,
        }
        if self.monitor == "val_macro_f1":
            arguments["epoch_metrics"] = [
                ValidationMacroF1(valid_ids, valid.labels, len(self.splits.class_names))
            ]
        return arguments

    def report(self, context, net, history):
        test, out_dir, seed = self.splits.test, context.out_dir, context.options.seed
        phase(f"classifying {len(test)} test texts")
        x_test = encode_for_model(net, test.texts)
        probabilities = np.asarray(net.predict(x_test, batch_size=128, verbose=0))
        metrics = evaluate(
            test.labels, probabilities, self.splits.class_names, out_dir, self.model
        )
        if net.has_attention:
            phase(
                f"deletion check: removing the {NUM_DELETED_WORDS} most-attended "
                f"vs {NUM_DELETED_WORDS} random words of each test text"
            )
            metrics["deletion"] = deletion_check(net, x_test, probabilities, seed=seed)
            if self.num_explanations:
                explain(net, test.texts[: self.num_explanations], out_dir)
        best = history["best_epoch"]
        metrics.update(
            {
                "model": self.model,
                "data": self.data,
                "classes": list(self.splits.class_names),
                "train_texts": len(self.train_texts),
                "labelled": self.labelled,
                "learning_rate": self.learning_rate,
                "monitor": self.monitor,
                "test_texts": len(test),
                "parameters": net.count_params(),
                "seed": seed,
                "epochs": history["epochs"],
                "train_seconds": history["train_seconds"],
                "best_epoch": best,
                "best_valid_accuracy": history["val_accuracy"][best - 1],
                "best_valid_loss": history["val_loss"][best - 1],
            }
        )
        if "val_macro_f1" in history:
            metrics["best_valid_macro_f1"] = history["val_macro_f1"][best - 1]
        if self.pretrained is not None:
            metrics["encoder"] = self.encoder_path or self.pretrained.name
        summary = (
            f"{self.model} on {self.data}: accuracy {metrics['accuracy']:.3f}, "
            f"macro-F1 {metrics['macro_f1']:.3f}"
        )
        deletion = metrics.get("deletion")
        if deletion:
            summary += (
                f"; probability change deleting top-{NUM_DELETED_WORDS} words "
                f"{deletion['top_attended']:.3f} vs random {deletion['random']:.3f}"
            )
        return metrics, summary + f"; trained {history['train_seconds']:.0f} s"


def run_classify(
    out_dir,
    data="reviews",
    model="transformer",
    num_explanations=3,
    encoder=None,
    labelled=None,
    learning_rate=None,
    monitor="val_loss",
    **kwargs,
):
    """Trains `model` on `data`, evaluates it on the test split and writes
    `metrics.json` (accuracy, macro-F1, the per-class report and, for
    attention models, the deletion check), `confusion_matrix.png`,
    `explanation_*.html`/`.png` (attention models) and `model.keras` under
    `out_dir` (`runner.run`: an interrupted training resumes, a finished one
    is evaluated again).

    Args:
        out_dir: output folder.
        data: `"reviews"`, `"fortunes"` or the path of a `text,label` CSV.
        model: one of `MODELS`.
        num_explanations: test documents to explain with highlights.
        encoder: a pretrained `TransformerTextEncoder` (or the path of its
            `.keras` file, as `keras-attention pretrain` writes it) that the
            Transformer starts from (`TransformerClassifier.
            from_pretrained_encoder`), with its sizes and its tokenizer;
            only with `model="transformer"`.
        labelled: a labelling budget: train on this many texts of the
            training split, drawn by the seed with each class in proportion
            (`data.classification.labelled_sample`), repeated so that an
            epoch shows at least `SETTINGS["min_epoch_texts"]`; the splits
            are then those of seed 0 in every run, and the vocabulary is
            learned from every training text (their labels unused).
        learning_rate: Adam's learning rate; default
            `SETTINGS["learning_rate"]`.
        monitor: what early stopping and the kept weights follow, one of
            `MONITORS`: `"val_loss"`, or `"val_macro_f1"` (computed on the
            validation split after every epoch).
        **kwargs: `options` (a `runner.TrainingOptions`) or its fields by name
            (`epochs`, `batch_size`, `seed`, ...; default batch 32, at most
            `SETTINGS["epochs"]` epochs); the rest go to the model's
            constructor.

    Returns:
        The metrics dict.
    """
    return runner.run_task(
        Classification,
        out_dir,
        data=data,
        model=model,
        num_explanations=num_explanations,
        encoder=encoder,
        labelled=labelled,
        learning_rate=learning_rate,
        monitor=monitor,
        **kwargs,
    )


def compare(out_dir, models, data="reviews", seeds=(0,), **kwargs):
    """Runs `run_classify` for every model and seed, in `out_dir/<model>`
    (one seed) or `out_dir/<model>/seed<k>`, and writes `comparison.json`
    (each figure's per-seed values, mean and standard deviation) and
    `comparison.png`. `kwargs` are `run_classify`'s."""
    options, task_kwargs = runner.TrainingOptions.take(kwargs)
    seeds = list(seeds)

    def per_seed(results):
        """`{name: {figure: [value of each seed]}}`."""
        figures = {}
        for name, runs in results.items():
            figures[name] = {key: [r[key] for r in runs] for key in SUMMARY_KEYS}
            for key in ("top_attended", "random"):
                values = [r["deletion"][key] for r in runs if "deletion" in r]
                if values:
                    figures[name][f"deletion_{key}"] = values
        return figures

    def summarize(results):
        return {
            "data": data,
            "seeds": seeds,
            "models": {
                name: {
                    figure: runner.spread(values) for figure, values in figures.items()
                }
                for name, figures in per_seed(results).items()
            },
        }

    def plot(results, folder):
        plot_metric_spread(
            per_seed(results),
            path=os.path.join(folder, "comparison.png"),
            title=f"{data}: test accuracy and macro-F1 over {len(seeds)} seed(s)",
        )

    _, summary = runner.compare(
        out_dir,
        lambda name: Classification(data, name, **task_kwargs),
        models,
        options,
        seeds=seeds,
        summarize=summarize,
        plots=[plot],
    )
    for name, figures in summary["models"].items():
        accuracy, macro_f1 = figures["accuracy"], figures["macro_f1"]
        phase(
            f"{name}: accuracy {accuracy['mean']:.3f} ± {accuracy['std']:.3f}, "
            f"macro-F1 {macro_f1['mean']:.3f} ± {macro_f1['std']:.3f}"
        )
    return summary


def learning_curve(out_dir, arms, sizes, seeds=(0, 1, 2), data="reviews", **kwargs):
    """Test scores against the number of labelled training texts: every arm
    (a model, or a Transformer with a pretrained encoder) trained by
    `run_classify` with each labelling budget of `sizes` and each seed, in
    `out_dir/<arm>/n<size>/seed<k>`, summarized in `learning_curve.json`
    (per arm and size: every seed's accuracy and macro-F1, their mean,
    standard deviation and 95% Student-t interval of the mean, and the
    scores of always guessing the most frequent class) and drawn in
    `learning_curve.png` (accuracy and macro-F1).

    Runs go seed by seed, each seed through every size and arm, so an
    interrupted curve has all arms alike; a run whose `metrics.json` exists
    is read, not run again.

    Args:
        out_dir: output folder.
        arms: `{name: run_classify arguments}`, e.g. `{"scratch": {"model":
            "transformer"}, "pretrained": {"model": "transformer",
            "encoder": "runs/pretrain/encoder.keras"}, "bilstm": {"model":
            "bilstm"}}`; names are folder names.
        sizes: labelling budgets (see `run_classify`'s `labelled`).
        seeds: the seeds of every arm and size.
        data: the classification data.
        **kwargs: `run_classify` arguments shared by every run (`epochs`,
            `batch_size`, ...).

    Returns:
        The summary written to `learning_curve.json`.
    """
    from scipy import stats

    if not arms:
        raise ValueError("`arms` must name at least one model; received none.")
    sizes, seeds = [int(size) for size in sizes], list(seeds)
    if not sizes or not seeds:
        raise ValueError(
            f"`sizes` and `seeds` must not be empty; received {sizes} and {seeds}."
        )
    kwargs.setdefault("num_explanations", 0)
    results = {name: {size: [] for size in sizes} for name in arms}
    for seed in seeds:
        for size in sizes:
            for name, arguments in arms.items():
                run_dir = os.path.join(out_dir, name, f"n{size}", f"seed{seed}")
                metrics_path = os.path.join(run_dir, "metrics.json")
                if os.path.exists(metrics_path):
                    with open(metrics_path) as file:
                        metrics = json.load(file)
                else:
                    phase(f"{name}, {size:,} labelled texts, seed {seed}")
                    metrics = run_classify(
                        run_dir,
                        data=data,
                        labelled=size,
                        seed=seed,
                        **arguments,
                        **kwargs,
                    )
                results[name][size].append(metrics)

    def figure(runs, key):
        values = [run[key] for run in runs]
        mean = float(np.mean(values))
        half = 0.0
        if len(values) > 1:
            error = float(np.std(values, ddof=1)) / np.sqrt(len(values))
            half = float(stats.t.ppf(0.975, len(values) - 1)) * error
        return {**runner.spread(values), "interval": [mean - half, mean + half]}

    majority = most_frequent_class_scores(data)
    summary = {
        "data": data,
        "seeds": seeds,
        "sizes": sizes,
        "most_frequent_class": majority,
        "interval": "95% Student-t interval of the mean over seeds",
        "arms": {
            name: {
                str(size): {
                    key: figure(runs, key)
                    for key in ("accuracy", "macro_f1", "train_seconds", "epochs")
                }
                for size, runs in by_size.items()
            }
            for name, by_size in results.items()
        },
    }
    write_json(os.path.join(out_dir, "learning_curve.json"), summary, indent=2)
    plot_learning_curve(summary, os.path.join(out_dir, "learning_curve.png"))
    for name, by_size in summary["arms"].items():
        phase(
            f"{name}, accuracy / macro-F1 by labelled texts: "
            + ", ".join(
                f"{size} {points['accuracy']['mean']:.3f} / "
                f"{points['macro_f1']['mean']:.3f}"
                for size, points in by_size.items()
            )
        )
    return summary


def plot_learning_curve(summary, path):
    """Draws a `learning_curve.json` (the summary `learning_curve` returns)
    as its test accuracy and macro-F1 by labelled texts, against the
    most-frequent-class scores."""
    majority = summary["most_frequent_class"]
    return plot_learning_curves(
        {
            f"test {label}": {
                name: {size: points[key] for size, points in by_size.items()}
                for name, by_size in summary["arms"].items()
            }
            for key, label in (("accuracy", "accuracy"), ("macro_f1", "macro-F1"))
        },
        path=path,
        title=f"{summary['data']}: test scores by labelled texts, "
        f"{len(summary['seeds'])} seed(s), 95% intervals",
        references={
            "test accuracy": (majority["accuracy"], "most frequent class"),
            "test macro-F1": (majority["macro_f1"], "most frequent class"),
        },
    )


def most_frequent_class_scores(data="reviews"):
    """The test accuracy and macro-F1 of always guessing the most frequent
    class of seed 0's training split: the floor a classifier must beat
    (on the reviews, 66% are "great")."""
    splits = load_classification_data(data, seed=0)
    guess = int(np.argmax(np.bincount(splits.train.labels)))
    probabilities = np.eye(splits.num_classes)[np.full(len(splits.test), guess)]
    scores = evaluate(splits.test.labels, probabilities, splits.class_names)
    return {key: scores[key] for key in ("accuracy", "macro_f1")}


class ValidationMacroF1(keras.callbacks.Callback):
    """Adds `val_macro_f1` to every epoch's logs: the macro-F1 of the
    model's predictions on the validation inputs."""

    def __init__(self, inputs, labels, num_classes, batch_size=128):
        super().__init__()
        self.inputs, self.labels = inputs, np.asarray(labels)
        self.classes = list(range(num_classes))
        self.batch_size = batch_size

    def on_epoch_end(self, epoch, logs=None):
        probabilities = self.model.predict(
            self.inputs, batch_size=self.batch_size, verbose=0
        )
        predictions = np.argmax(np.asarray(probabilities), axis=-1)
        if logs is not None:
            logs["val_macro_f1"] = macro_f1(self.labels, predictions, self.classes)


def macro_f1(labels, predictions, classes):
    """The unweighted mean over `classes` of each class's F1 (scikit-learn),
    0 for a class never predicted nor present."""
    from sklearn.metrics import f1_score

    return float(
        f1_score(labels, predictions, labels=classes, average="macro", zero_division=0)
    )


def evaluate(labels, probabilities, class_names, out_dir=None, title=None):
    """Accuracy, macro-F1 and the per-class report (scikit-learn) of
    predictions, and the confusion matrix, also drawn to
    `out_dir/confusion_matrix.png`."""
    from sklearn import metrics as sk

    predictions = np.argmax(probabilities, axis=-1)
    classes = list(range(len(class_names)))
    report = sk.classification_report(
        labels,
        predictions,
        labels=classes,
        target_names=list(class_names),
        output_dict=True,
        zero_division=0,
    )
    matrix = sk.confusion_matrix(labels, predictions, labels=classes)
    if out_dir is not None:
        plot_confusion_matrix(
            matrix,
            list(class_names),
            path=os.path.join(out_dir, "confusion_matrix.png"),
            title=f"{title}: test confusion matrix" if title else None,
        )
    return {
        "accuracy": float(sk.accuracy_score(labels, predictions)),
        "macro_f1": macro_f1(labels, predictions, classes),
        "per_class": {
            name: {k: float(v) for k, v in report[name].items()} for name in class_names
        },
        "confusion_matrix": matrix.tolist(),
    }


def check_classes(splits, train_labels, num_train=None):
    """Raises an error unless every class has an example in the training
    split (`ArgumentError` where `--num-train` took too few) and the
    validation and test splits are not empty: a run that would learn
    nothing, or report a perfect score on one class, stops before any work.
    """
    names = splits.class_names
    counts = np.bincount(np.asarray(train_labels, "int64"), minlength=len(names))
    missing = [names[i] for i in np.flatnonzero(counts == 0)]
    if missing:
        taken = (
            f" (--num-train {num_train} takes the first {len(train_labels):,} "
            "texts of the shuffled training split)"
            if num_train
            else ""
        )
        if len(train_labels) < len(names):
            problem = (
                f"{len(train_labels):,} training texts for {len(names)} classes: "
                "every class needs at least one"
            )
        elif len(missing) == len(names) - 1:
            only = names[int(np.argmax(counts))]
            problem = (
                f"every training text has the label {only!r}: a classifier needs "
                "examples of at least 2 labels"
            )
        else:
            listed = ", ".join(map(repr, missing[:5]))
            problem = f"no training text has the label {listed}"
        raise ArgumentError(f"{problem}{taken}")
    for split in ("valid", "test"):
        if not len(getattr(splits, split).texts):
            raise ValueError(
                f"the {'validation' if split == 'valid' else 'test'} split is empty: "
                "a tenth of each class is held out for it, and no class has the 6 "
                "or more examples for a tenth to round to one"
            )
