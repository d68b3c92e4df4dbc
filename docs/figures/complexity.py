"""Measured cost of one self-attention layer and one GRU against n, drawn from
docs/data/bench-seq2seq-cpu.json (the JSON of `keras-attention bench --suite
seq2seq`; see docs/benchmarks.md). Nothing is re-measured here."""

import json
import pathlib

import numpy as np

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "bench-seq2seq-cpu.json"
LAYERS = (
    ("self_attention", "self-attention (MultiHeadAttention)", "C0", "o-"),
    ("recurrent", "recurrent (keras.layers.GRU)", "C3", "s--"),
)


def series(results, layer, width):
    """`(lengths, seconds per sequence)` of the layer cases that ran."""
    xs, ys = [], []
    for n in results["config"]["layer_lengths"]:
        case = results["cases"].get(f"layer/{layer}/{width}/{n}", {})
        if case.get("per_sequence_s"):
            xs.append(n)
            ys.append(case["per_sequence_s"])
    return np.array(xs), np.array(ys)


def build(out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = json.loads(DATA.read_text())
    exponents = results["exponents"]
    widths = results["config"]["widths"]
    fig, axes = plt.subplots(1, len(widths), figsize=(5 * len(widths), 4.4))
    for ax, width in zip(axes, widths, strict=True):
        for layer, label, color, style in LAYERS:
            xs, ys = series(results, layer, width)
            slope = exponents[f"layer/{layer}/n/d{width}"]
            upper = exponents[f"layer/{layer}/n_upper/d{width}"]
            ax.plot(
                xs,
                ys,
                style,
                color=color,
                label=f"{label}\nslope {slope:.2f} (all n), {upper:.2f} (n >= 256)",
            )
        # Guide lines through the self-attention layer's time at n = 256.
        xs, ys = series(results, "self_attention", width)
        anchor = ys[list(xs).index(256)]
        grid = np.array([64, 4096])
        for power, dash in ((1, (4, 4)), (2, (1, 3))):
            ax.plot(
                grid,
                anchor * (grid / 256.0) ** power,
                color="gray",
                lw=0.9,
                dashes=dash,
                label=f"n^{power} guide",
            )
        ax.axvspan(2048, 4096 * 1.15, color="C0", alpha=0.07)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel("forward+backward time per sequence (s)")
        ax.set_title(f"width d = {width}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    machine = results["machine"]
    fig.suptitle(
        f"One layer, batch of {results['config']['layer_batch_size']}, XLA; "
        f"{machine['cpu']}, {machine['cores']} cores, TensorFlow "
        f"{machine['tensorflow']}, Keras {machine['keras']} "
        "(shaded: n >= 2048, where MultiHeadAttention takes its chunked path)",
        fontsize=9,
    )
    fig.tight_layout()
    path = out_dir / "complexity-layers.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
