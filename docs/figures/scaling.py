"""Why scaled dot-product attention divides by sqrt(d_k), measured with our ops.

Queries and keys with independent standard-normal entries; for each key size
d_k, 512 queries score 16 keys with `dot_score` and `scaled_dot_score`, and
`masked_softmax` turns the scores into weights. Three panels: the variance of
the scores, the largest weight of each query, and the Frobenius norm of the
softmax Jacobian (how much gradient reaches the scores).
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from keras_attention import ops as ka_ops  # noqa: E402

DIMS = 2 ** np.arange(1, 11)  # 2 .. 1024
QUERIES, KEYS = 512, 16


def jacobian_norm(weights):
    """||diag(p) - p p^T||_F for each row p of `weights`."""
    p2 = np.sum(weights**2, axis=-1)
    p3 = np.sum(weights**3, axis=-1)
    return np.sqrt(np.maximum(p2 - 2 * p3 + p2**2, 0.0))


def measure():
    rng = np.random.default_rng(0)
    rows = []
    for d_k in DIMS:
        query = rng.normal(size=(QUERIES, int(d_k))).astype("float32")
        key = rng.normal(size=(KEYS, int(d_k))).astype("float32")
        row = {"d_k": int(d_k)}
        for name, scores in (
            ("dot", ka_ops.dot_score(query, key)),
            ("scaled", ka_ops.scaled_dot_score(query, key)),
        ):
            weights = ops.convert_to_numpy(ka_ops.masked_softmax(scores))
            row[name] = {
                "variance": float(np.var(ops.convert_to_numpy(scores))),
                "max_weight": float(np.mean(np.max(weights, axis=-1))),
                "jacobian": float(np.mean(jacobian_norm(weights))),
            }
        rows.append(row)
    return rows


def build(out_dir):
    rows = measure()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), layout="constrained")
    panels = (
        ("variance", "variance of the scores", "log"),
        ("max_weight", "mean largest weight (16 keys)", "linear"),
        ("jacobian", "mean ||softmax Jacobian||", "log"),
    )
    for ax, (field, title, yscale) in zip(axes, panels, strict=True):
        for name, label, color in (
            ("dot", r"$q \cdot k$", "tab:red"),
            ("scaled", r"$q \cdot k / \sqrt{d_k}$", "tab:blue"),
        ):
            values = [row[name][field] for row in rows]
            ax.plot(DIMS, values, "o-", ms=3, color=color, label=label)
        if field == "variance":
            ax.plot(DIMS, DIMS, "k:", lw=1, label="$d_k$")
        if field == "max_weight":
            ax.axhline(1 / KEYS, color="gray", lw=0.8, ls="--", label="uniform, 1/16")
        ax.set_xscale("log", base=2)
        ax.set_yscale(yscale)
        ax.set_xlabel("$d_k$")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(
        "Unit-variance queries and keys: unscaled scores grow with $d_k$ and "
        "saturate the softmax",
        fontsize=10,
    )
    path = out_dir / "scaling-softmax-saturation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
