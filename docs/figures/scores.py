"""The weights that each score layer gives to the same queries and keys.

Six keys of size 8; four queries, each a noisy copy of one key (keys 1, 4, 2
and 5). The parameter-free scores (dot, scaled dot, cosine) find the matching
key; the layers with weights (additive, multiplicative, location) are freshly
initialized, so their weights show what an untrained score does, not what a
trained one learns.
"""

import matplotlib

matplotlib.use("Agg")

import keras  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from keras_attention import layers  # noqa: E402

MATCHES = (1, 4, 2, 5)


def inputs():
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(1, 6, 8)).astype("float32")
    noise = 0.5 * rng.normal(size=(1, len(MATCHES), 8))
    queries = (keys[:, list(MATCHES)] + noise).astype("float32")
    return queries, keys


def score_layers():
    keras.utils.set_random_seed(0)
    return {
        "AdditiveAttention(units=8)": layers.AdditiveAttention(units=8),
        "MultiplicativeAttention()": layers.MultiplicativeAttention(),
        "DotProductAttention()": layers.DotProductAttention(),
        "DotProductAttention(scale=True)": layers.DotProductAttention(scale=True),
        "CosineAttention()": layers.CosineAttention(),
        "LocationAttention(max_length=6)": layers.LocationAttention(max_length=6),
    }


def build(out_dir):
    queries, keys = inputs()
    fig, axes = plt.subplots(2, 3, figsize=(9.5, 4.6), layout="constrained")
    for ax, (name, layer) in zip(axes.flat, score_layers().items(), strict=True):
        _, weights = layer([queries, keys], return_attention_scores=True)
        weights = keras.ops.convert_to_numpy(weights)[0]
        image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
        for t, s in enumerate(MATCHES):
            ax.add_patch(
                plt.Rectangle((s - 0.5, t - 0.5), 1, 1, fill=False, ec="w", lw=1.5)
            )
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(keys.shape[1]))
        ax.set_yticks(range(len(MATCHES)))
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(
        "Same queries and keys, six score layers (white box: the key each query "
        "was copied from)",
        fontsize=10,
    )
    path = out_dir / "scores-weights-by-layer.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
