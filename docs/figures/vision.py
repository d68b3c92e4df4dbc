"""Figures of the vision concept page (Show, Attend and Tell).

A scene from the captioning data (`keras_attention.data.compose_scenes` on
Fashion-MNIST test images) is cut into an 8x8 grid of locations, as the
captioner's encoder does. Each location gets a hand-made annotation vector
(its ink and its position), and our `AdditiveAttention`, with weights set by
hand, scores the 64 locations against a query that names one item's position.
Nothing here is trained: the figures show how a grid of weights becomes a
picture, not what a trained captioner learns.
"""

import numpy as np

GRID = 8  # the 64x64 scene is cut into 8x8 cells of 8x8 pixels
SHARPNESS = 10.0  # slope of the position window's edges
HALF_WIDTH = 2.0 / (GRID - 1)  # the window reaches two cells either side
INK_WEIGHT = 3.0  # how much a cell's ink adds to its score


def scene(seed=3):
    """The first three-item scene of `compose_scenes` (image, words, boxes)."""
    from keras_attention.data import compose_scenes, load_fashion_mnist

    images, labels = load_fashion_mnist("test")
    scenes = compose_scenes(images[:2000], labels[:2000], 8, seed=seed)
    k = next(i for i in range(len(scenes)) if (scenes.classes[i] >= 0).sum() == 3)
    first_caption = scenes.captions[k][0]
    return scenes.images[k], first_caption, scenes.boxes[k]


def annotations(image):
    """`(1, 64, 3)` annotation vectors: each cell's mean ink (scaled to a
    maximum of 1) and its row and column in [0, 1]."""
    cells = image[..., 0].reshape(GRID, 8, GRID, 8).mean(axis=(1, 3))
    ink = cells / max(cells.max(), 1e-6)
    rows, cols = np.meshgrid(np.arange(GRID), np.arange(GRID), indexing="ij")
    features = np.stack([ink, rows / (GRID - 1), cols / (GRID - 1)], axis=-1)
    return features.reshape(1, GRID * GRID, 3).astype("float32")


def hand_set_attention():
    """An `AdditiveAttention(units=5, use_bias=True)` whose score is high at
    locations within about two cells of the query's `(row, col)` that hold
    ink: four hidden units make a soft window around the query, the fifth
    reads the ink."""
    import keras

    from keras_attention.layers import AdditiveAttention

    layer = AdditiveAttention(units=5, use_bias=True)
    layer(
        [keras.ops.zeros((1, 2)), keras.ops.zeros((1, GRID * GRID, 3))],
    )
    s = SHARPNESS
    # hidden = tanh(W_1 q + W_2 a + b); q = (row_q, col_q), a = (ink, row, col)
    query_kernel = np.array(
        [[-s, s, 0, 0, 0], [0, 0, -s, s, 0]], "float32"
    )  # -s row_q, +s row_q, ...
    key_kernel = np.array(
        [[0, 0, 0, 0, 2.0], [s, -s, 0, 0, 0], [0, 0, s, -s, 0]], "float32"
    )
    bias = np.array([-s * HALF_WIDTH] * 4 + [0.0], "float32")
    score_vector = np.array([-1, -1, -1, -1, INK_WEIGHT], "float32")
    layer.query_kernel.assign(query_kernel)
    layer.key_kernel.assign(key_kernel)
    layer.bias.assign(bias)
    layer.score_vector.assign(score_vector)
    return layer


def item_weights(image, boxes):
    """`(K, 64)`: the attention of a query at each item's centre."""
    layer = hand_set_attention()
    memory = annotations(image)
    rows = []
    for top, left, bottom, right in boxes:
        if top < 0:
            continue
        centre = np.array(
            [
                [
                    (top + bottom) / 2 / 64 * GRID - 0.5,
                    (left + right) / 2 / 64 * GRID - 0.5,
                ]
            ],
            "float32",
        ) / (GRID - 1)
        _, weights = layer([centre, memory], return_attention_scores=True)
        rows.append(np.asarray(weights)[0])
    return np.stack(rows)


def build(out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_attention.viz import (
        plot_caption_attention,
        smooth_attention,
        upsample_attention,
    )

    image, caption, boxes = scene()
    weights = item_weights(image, boxes)
    # The item names in the order of the boxes: the caption's first phrasing
    # names the items in that order.
    words = _item_words(caption, len(weights))

    paths = [out_dir / "vision-overlay.png", out_dir / "vision-upsampling.png"]
    plot_caption_attention(
        image,
        words,
        weights,
        (GRID, GRID),
        path=paths[0],
        title="AdditiveAttention with hand-set weights, one query per item "
        "(not a trained captioner)",
        boxes=boxes,
    )

    row = weights[0]
    blocky = upsample_attention(row, (GRID, GRID), image.shape[:2])
    fig, axes = plt.subplots(1, 3, figsize=(9.6, 3.4))
    grid = row.reshape(GRID, GRID)
    axes[0].imshow(grid, cmap="gray", vmin=0, vmax=grid.max())
    for r in range(GRID):
        for c in range(GRID):
            value = grid[r, c]
            axes[0].text(
                c,
                r,
                f"{100 * value:.0f}",
                ha="center",
                va="center",
                fontsize=7,
                color="black" if value > 0.5 * grid.max() else "white",
            )
    axes[0].set_title(f"8x8 weights alpha_i (%), sum {row.sum():.2f}", fontsize=9)
    axes[1].imshow(image[..., 0], cmap="gray", vmin=0, vmax=1)
    axes[1].imshow(blocky, cmap="magma", alpha=0.6)
    axes[1].set_title(
        f"upsample_attention (flat cells), sum {blocky.sum():.2f}", fontsize=9
    )
    heat = smooth_attention(row, (GRID, GRID), image.shape[:2])
    axes[2].imshow(image[..., 0], cmap="gray", vmin=0, vmax=1)
    axes[2].imshow(heat / heat.max(), cmap="gray", alpha=0.6)
    axes[2].set_title(
        f"smooth_attention (the overlays), sum {heat.sum():.2f}", fontsize=9
    )
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


def _item_words(caption, count):
    """The item names of a first phrasing "a X <where> a Y and a Z <where>
    the X": the noun phrases after each article."""
    words = caption.split()
    names, k = [], 0
    while k < len(words) and len(names) < count:
        if words[k] in ("a", "an"):
            phrase = []
            k += 1
            while k < len(words) and words[k] not in (
                "to",
                "above",
                "below",
                "and",
            ):
                phrase.append(words[k])
                k += 1
            names.append(" ".join(phrase))
        else:
            k += 1
    return names
