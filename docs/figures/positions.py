"""The sinusoidal position encoding of `SinusoidalPositionEncoding`: the
heatmap, and the dot product of two encodings as a function of their offset."""

import numpy as np


def encodings(length, depth):
    """`(length, depth)` output of our layer for positions 0..length-1."""
    from keras import ops

    from keras_attention.layers import SinusoidalPositionEncoding

    zeros = np.zeros((1, length, depth), "float32")
    return ops.convert_to_numpy(SinusoidalPositionEncoding()(zeros))[0]


def build(out_dir):
    from keras_attention.viz import plot_position_encoding, pyplot

    heatmap = out_dir / "positions-encoding.png"
    plot_position_encoding(length=50, depth=128, path=heatmap)

    depth, offsets = 128, np.arange(-60, 61)
    pe = encodings(200, depth)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for p, style in ((60, "-"), (100, "--"), (139, ":")):
        dots = [pe[p] @ pe[p + k] for k in offsets]
        ax.plot(offsets, dots, style, label=f"p = {p}")
    ax.set_xlabel("offset k")
    ax.set_ylabel("PE(p) . PE(p + k)")
    ax.set_title(
        f"Dot products of two {depth}-dimensional encodings: "
        "a function of the offset k only",
        fontsize=10,
    )
    ax.axhline(0, color="gray", lw=0.6)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    curve = out_dir / "positions-offsets.png"
    fig.savefig(curve, dpi=110)
    plt.close(fig)
    return [heatmap, curve]
