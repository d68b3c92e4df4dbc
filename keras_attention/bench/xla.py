"""The `xla` suite: every reference model trained with `jit_compile` on and off.

One `model.train_on_batch` step (what `fit` pays per batch) of each model as
its `keras-attention` subcommand builds it, on random data of its task's
shapes, compiled with XLA (`jit_compile=True`) and without (a `tf.function`
graph on TensorFlow, op-by-op execution on JAX). Every model is also measured
with dropout 0, since XLA's handling of dropout's random numbers on CPU is one
known reason for a model to be slower under XLA. Plus generation (greedy
search of the translation models) and the attention layers of the `layers`
suite, forward+backward.

Usage: `python -m keras_attention.bench --suite xla [--quick] [--out DIR]`.
"""

import numpy as np

from keras_attention.bench.common import (
    case_runner,
    describe,
    start_suite,
    write_report,
)
from keras_attention.utils.progress import phase

TRAIN_MODELS = (
    "translate/transformer",
    "translate/rnn-bahdanau",
    "translate/rnn",
    "classify/transformer",
    "classify/han",
    "classify/bilstm",
    "caption/attention",
    "gan/sagan",
)
GENERATE_MODELS = ("translate/transformer", "translate/rnn-bahdanau")
FULL = {
    "scale": "task",
    "repeats": 3,
    "train_models": TRAIN_MODELS,
    "dropout_variants": True,
    "generate_models": GENERATE_MODELS,
    "layers": None,  # all of the layers suite's pairs
}
# XLA compiles dominate a quick run: one model of each kind of case.
QUICK = {
    "scale": "tiny",
    "repeats": 2,
    "train_models": ("translate/transformer",),
    "dropout_variants": False,
    "generate_models": ("translate/transformer",),
    "layers": ("multi_head",),
}
# The data shapes of each task at the CLI's defaults, and tiny ones for --quick.
SHAPES = {
    "task": {
        "batch_size": 64,
        "vocabulary_size": 8000,
        "text_length": 40,
        "document_length": 128,
        "sentences": 8,
        "words": 40,
        "image_shape": (64, 64, 1),
        "caption_length": 23,
        "caption_vocabulary_size": 500,
        "gan_image_shape": (32, 32, 1),
    },
    "tiny": {
        "batch_size": 4,
        "vocabulary_size": 60,
        "text_length": 8,
        "document_length": 16,
        "sentences": 2,
        "words": 4,
        "image_shape": (16, 16, 1),
        "caption_length": 5,
        "caption_vocabulary_size": 60,
        "gan_image_shape": (16, 16, 1),
    },
}
TINY_SIZES = {
    "translate/transformer": {"hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32},
    "translate/rnn-bahdanau": {"units": 16, "embedding_dim": 16},
    "translate/rnn": {"units": 16, "embedding_dim": 16},
    "classify/transformer": {"hidden_dim": 16, "intermediate_dim": 32},
    "classify/han": {"embedding_dim": 16, "word_units": 8, "sentence_units": 8},
    "classify/bilstm": {"embedding_dim": 16, "units": 8},
    "caption/attention": {
        "encoder_filters": (8, 16),
        "embedding_dim": 16,
        "units": 16,
        "attention_units": 16,
    },
    "gan/sagan": {
        "generator_width": 8,
        "discriminator_width": 8,
        "attention_resolution": 8,
    },
}


def build(name, scale, dropout=None):
    """`(model, inputs, labels, loss)` of the reference model `name`, with the
    sizes its `keras-attention` subcommand gives it (tiny ones at scale
    "tiny"), on random data of its task's shapes; `dropout` overrides the
    model's default rate. Built from `keras_attention.models` alone, so the
    suite runs where TensorFlow is not installed."""
    import keras

    from keras_attention import models

    shapes = SHAPES[scale]
    sizes = TINY_SIZES[name] if scale == "tiny" else {}
    if dropout is not None:
        sizes = {**sizes, "dropout": dropout}
    batch, vocabulary = shapes["batch_size"], shapes["vocabulary_size"]
    rng = np.random.default_rng(0)

    def ids(*shape):
        return rng.integers(4, vocabulary, (batch, *shape), dtype="int32")

    task, model_name = name.split("/")
    from_logits = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if task == "translate":
        length = shapes["text_length"]
        lengths = {"max_source_length": length, "max_target_length": length}
        if model_name == "transformer":
            model = models.Transformer(vocabulary, vocabulary, **lengths, **sizes)
        else:
            attention = "none" if model_name == "rnn" else model_name[len("rnn-") :]
            model = models.RNNSeq2Seq(
                vocabulary, vocabulary, attention=attention, **lengths, **sizes
            )
        inputs = {"encoder_token_ids": ids(length), "decoder_token_ids": ids(length)}
        return model, inputs, ids(length), from_logits
    if task == "classify":
        length, sentences, words = (
            shapes["document_length"],
            shapes["sentences"],
            shapes["words"],
        )
        if model_name == "transformer":
            model = models.TransformerClassifier(
                vocabulary, 4, max_length=length, **sizes
            )
        elif model_name == "han":
            model = models.HierarchicalAttentionNetwork(
                vocabulary, 4, max_sentences=sentences, max_words=words, **sizes
            )
        else:
            model = models.BiLSTMClassifier(vocabulary, 4, **sizes)
        inputs = ids(sentences, words) if model_name == "han" else ids(length)
        labels = rng.integers(0, 4, (batch,), dtype="int32")
        return model, inputs, labels, keras.losses.SparseCategoricalCrossentropy()
    if task == "caption":
        length = shapes["caption_length"]
        vocabulary = shapes["caption_vocabulary_size"]  # read by ids()
        model = models.ShowAttendTell(
            vocabulary,
            image_shape=shapes["image_shape"],
            max_caption_length=length,
            **{"encoder_filters": (16, 32, 64), **sizes},
        )
        images = rng.uniform(size=(batch, *shapes["image_shape"])).astype("float32")
        inputs = {"images": images, "decoder_token_ids": ids(length)}
        return model, inputs, ids(length), from_logits
    sizes.pop("dropout", None)  # SAGAN has no dropout
    model = models.SAGAN(image_shape=shapes["gan_image_shape"], **sizes, seed=0)
    images = rng.uniform(-1, 1, (batch, *shapes["gan_image_shape"]))
    return model, images.astype("float32"), None, None


def _case_train(case):
    import keras

    from keras_attention.bench.common import time_call

    if case["model"] == "gan/sagan" and keras.backend.backend() != "tensorflow":
        return {"skipped": "SAGAN trains on the TensorFlow backend only"}
    model, inputs, labels, loss = build(case["model"], case["scale"], case["dropout"])
    if loss is None:
        model.compile(jit_compile=case["jit_compile"])
    else:
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=loss,
            jit_compile=case["jit_compile"],
        )
    timing = time_call(model.train_on_batch, inputs, labels, repeats=case["repeats"])
    return {**timing, "batch_size": SHAPES[case["scale"]]["batch_size"]}


def _case_generate(case):
    from keras_attention.bench.common import time_call

    model, inputs, _, _ = build(case["model"], case["scale"])
    source = inputs["encoder_token_ids"]

    def generate(source):
        return model.generate(source, jit_compile=case["jit_compile"])

    return time_call(generate, source, repeats=case["repeats"])


def _case_layer(case):
    from keras_attention.bench.common import layer_value_and_grad, time_call
    from keras_attention.bench.layers import build_pair

    (layer, forward, x), _ = build_pair(case["layer"], case["scale"] == "tiny")
    step = layer_value_and_grad(layer, forward)
    if case["jit_compile"]:
        from keras_attention.bench.common import jit

        step = jit(step)
    else:
        step = _graph(step)
    return time_call(
        step, [v.value for v in layer.trainable_variables], x, repeats=case["repeats"]
    )


def _graph(fn):
    """`fn` without XLA: a TensorFlow graph, or op-by-op on other backends."""
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=False, autograph=False)
    return fn


CASES = {"train": _case_train, "generate": _case_generate, "layer": _case_layer}


def run(quick=False, out="runs/bench", timeout=1800):
    """Runs the suite, prints its table, writes `xla.json`, `xla.md` and
    `xla.png` under `out`; returns the results."""
    from keras_attention.bench.layers import PAIRS

    config, results = start_suite("xla", quick, FULL, QUICK)
    variants = [("default", None)]
    if config["dropout_variants"]:
        variants.append(("no_dropout", 0.0))
    plan = [
        (f"train/{name}/{variant}", {"kind": "train", "model": name, "dropout": rate})
        for name in config["train_models"]
        for variant, rate in variants
        if not (name == "gan/sagan" and variant == "no_dropout")
    ]
    plan += [
        (f"generate/{name}", {"kind": "generate", "model": name})
        for name in config["generate_models"]
    ]
    plan += [
        (f"layer/{name}", {"kind": "layer", "layer": name})
        for name in config["layers"] or PAIRS
    ]
    measure = case_runner("xla", CASES, results, out, timeout, isolated=not quick)
    for label, case in plan:
        for jit_compile in (True, False):
            key = f"{label}/{'xla' if jit_compile else 'no_xla'}"
            phase(f"{label} jit_compile={jit_compile}")
            case = {
                **case,
                "scale": config["scale"],
                "repeats": config["repeats"],
                "jit_compile": jit_compile,
            }
            measure(key, case)
    summarize(results)
    write_report(results, out, "xla", markdown(results), plot)
    return results


def summarize(results):
    """Adds `speedups` (time without XLA / time with it) to `results`."""
    speedups = {}
    for key, case in results["cases"].items():
        if key.endswith("/xla") and "median_s" in case:
            other = results["cases"].get(key[: -len("xla")] + "no_xla", {})
            if "median_s" in other:
                speedups[key[: -len("/xla")]] = other["median_s"] / case["median_s"]
    results["speedups"] = speedups


def markdown(results):
    m, cases = results["machine"], results["cases"]
    lines = [
        f"Machine: {describe(m)}; median of {results['config']['repeats']} after "
        "warm-up.",
        "",
        "| case | XLA ms | no XLA ms | XLA speed-up |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, speedup in results["speedups"].items():
        on, off = cases[f"{key}/xla"], cases[f"{key}/no_xla"]
        lines.append(
            f"| {key} | {1e3 * on['median_s']:.1f} | {1e3 * off['median_s']:.1f} "
            f"| {speedup:.2f}x |"
        )
    for key, case in cases.items():
        if "skipped" in case:
            lines.append(f"| {key} | skipped: {case['skipped']} | | |")
    return "\n".join(lines) + "\n"


def plot(results, path):
    from keras_attention.viz import pyplot, save_figure

    plt = pyplot()
    labels = list(results["speedups"])
    values = [results["speedups"][k] for k in labels]
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(labels) + 1.5))
    colors = ["C2" if v >= 1 else "C3" for v in values]
    ax.barh(range(len(labels)), values, color=colors)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("XLA speed-up (time without XLA / with XLA; > 1: XLA faster)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    m = results["machine"]
    ax.set_title(describe(m), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
