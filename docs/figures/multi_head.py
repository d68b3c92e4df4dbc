"""Per-head attention weights of a tiny two-head model trained in seconds.

Task: for every position t of a random token sequence (wrapping around at the
ends), predict both the previous token x[t-1] and the next token x[t+1] from
the output of one `MultiHeadAttention` layer with two heads. Nothing tells a
head which neighbour to fetch; training makes one head read the left
neighbour and the other the right one.
"""

import numpy as np

VOCABULARY, LENGTH, EXAMPLES = 10, 8, 2048


def train(epochs=6):
    import keras

    from keras_attention.layers import MultiHeadAttention, TokenAndPositionEmbedding

    keras.utils.set_random_seed(0)
    tokens = np.random.default_rng(0).integers(1, VOCABULARY, (EXAMPLES, LENGTH))
    previous, following = np.roll(tokens, 1, axis=1), np.roll(tokens, -1, axis=1)

    inputs = keras.Input((LENGTH,), dtype="int32")
    embedding = TokenAndPositionEmbedding(VOCABULARY, LENGTH, 32, name="embedding")
    attention = MultiHeadAttention(num_heads=2, key_dim=8, name="attention")
    x = embedding(inputs)
    y = attention(x, x)
    model = keras.Model(
        inputs,
        [
            keras.layers.Dense(VOCABULARY, name="previous")(y),
            keras.layers.Dense(VOCABULARY, name="next")(y),
        ],
    )
    model.compile(
        keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[["accuracy"], ["accuracy"]],
    )
    history = model.fit(
        tokens, [previous, following], batch_size=128, epochs=epochs, verbose=0
    )
    embedded = embedding(tokens[:256])
    _, weights = attention(embedded, embedded, return_attention_scores=True)
    weights = keras.ops.convert_to_numpy(weights).mean(axis=0)  # (heads, T, T)
    accuracy = (
        history.history["previous_accuracy"][-1],
        history.history["next_accuracy"][-1],
    )
    return weights, accuracy


def reads(head):
    """The offset (key position - query position, wrapped to -T/2..T/2) that
    gets the most weight, in most rows."""
    offsets = (head.argmax(axis=1) - np.arange(LENGTH) + LENGTH // 2) % LENGTH
    return int(np.bincount(offsets).argmax()) - LENGTH // 2


def build(out_dir):
    from keras_attention.viz import plot_attention, pyplot

    weights, accuracy = train()
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    positions = [str(i) for i in range(LENGTH)]
    panels = [
        (head, f"head {i + 1}: reads t{reads(head):+d}")
        for i, head in enumerate(weights)
    ]
    panels.append((weights.mean(axis=0), "mean of the two heads"))
    for ax, (matrix, title) in zip(axes, panels, strict=True):
        plot_attention(matrix, positions, positions, title=title, ax=ax)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    fig.suptitle(
        "Two heads trained to fetch x[t-1] and x[t+1] "
        f"(accuracy {accuracy[0]:.3f} / {accuracy[1]:.3f}); "
        "weights averaged over 256 sequences",
        fontsize=10,
    )
    fig.tight_layout()
    path = out_dir / "multi_head-heads.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
