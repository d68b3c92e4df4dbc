"""A one-minute demo: an attention RNN learns to reverse digit strings, and the
heatmap of its attention weights shows the anti-diagonal alignment."""

import os

import keras
import numpy as np

from keras_attention.data.synthetic import (
    VOCABULARY_SIZE,
    digits_to_text,
    reversal_task,
)
from keras_attention.layers import AdditiveAttention
from keras_attention.tasks import run_folder
from keras_attention.tasks.common import phase, prepare_output, write_metrics
from keras_attention.tasks.resumable import fit_resumable
from keras_attention.tasks.runner import save_model
from keras_attention.viz import plot_attention


def build_reversal_model(units=64, embedding_dim=32):
    """A bidirectional-GRU encoder and a GRU decoder joined only by Bahdanau
    attention (the decoder gets no encoder state), trained with teacher forcing.

    Returns the training model (logits) and a model that also returns the
    attention weights `(B, T_target, T_source)`.
    """
    source = keras.Input((None,), dtype="int32", name="encoder_tokens")
    target_in = keras.Input((None,), dtype="int32", name="decoder_inputs")
    x = keras.layers.Embedding(VOCABULARY_SIZE, embedding_dim, mask_zero=True)(source)
    annotations = keras.layers.Bidirectional(
        keras.layers.GRU(units, return_sequences=True)
    )(x)
    y = keras.layers.Embedding(VOCABULARY_SIZE, embedding_dim, mask_zero=True)(
        target_in
    )
    states = keras.layers.GRU(units, return_sequences=True)(y)
    context, weights = AdditiveAttention(units=units, name="attention")(
        [states, annotations], return_attention_scores=True
    )
    hidden = keras.layers.Dense(units, activation="tanh")(
        keras.layers.Concatenate()([states, context])
    )
    logits = keras.layers.Dense(VOCABULARY_SIZE, name="logits")(hidden)
    model = keras.Model([source, target_in], logits, name="attention_reverser")
    inspector = keras.Model([source, target_in], [logits, weights])
    return model, inspector


def masked_accuracy(logits, targets):
    """Token accuracy over non-padding positions and whole-sequence exact match."""
    predictions = np.argmax(logits, axis=-1)
    real = targets != 0
    correct = (predictions == targets) | ~real
    token_accuracy = float((predictions == targets)[real].mean())
    exact_match = float(correct.all(axis=1).mean())
    return token_accuracy, exact_match


def mirrored_alignment_rate(weights, targets):
    """Share of output steps whose strongest attention is on the mirrored
    input position (the correct alignment for reversal)."""
    lengths = (targets != 0).sum(axis=1)
    hits = total = 0
    for example, length in enumerate(lengths):
        attended = np.argmax(weights[example, :length], axis=-1)
        hits += int((attended == length - 1 - np.arange(length)).sum())
        total += int(length)
    return hits / total


def run_demo(out_dir, epochs=6, num_train=8000, num_test=500, seed=0, verbose="auto"):
    """Trains the reversal model and writes metrics.json, model.keras and
    attention.png under `out_dir`. Re-running with the same folder resumes an
    interrupted training where it stopped (`tasks.resumable`); the run holds
    the folder (`tasks.run_folder`). `verbose` is `fit_resumable`'s: by
    default Keras' bar at a terminal, else one line per epoch."""
    prepare_output(out_dir)
    with run_folder.hold(out_dir):
        return _run_demo(out_dir, epochs, num_train, num_test, seed, verbose)


def _run_demo(out_dir, epochs, num_train, num_test, seed, verbose):
    keras.utils.set_random_seed(seed)
    phase("generating the digit-reversal task")
    train = reversal_task(num_train, seed=seed)
    test = reversal_task(num_test, seed=seed + 1)

    phase("building the attention model")
    model, inspector = build_reversal_model()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        ),
    )
    phase(f"training for {epochs} epochs")
    history = fit_resumable(
        model,
        [train["encoder_tokens"], train["decoder_inputs"]],
        out_dir,
        epochs,
        None,
        y=train["decoder_targets"],
        batch_size=64,
        verbose=verbose,
    )

    phase("evaluating on held-out sequences")
    logits, weights = inspector.predict(
        [test["encoder_tokens"], test["decoder_inputs"]], verbose=0
    )
    token_accuracy, exact_match = masked_accuracy(logits, test["decoder_targets"])
    alignment = mirrored_alignment_rate(weights, test["decoder_targets"])

    source = digits_to_text(test["encoder_tokens"][0])
    target = digits_to_text(test["decoder_targets"][0])
    heatmap = os.path.join(out_dir, "attention.png")
    plot_attention(
        weights[0, : len(target), : len(source)],
        source_tokens=source,
        target_tokens=target,
        path=heatmap,
        title="Bahdanau attention, digit reversal",
    )
    model_path = os.path.join(out_dir, "model.keras")
    save_model(model, model_path)
    metrics = {
        "model": "bigru-gru-bahdanau",
        "data": "generated digit reversal (lengths 4-12)",
        "token_accuracy": token_accuracy,
        "exact_match": exact_match,
        "alignment_accuracy": alignment,
        "epochs": epochs,
        "train_seconds": history["train_seconds"],
    }
    write_metrics(out_dir, metrics)
    phase(
        f"token accuracy {token_accuracy:.3f}, exact match {exact_match:.3f}, "
        f"attention on the mirrored position {alignment:.3f}; "
        f"wrote {heatmap}, {model_path}"
    )
    return metrics
