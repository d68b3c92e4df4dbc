"""`keras-attention classify`: train, evaluate, explain and use a text
classifier."""

import json
import os

import keras
import numpy as np

from keras_attention.data.classification import (
    encode_documents,
    load_classification_data,
)
from keras_attention.data.pipeline import classification_dataset, encode_texts
from keras_attention.evaluation.attribution import (
    NUM_DELETED_WORDS,
    deletion_check,
    word_weights,
)
from keras_attention.models import (
    BagOfEmbeddingsClassifier,
    BiLSTMClassifier,
    HierarchicalAttentionNetwork,
    TransformerClassifier,
)
from keras_attention.tasks import distribute
from keras_attention.tasks.common import cached_word_piece, check_training_size, phase
from keras_attention.tasks.runner import (
    compile_with_adam,
    finish_run,
    train_or_load,
)
from keras_attention.viz import (
    highlight_html,
    plot_confusion_matrix,
    plot_highlighted_text,
    plot_metric_spread,
)

MODELS = ("transformer", "han", "bilstm", "bag")
# The input sizes in tokens and the training budget shared by every model.
SETTINGS = {
    "vocabulary_size": 8000,
    "lowercase": True,
    "max_length": 256,
    "max_sentences": 12,
    "max_words": 40,
    # Training batches are cut to 64, 128 or 256 tokens (flat texts), or to
    # 4, 8 or 12 sentences (documents).
    "token_buckets": (64, 128),
    "sentence_buckets": (4, 8),
    "epochs": 15,
    "patience": 3,
}


def build_model(name, vocabulary_size, num_classes, settings=SETTINGS, **kwargs):
    """The classifier called `name` (one of `MODELS`) sized for the data."""
    if name == "transformer":
        return TransformerClassifier(
            vocabulary_size, num_classes, max_length=settings["max_length"], **kwargs
        )
    if name == "han":
        return HierarchicalAttentionNetwork(
            vocabulary_size,
            num_classes,
            max_sentences=settings["max_sentences"],
            max_words=settings["max_words"],
            **kwargs,
        )
    if name == "bilstm":
        return BiLSTMClassifier(vocabulary_size, num_classes, **kwargs)
    if name == "bag":
        return BagOfEmbeddingsClassifier(vocabulary_size, num_classes, **kwargs)
    raise ValueError(f"`model` must be one of {MODELS}; received {name!r}.")


def encode_for_model(model, texts):
    """The token ids `model` reads, with its tokenizer: a `(N, S, W)` grid of
    sentences and words for a `HierarchicalAttentionNetwork`, `(N, T)` for the
    others (cut to `SETTINGS["max_length"]` for models without a length)."""
    if model.tokenizer is None:
        raise ValueError(
            "This model has no tokenizer; train it with `keras-attention "
            "classify`, or give the model `tokenizer=`."
        )
    if isinstance(model, HierarchicalAttentionNetwork):
        return encode_documents(
            texts, model.tokenizer, model.max_sentences, model.max_words
        )
    length = getattr(model, "max_length", SETTINGS["max_length"])
    return encode_texts(texts, model.tokenizer, length)


def classify_texts(model, texts, num_top_words=5):
    """Labels strings with a model that carries its tokenizer.

    Returns:
        One dict per text: `label`, `probability` and, for attention models,
        `top_words`: the `num_top_words` words with the most attention, as
        `(word, weight)` pairs.
    """
    token_ids = encode_for_model(model, texts)
    probabilities = np.asarray(model.predict(token_ids, verbose=0))
    importance = model.token_importance(token_ids) if model.has_attention else None
    names = model.class_names or [str(i) for i in range(model.num_classes)]
    results = []
    for i, row in enumerate(probabilities):
        label = int(np.argmax(row))
        result = {"label": names[label], "probability": float(row[label])}
        if importance is not None:
            words, weights = word_weights(model.tokenizer, token_ids[i], importance[i])
            if token_ids.ndim == 3:  # sentences of words: rank all words
                words, weights = sum(words, []), sum(weights, [])
            order = np.argsort(-np.array(weights), kind="stable")[:num_top_words]
            result["top_words"] = [(words[j], float(weights[j])) for j in order]
        results.append(result)
    return results


def run_classify(
    out_dir,
    data="reviews",
    model="transformer",
    epochs=None,
    batch_size=32,
    time_budget_minutes=None,
    seed=0,
    num_train=None,
    num_explanations=3,
    jit_compile=None,
    verbose=1,
    callbacks=None,
    strategy="default",
    encoder=None,
    **model_kwargs,
):
    """Trains `model` on `data`, evaluates it on the test split and writes
    `metrics.json` (accuracy, macro-F1, the per-class report and, for
    attention models, the deletion check), `confusion_matrix.png`,
    `explanation_*.html`/`.png` (attention models) and `model.keras` under
    `out_dir`. Re-run with the same folder, an interrupted training resumes
    from its last finished epoch, and a finished one is evaluated again.

    Args:
        out_dir: output folder.
        data: `"reviews"`, `"fortunes"` or the path of a `text,label` CSV.
        model: one of `MODELS`.
        epochs: most training epochs (default `SETTINGS["epochs"]`); training
            stops after `SETTINGS["patience"]` epochs without a better
            validation loss, and the weights of the best epoch are kept.
        batch_size: training batch size.
        time_budget_minutes: stop training before an epoch that would end
            later than this.
        seed: seed of the splits, the initialisation and the shuffling.
        num_train: use only this many training texts (quick runs, tests).
        num_explanations: test documents to explain with highlights.
        jit_compile: train with XLA; None (default) compiles unless the `xla`
            suite measured this model faster without XLA on this kind of
            device (`tasks.distribute.jit_for`). Off under a distribution
            strategy.
        verbose: Keras progress bar setting.
        callbacks: extra Keras callbacks for `fit`.
        strategy: `tf.distribute` strategy to train with, by name (see
            `keras_attention.tasks.distribute.make_strategy`) or object;
            `batch_size` is the global batch.
        encoder: a pretrained `TransformerTextEncoder` (or the path of its
            `.keras` file, as `keras-attention pretrain` writes it) that the
            Transformer starts from (`TransformerClassifier.
            from_pretrained_encoder`), with its sizes and its tokenizer;
            only with `model="transformer"`.
        **model_kwargs: extra constructor arguments of the model.

    Returns:
        The metrics dict.
    """
    if model not in MODELS:
        raise ValueError(f"`model` must be one of {MODELS}; received {model!r}.")
    if encoder is not None and model != "transformer":
        raise ValueError(f"`encoder` starts a Transformer; received model={model!r}.")
    strategy, out_dir = distribute.prepare(strategy, out_dir, batch_size, seed)
    epochs = epochs or SETTINGS["epochs"]

    phase(f"loading {data}")
    splits = load_classification_data(data, seed=seed)
    train = splits.train
    train_texts = train.texts[:num_train] if num_train else train.texts
    check_training_size(
        batch_size,
        len(train_texts),
        "texts",
        num_train=num_train,
        available=len(train.texts),
    )
    train_labels = train.labels[: len(train_texts)]
    encoder_path = None
    if isinstance(encoder, (str, os.PathLike)):
        encoder_path = os.fspath(encoder)
        phase(f"loading the pretrained encoder {encoder_path}")
        encoder = keras.saving.load_model(encoder_path)
    if encoder is not None:
        if encoder.tokenizer is None:
            raise ValueError(
                "The encoder has no tokenizer; pretrain it with `keras-attention "
                "pretrain`, or give it `tokenizer=`."
            )
        tokenizer = encoder.tokenizer
    else:
        tokenizer = cached_word_piece(
            os.path.join(out_dir, "vocabulary.txt"),
            train_texts,
            SETTINGS["vocabulary_size"],
            lowercase=SETTINGS["lowercase"],
        )
    num_classes = len(splits.class_names)
    phase(
        f"{len(train_texts)} training, {len(splits.valid)} validation and "
        f"{len(splits.test)} test texts; {num_classes} classes "
        f"{list(splits.class_names)}; vocabulary {tokenizer.vocabulary_size()}"
    )

    def build(jit_compile):
        if encoder is not None:
            net = TransformerClassifier.from_pretrained_encoder(
                encoder,
                num_classes,
                class_names=splits.class_names,
                tokenizer=tokenizer,
                **model_kwargs,
            )
        else:
            net = build_model(
                model,
                tokenizer.vocabulary_size(),
                num_classes,
                class_names=splits.class_names,
                tokenizer=tokenizer,
                **model_kwargs,
            )
        # The classifiers output probabilities.
        return compile_with_adam(
            net, jit_compile, from_logits=False, weighted_accuracy=False
        )

    def fit_arguments(net):
        phase(f"encoding texts for {model}")
        hierarchical = isinstance(net, HierarchicalAttentionNetwork)
        # Full batches only: each of the few batch shapes compiles once.
        train_data = classification_dataset(
            encode_for_model(net, train_texts),
            train_labels,
            batch_size,
            shuffle=True,
            seed=seed,
            bucket_boundaries=SETTINGS[
                "sentence_buckets" if hierarchical else "token_buckets"
            ],
            drop_remainder=True,
        )
        return {
            "train_data": train_data,
            "validation_data": classification_dataset(
                encode_for_model(net, splits.valid.texts),
                splits.valid.labels,
                batch_size,
            ),
            "patience": SETTINGS["patience"],
        }

    net, history = train_or_load(
        out_dir,
        model,
        strategy,
        build,
        fit_arguments,
        epochs,
        seed,
        jit_compile,
        time_budget_minutes,
        callbacks,
        verbose,
        model_key=f"classify/{model}",
    )

    phase(f"classifying {len(splits.test)} test texts")
    x_test = encode_for_model(net, splits.test.texts)
    probabilities = np.asarray(net.predict(x_test, batch_size=128, verbose=0))
    metrics = evaluate(
        splits.test.labels, probabilities, splits.class_names, out_dir, model
    )
    if net.has_attention:
        phase(
            f"deletion check: removing the {NUM_DELETED_WORDS} most-attended vs "
            f"{NUM_DELETED_WORDS} random words of each test text"
        )
        metrics["deletion"] = deletion_check(net, x_test, probabilities, seed=seed)
        if num_explanations:
            explain(net, splits.test.texts[:num_explanations], out_dir)
    metrics.update(
        {
            "model": model,
            "data": data,
            "classes": list(splits.class_names),
            "train_texts": len(train_texts),
            "test_texts": len(splits.test),
            "parameters": net.count_params(),
            "seed": seed,
            "epochs": history["epochs"],
            "train_seconds": history["train_seconds"],
            "best_epoch": history["best_epoch"],
            "best_valid_accuracy": history["val_accuracy"][history["best_epoch"] - 1],
        }
    )
    if encoder is not None:
        metrics["encoder"] = encoder_path or encoder.name
    deletion = metrics.get("deletion")
    return finish_run(
        out_dir,
        metrics,
        f"{model} on {data}: accuracy {metrics['accuracy']:.3f}, macro-F1 "
        f"{metrics['macro_f1']:.3f}"
        + (
            f"; probability change deleting top-{NUM_DELETED_WORDS} words "
            f"{deletion['top_attended']:.3f} vs random {deletion['random']:.3f}"
            if deletion
            else ""
        )
        + f"; trained {history['train_seconds']:.0f} s",
    )


def compare(out_dir, models, data="reviews", seeds=(0,), **kwargs):
    """Runs `run_classify` for every model and seed, in `out_dir/<model>`
    (one seed) or `out_dir/<model>/seed<k>`, and writes `comparison.json`
    (each figure's per-seed values, mean and standard deviation) and
    `comparison.png`."""
    # One strategy for all runs (a multi-worker one can be made only once);
    # each run writes in its own folder, the summary in this worker's.
    runs_dir = out_dir
    strategy, out_dir = distribute.prepare(kwargs.pop("strategy", "default"), out_dir)
    seeds = list(seeds)
    figures = ("accuracy", "macro_f1", "train_seconds", "epochs")
    per_seed = {}
    for name in models:
        per_seed[name] = {figure: [] for figure in figures}
        for seed in seeds:
            folder = os.path.join(runs_dir, name)
            if len(seeds) > 1:
                folder = os.path.join(folder, f"seed{seed}")
            result = run_classify(
                folder, data=data, model=name, seed=seed, strategy=strategy, **kwargs
            )
            for figure in figures:
                per_seed[name][figure].append(result[figure])
            for key in ("top_attended", "random"):
                if "deletion" in result:
                    per_seed[name].setdefault(f"deletion_{key}", []).append(
                        result["deletion"][key]
                    )
    summary = {
        "data": data,
        "seeds": seeds,
        "models": {
            name: {
                figure: {
                    "values": values,
                    "mean": float(np.mean(values)),
                    "std": float(np.std(values)),
                }
                for figure, values in results.items()
            }
            for name, results in per_seed.items()
        },
    }
    with open(os.path.join(out_dir, "comparison.json"), "w") as f:
        json.dump(summary, f, indent=2)
    plot_metric_spread(
        per_seed,
        path=os.path.join(out_dir, "comparison.png"),
        title=f"{data}: test accuracy and macro-F1 over {len(seeds)} seed(s)",
    )
    for name, figures_ in summary["models"].items():
        phase(
            f"{name}: accuracy {figures_['accuracy']['mean']:.3f} ± "
            f"{figures_['accuracy']['std']:.3f}, macro-F1 "
            f"{figures_['macro_f1']['mean']:.3f} ± {figures_['macro_f1']['std']:.3f}"
        )
    phase(f"comparison written to {out_dir}/comparison.json and comparison.png")
    return summary


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
        "macro_f1": float(
            sk.f1_score(labels, predictions, labels=classes, average="macro")
        ),
        "per_class": {
            name: {k: float(v) for k, v in report[name].items()} for name in class_names
        },
        "confusion_matrix": matrix.tolist(),
    }


def explain(model, texts, out_dir, prefix="explanation"):
    """Writes `<prefix>_<i>.html` and `.png` under `out_dir` for each text:
    its words highlighted by attention (and, for the HAN, its sentences), with
    the predicted label in the title. Returns the paths written."""
    token_ids = encode_for_model(model, texts)
    probabilities = np.asarray(model.predict(token_ids, verbose=0))
    names = model.class_names or [str(i) for i in range(model.num_classes)]
    hierarchical = isinstance(model, HierarchicalAttentionNetwork)
    if hierarchical:
        word_attention, sentence_attention = model.attention_weights(token_ids)
    else:
        importance = model.token_importance(token_ids)
    paths = []
    for i in range(len(texts)):
        label = int(np.argmax(probabilities[i]))
        title = (
            f"{type(model).__name__}: {names[label]} ({probabilities[i][label]:.2f})"
        )
        if hierarchical:
            sentences, weights = word_weights(
                model.tokenizer, token_ids[i], word_attention[i]
            )
            real = np.flatnonzero((token_ids[i] != 0).any(axis=-1))
            sentence_weights = [float(w) for w in sentence_attention[i][real]]
        else:
            words, flat = word_weights(model.tokenizer, token_ids[i], importance[i])
            sentences, weights, sentence_weights = [words], [flat], None
        path = os.path.join(out_dir, f"{prefix}_{i}")
        highlight_html(
            sentences, weights, sentence_weights, title=title, path=path + ".html"
        )
        plot_highlighted_text(
            sentences, weights, sentence_weights, title=title, path=path + ".png"
        )
        paths += [path + ".html", path + ".png"]
    return paths
