"""Figures of the GAN concept page (SAGAN's self-attention block).

- `gans-attention.png`: where a few query positions of a synthetic 16x16
  feature map attend in our `SelfAttention2D`, with the query and key
  projections f and g set by hand to read the map's colour (nothing trained).
- `gans-memory.png`: the size of the block's attention weights against the
  feature-map size, from the shapes the layer reports
  (`compute_output_shape`), nothing measured.
"""

import numpy as np

SIDE = 16  # the feature map is 16x16, as in the GAN tutorial's block
PIXELS = 4  # each position is drawn as a 4x4 patch: a 64x64 picture
COLOUR_SCALE = 3.0  # f(x) = g(x) = COLOUR_SCALE * (r, g, b)

RED = (0.9, 0.15, 0.1)
BLUE = (0.15, 0.3, 0.9)
BACKGROUND = (0.12, 0.12, 0.12)
SQUARE = (slice(10, 14), slice(10, 14))
BAR = (slice(9, 15), slice(2, 4))


def feature_map():
    """`(1, 16, 16, 3)`: a red disc, a red square far from it and a blue bar
    on a dark background; each position's features are its colour."""
    x = np.empty((SIDE, SIDE, 3), "float32")
    x[:] = BACKGROUND
    rows, cols = np.meshgrid(np.arange(SIDE), np.arange(SIDE), indexing="ij")
    x[(rows - 3.5) ** 2 + (cols - 3.5) ** 2 <= 6.5] = RED
    x[SQUARE] = RED
    x[BAR] = BLUE
    return x[None]


QUERY_POINTS = ((3, 3), (12, 2), (12, 11), (4, 12))
QUERY_LABELS = ("red disc", "blue bar", "red square", "background")


def hand_set_block():
    """A `SelfAttention2D(key_channels=3, value_channels=3)` whose query
    projection g and key projection f are both `COLOUR_SCALE` times the
    identity: `s_ij = 9 <colour_i, colour_j>`, so positions attend to
    positions of a similar, bright colour, wherever they are."""
    from keras_attention.layers import SelfAttention2D

    block = SelfAttention2D(key_channels=3, value_channels=3)
    block.build((1, SIDE, SIDE, 3))
    identity = COLOUR_SCALE * np.eye(3, dtype="float32")[None, None]
    block.query_projection.kernel.assign(identity)
    block.key_projection.kernel.assign(identity)
    return block


def build(out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_attention.layers import SelfAttention2D
    from keras_attention.viz import upsample_attention

    paths = [out_dir / "gans-attention.png", out_dir / "gans-memory.png"]

    x = feature_map()
    _, weights = hand_set_block()(x, return_attention_scores=True)
    weights = np.asarray(weights)[0]
    picture = np.kron(x[0], np.ones((PIXELS, PIXELS, 1), "float32"))
    size = SIDE * PIXELS
    colours = plt.cm.tab10.colors
    fig, axes = plt.subplots(1, 1 + len(QUERY_POINTS), figsize=(11.0, 3.0))
    axes[0].imshow(picture)
    axes[0].set_title("feature map (its colours)", fontsize=9)
    for k, ((row, col), label) in enumerate(
        zip(QUERY_POINTS, QUERY_LABELS, strict=True)
    ):
        centre = ((col + 0.5) * PIXELS - 0.5, (row + 0.5) * PIXELS - 0.5)
        attention = weights[row * SIDE + col]
        heat = upsample_attention(attention, (SIDE, SIDE), (size, size))
        grid = attention.reshape(SIDE, SIDE)
        ax = axes[k + 1]
        ax.imshow(heat, cmap="magma", vmin=0)
        for ax_ in (axes[0], ax):
            ax_.plot(*centre, "o", color=colours[k], markersize=6, mec="white")
        for spine in ax.spines.values():
            spine.set_edgecolor(colours[k])
            spine.set_linewidth(2)
        square = grid[SQUARE].sum()
        ax.set_title(
            f"query: {label}\n{100 * square:.0f}% on the red square, "
            f"{100 * grid[BAR].sum():.0f}% on the bar",
            fontsize=8,
        )
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        "SelfAttention2D on a 16x16 map: beta for four query positions "
        "(f and g set by hand to compare colours, not trained)",
        fontsize=9,
    )
    fig.tight_layout(pad=0.4, rect=(0, 0, 1, 0.9))
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    sides = np.array([4, 8, 16, 32, 64, 128])
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for pool_size, style in ((1, "o-"), (2, "s--")):
        sizes = []
        for side in sides:
            layer = SelfAttention2D(pool_size=pool_size)
            _, shape = layer.compute_output_shape(
                (1, int(side), int(side), 64), return_attention_scores=True
            )
            sizes.append(4 * shape[1] * shape[2])  # float32 bytes, one image
        sizes = np.array(sizes, "float64")
        ax.loglog(
            sides * sides,
            sizes / 2**20,
            style,
            label=f"pool_size={pool_size}: N x N/{pool_size**2} weights",
        )
        if pool_size == 1:
            for side, size in zip(sides, sizes, strict=True):
                ax.annotate(
                    f"{side}x{side}: {_bytes(size)}",
                    (side * side, size / 2**20),
                    textcoords="offset points",
                    xytext=(-12, 7),
                    ha="right",
                    fontsize=8,
                )
    ax.set_xscale("log", base=2)
    ax.set_xlim(2**1.5, 2**15)
    ax.set_ylim(1e-4, 1e4)
    ax.set_xlabel("positions N = H * W of the feature map")
    ax.set_ylabel("attention weights, MiB per image")
    ax.set_title(
        "SelfAttention2D's weights: float32 bytes from its output shape", fontsize=10
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


def _bytes(size):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"
