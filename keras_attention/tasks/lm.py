"""`keras-attention lm`: train a character-level language model (GPT or its
LSTM baseline), measure its held-out perplexity, and continue text with it."""

import json
import math
import os

import numpy as np

from keras_attention.data.language_modeling import (
    character_tokenizer,
    decode_tokens,
    load_language_model_texts,
)
from keras_attention.data.pipeline import (
    encode_texts,
    language_model_dataset,
    token_stream,
)
from keras_attention.data.tokenization import END_ID, PAD_ID
from keras_attention.models import GPT, LSTMLanguageModel
from keras_attention.tasks import distribute
from keras_attention.tasks.common import (
    ArgumentError,
    check_training_size,
    phase,
    write_json,
)
from keras_attention.tasks.runner import (
    HISTORY_FILE,
    compile_with_adam,
    finish_run,
    train_or_load,
)
from keras_attention.viz import plot_curves

MODELS = ("gpt", "lstm")
SAMPLERS = ("greedy", "top_k", "top_p")
# Characters per window (GPT's positions), batches per epoch, and GPT's sizes:
# 0.84 M parameters, which the LSTM matches with 2 layers of 225 units.
SETTINGS = {
    "sequence_length": 256,
    "steps_per_epoch": 100,
    "epochs": 10,
    "gpt": {
        "hidden_dim": 128,
        "num_heads": 4,
        "num_layers": 4,
        "intermediate_dim": 512,
        "dropout": 0.0,
    },
    "lstm_layers": 2,
}
# The prompts of the samples a run writes (each after the end-of-text token,
# so that the model starts a new fortune).
SAMPLE_PROMPTS = ("", "The ", "Q:", "A man ")
SAMPLE_LENGTH = 200


def build_model(name, vocabulary_size, sequence_length, tokenizer=None, **kwargs):
    """GPT (`name="gpt"`) at the task's sizes, or the LSTM (`"lstm"`) with as
    many parameters; `kwargs` override GPT's sizes (and so the LSTM's)."""
    gpt_sizes = {**SETTINGS["gpt"], **kwargs}
    common = {
        "max_length": sequence_length,
        "end_token_id": END_ID,
        "tokenizer": tokenizer,
    }
    gpt = GPT(vocabulary_size, **gpt_sizes, **common)
    if name == "gpt":
        return gpt
    num_layers = SETTINGS["lstm_layers"]
    units = matched_lstm_units(gpt.count_params(), vocabulary_size, num_layers)
    return LSTMLanguageModel(
        vocabulary_size,
        hidden_dim=units,
        num_layers=num_layers,
        dropout=gpt_sizes["dropout"],
        **common,
    )


def matched_lstm_units(parameters, vocabulary_size, num_layers):
    """The LSTM width whose `LSTMLanguageModel` has the number of parameters
    closest to `parameters`: with tied embeddings it has
    `V u + num_layers (8 u^2 + 4 u)` of them."""

    def count(units):
        return vocabulary_size * units + num_layers * (8 * units**2 + 4 * units)

    a, b = 8 * num_layers, vocabulary_size + 4 * num_layers
    estimate = (-b + math.sqrt(b * b + 4 * a * parameters)) / (2 * a)
    candidates = {max(1, math.floor(estimate)), max(1, math.ceil(estimate))}
    return min(candidates, key=lambda units: abs(count(units) - parameters))


def perplexity(model, token_ids, sequence_length, batch_size=32):
    """The model's perplexity per token on a token stream:
    `exp(mean cross-entropy)` over every token after the first, each
    predicted from at most `sequence_length - 1` before it in its window
    (keras-hub's `Perplexity`)."""
    import keras_hub

    dataset, _ = language_model_dataset(token_ids, sequence_length, batch_size)
    metric = keras_hub.metrics.Perplexity(from_logits=True, mask_token_id=PAD_ID)
    # NumPy batches: `predict_on_batch` of any backend takes them.
    for inputs, targets, _ in dataset.as_numpy_iterator():
        metric.update_state(targets, model.predict_on_batch(inputs))
    return float(metric.result())


def make_sampler(name="greedy", temperature=1.0, top_k=10, top_p=0.9, seed=None):
    """The keras-hub sampler called `name` (one of `SAMPLERS`)."""
    import keras_hub

    if name not in SAMPLERS:
        raise ValueError(f"`sampler` must be one of {SAMPLERS}; received {name!r}.")
    if name == "greedy":
        return keras_hub.samplers.GreedySampler(temperature=temperature)
    if name == "top_k":
        return keras_hub.samplers.TopKSampler(
            k=top_k, temperature=temperature, seed=seed
        )
    return keras_hub.samplers.TopPSampler(p=top_p, temperature=temperature, seed=seed)


def continue_texts(model, prompts, max_length=None, sampler="greedy"):
    """Continues each prompt with a model that carries its tokenizer, as a
    new document (after the end-of-text token), until the model ends it or
    `max_length` characters (prompt included; default the model's
    `max_length`). Returns the texts, prompts included."""
    if model.tokenizer is None:
        raise ValueError(
            "This model has no tokenizer; train it with `keras-attention lm`, or "
            "pass `tokenizer=` when building it."
        )
    max_length = max_length or model.max_length
    if max_length > model.max_length:
        raise ArgumentError(
            f"a length of {max_length:,} characters is more than the model "
            f"generates, {model.max_length:,}"
        )
    prompt_ids = encode_texts(list(prompts), model.tokenizer, max_length)
    lengths = np.sum(prompt_ids != PAD_ID, axis=1)
    if np.any(lengths >= max_length):
        raise ArgumentError(
            f"a prompt of {int(lengths.max())} characters leaves no room in the "
            f"{max_length} characters the model generates"
        )
    width = int(lengths.max()) + 1
    prompt_ids = np.concatenate(
        [np.full((len(prompt_ids), 1), END_ID, "int32"), prompt_ids[:, : width - 1]],
        axis=1,
    )
    tokens = np.asarray(model.generate(prompt_ids, max_length, sampler=sampler))
    return [decode_tokens(model.tokenizer, row) for row in tokens]


def run_lm(
    out_dir,
    data="fortunes",
    model="gpt",
    epochs=None,
    batch_size=32,
    time_budget_minutes=None,
    seed=0,
    num_train=None,
    jit_compile=None,
    verbose=1,
    callbacks=None,
    strategy="default",
    steps_per_epoch=None,
    sampler="top_p",
    temperature=0.8,
    top_k=10,
    top_p=0.9,
    **model_kwargs,
):
    """Trains a character-level language model on `data`, measures its
    perplexity on the held-out test documents and writes `metrics.json`,
    `loss.png`, `samples.txt` and `model.keras` under `out_dir`. Re-run with
    the same folder, an interrupted training resumes from its last finished
    epoch, and a finished one is evaluated again without training.

    Args:
        out_dir: output folder.
        data: `"fortunes"` (Debian `fortunes`) or the path of a text file
            (see `keras_attention.data.language_modeling.read_documents`).
        model: `"gpt"` or `"lstm"` (its parameter count matched to GPT's).
        epochs: training epochs of `steps_per_epoch` batches each.
        batch_size: windows of `sequence_length` characters per batch.
        time_budget_minutes: stop training before an epoch that would end
            after this many minutes, for comparisons at equal training time.
        seed: seed of the split, the initialisation, the shuffling and the
            samples.
        num_train: use only this many training documents (quick runs, tests).
        jit_compile: train with XLA; None (default) compiles unless measured
            slower on this kind of device (`tasks.distribute.jit_for`).
        verbose: Keras progress bar setting.
        callbacks: extra Keras callbacks for `fit`.
        strategy: `tf.distribute` strategy to train with, by name or object;
            `batch_size` is the global batch.
        steps_per_epoch: batches per epoch (default 100).
        sampler: the sampler of `samples.txt` besides greedy search: one of
            `SAMPLERS`, with `temperature`, `top_k` and `top_p` (see
            `make_sampler`).
        temperature: the sampler's temperature.
        top_k: k of the top-k sampler.
        top_p: p of the top-p sampler.
        **model_kwargs: GPT's sizes (`hidden_dim`, `num_layers`, ...;
            `sequence_length` sets the window), which the LSTM matches.

    Returns:
        The metrics dict.
    """
    if model not in MODELS:
        raise ValueError(f"`model` must be one of {MODELS}; received {model!r}.")
    samplers = {"greedy": make_sampler("greedy")}
    samplers[sampler] = make_sampler(sampler, temperature, top_k, top_p, seed)
    strategy, out_dir = distribute.prepare(strategy, out_dir, batch_size, seed)
    sequence_length = model_kwargs.pop("sequence_length", SETTINGS["sequence_length"])
    epochs = epochs or SETTINGS["epochs"]
    steps_per_epoch = steps_per_epoch or SETTINGS["steps_per_epoch"]

    phase(f"loading {data}")
    splits = load_language_model_texts(data, seed=seed)
    available = len(splits["train"])
    check_training_size(1, available, "documents", num_train, available)
    train_texts = splits["train"][:num_train] if num_train else splits["train"]
    tokenizer = character_tokenizer()
    streams = {
        "train": token_stream(train_texts, tokenizer),
        **{name: token_stream(splits[name], tokenizer) for name in ("valid", "test")},
    }
    train_data, num_windows = language_model_dataset(
        streams["train"],
        sequence_length,
        batch_size,
        shuffle=True,
        seed=seed,
        repeat=True,
    )
    check_training_size(
        batch_size, num_windows, f"windows of {sequence_length} characters"
    )
    valid_data, _ = language_model_dataset(
        streams["valid"], sequence_length, batch_size
    )
    phase(
        f"{len(train_texts):,} training documents ({len(streams['train']):,} "
        f"characters), {len(splits['valid']):,} validation and "
        f"{len(splits['test']):,} test documents ({len(streams['test']):,} "
        f"characters); {tokenizer.vocabulary_size()} character ids"
    )

    def build(jit_compile):
        net = build_model(
            model,
            tokenizer.vocabulary_size(),
            sequence_length,
            tokenizer=tokenizer,
            **model_kwargs,
        )
        return compile_with_adam(net, jit_compile)

    def fit_arguments(net):
        return {
            "train_data": train_data,
            "validation_data": valid_data,
            "steps_per_epoch": steps_per_epoch,
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
        announce=lambda net: (
            f"training {net.count_params():,} parameters for up to {epochs} epochs "
            f"of {steps_per_epoch} batches of {batch_size} x {sequence_length} "
            "characters"
        ),
        model_key=f"lm/{model}",
    )

    phase(f"measuring perplexity on {len(streams['test']):,} test characters")
    test_perplexity = perplexity(net, streams["test"], sequence_length, batch_size)
    plot_curves(
        {"training": history["loss"], "validation": history["val_loss"]},
        path=os.path.join(out_dir, "loss.png"),
        xlabel=f"epoch ({steps_per_epoch} batches)",
        ylabel="cross-entropy (nats per character)",
        title=f"{model} on {data}",
    )
    phase(f"writing samples to {os.path.join(out_dir, 'samples.txt')}")
    samples = write_samples(net, os.path.join(out_dir, "samples.txt"), samplers)
    metrics = {
        "model": model,
        "data": data,
        "perplexity": test_perplexity,
        "bits_per_character": math.log2(test_perplexity),
        "parameters": net.count_params(),
        "epochs": history["epochs"],
        "train_seconds": history["train_seconds"],
        "train_characters": history["epochs"]
        * steps_per_epoch
        * batch_size
        * sequence_length,
        "train_documents": len(train_texts),
        "test_documents": len(splits["test"]),
        "test_characters": len(streams["test"]),
        "sequence_length": sequence_length,
        "final_train_loss": history["loss"][-1],
        "final_valid_loss": history["val_loss"][-1],
        "samples": samples,
    }
    return finish_run(
        out_dir,
        metrics,
        f"{model} on {data}: held-out perplexity {test_perplexity:.3f} "
        f"({metrics['bits_per_character']:.3f} bits per character), "
        f"{metrics['parameters']:,} parameters; trained "
        f"{history['train_seconds']:.0f} s",
    )


def write_samples(model, path, samplers):
    """Writes the continuations of `SAMPLE_PROMPTS` by each of `samplers`
    (`{name: sampler}`) to `path`; returns them as a list of dicts."""
    length = min(SAMPLE_LENGTH, model.max_length)
    samples = []
    for name, sampler in samplers.items():
        texts = continue_texts(model, SAMPLE_PROMPTS, length, sampler)
        samples += [
            {"sampler": name, "prompt": prompt, "text": text}
            for prompt, text in zip(SAMPLE_PROMPTS, texts, strict=True)
        ]
    with open(path, "w", encoding="utf-8") as f:
        for sample in samples:
            f.write(f"== {sample['sampler']}, prompt {sample['prompt']!r}\n")
            f.write(f"{sample['text']}\n\n")
    return samples


def compare(out_dir, models, data="fortunes", **kwargs):
    """Runs `run_lm` for each model in `out_dir/<model>`, draws their
    validation losses on one chart (`loss.png`) and writes
    `comparison.json`."""
    runs_dir = out_dir
    strategy, out_dir = distribute.prepare(kwargs.pop("strategy", "default"), out_dir)
    results = {
        name: run_lm(
            os.path.join(runs_dir, name),
            data=data,
            model=name,
            strategy=strategy,
            **kwargs,
        )
        for name in models
    }
    curves = {}
    for name in models:
        with open(os.path.join(runs_dir, name, HISTORY_FILE)) as f:
            curves[name] = json.load(f)["val_loss"]
    plot_curves(
        curves,
        path=os.path.join(out_dir, "loss.png"),
        ylabel="validation cross-entropy (nats per character)",
        title=f"language models on {data}",
    )
    keys = ("perplexity", "parameters", "train_seconds", "epochs", "train_characters")
    summary = {name: {k: r[k] for k in keys} for name, r in results.items()}
    write_json(os.path.join(out_dir, "comparison.json"), summary, indent=2)
    phase(f"comparison written to {out_dir}/comparison.json and loss.png")
    return results
