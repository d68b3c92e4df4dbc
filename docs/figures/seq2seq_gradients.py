"""The seq2seq bottleneck as a gradient path, measured on untrained RNNSeq2Seq models.

For a source of 40 distinct tokens, the figure plots how strongly the
log-probability of one target token at the last decoder step depends on each
source position: the norm of its gradient with respect to that position's
embedding. Without attention the only path from a source word to the decoder
runs through the encoder's final states; with Bahdanau attention every position
has a direct path through the context vector.
"""

import matplotlib

matplotlib.use("Agg")

import keras  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention.models import RNNSeq2Seq  # noqa: E402

SOURCE_LENGTH = 40
TARGET_LENGTH = 8
SEEDS = (0, 1)
FIRST_ID = 4  # ids 0-3 are padding and special tokens


def gradient_by_position(attention, seed):
    """|d log p(y_T) / d embedding(x_i)| for each source position i."""
    keras.utils.set_random_seed(seed)
    model = RNNSeq2Seq(
        source_vocabulary_size=SOURCE_LENGTH + FIRST_ID,
        target_vocabulary_size=20,
        embedding_dim=16,
        units=32,
        attention=attention,
        dropout=0.0,
        max_source_length=SOURCE_LENGTH,
    )
    # Each position holds a different token, so the gradient of the embedding
    # table's row `FIRST_ID + i` is the gradient at position i.
    source = np.arange(FIRST_ID, FIRST_ID + SOURCE_LENGTH)[None].astype("int32")
    target = np.array([[2] + [5] * (TARGET_LENGTH - 1)], "int32")
    table = model.get_layer("source_embedding").embeddings
    with tf.GradientTape() as tape:
        logits = model({"encoder_token_ids": source, "decoder_token_ids": target})
        log_prob = tf.nn.log_softmax(logits[0, -1])[7]
    grad = tf.convert_to_tensor(tape.gradient(log_prob, table)).numpy()
    return np.linalg.norm(grad[FIRST_ID:], axis=1)


def build(out_dir):
    positions = np.arange(1, SOURCE_LENGTH + 1)
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for attention, label, color in (
        ("none", "RNNSeq2Seq(attention='none')", "tab:red"),
        ("bahdanau", "RNNSeq2Seq(attention='bahdanau')", "tab:blue"),
    ):
        norms = np.mean([gradient_by_position(attention, s) for s in SEEDS], axis=0)
        ax.semilogy(positions, norms, "o-", ms=3, color=color, label=label)
    ax.set_xlabel("source position (40 tokens)")
    ax.set_ylabel("gradient norm (log scale)")
    ax.set_title(
        "How much the last output word depends on each source word\n"
        "untrained models, units=32, mean of 2 seeds",
        fontsize=10,
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=9, loc="center right")
    fig.tight_layout()
    path = out_dir / "seq2seq_gradients-by-position.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
