"""Padding and causal masks, their combination, and the weights they allow.

One sentence of four tokens padded to six (`[7, 3, 9, 5, 0, 0]`), used as
queries and keys (self-attention). The masks come from `padding_mask`,
`causal_mask` and `merge_masks`, the weights from `masked_softmax` of random
scores under the combined mask.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from keras_attention import ops as ka_ops  # noqa: E402

TOKENS = np.array([7, 3, 9, 5, 0, 0])


def masks_and_weights():
    keep = ka_ops.padding_mask(TOKENS)  # (S,): True at real tokens
    key_padding = ka_ops.merge_masks(keep[None, :], np.ones((6, 1), bool))
    causal = ka_ops.causal_mask(6)
    combined = ka_ops.merge_masks(keep[None, :], causal, keep[:, None])
    scores = np.random.default_rng(0).normal(size=(6, 6)).astype("float32")
    weights = ka_ops.masked_softmax(scores, combined)
    return [ops.convert_to_numpy(x) for x in (key_padding, causal, combined, weights)]


def build(out_dir):
    key_padding, causal, combined, weights = masks_and_weights()
    labels = [str(t) for t in TOKENS]
    mask_cmap = ListedColormap(["#d9d9d9", "#2b6cb0"])
    fig, axes = plt.subplots(1, 4, figsize=(12, 3.5), layout="constrained")
    panels = (
        ("padding_mask: keys", key_padding),
        ("causal_mask(6)", causal),
        ("merge_masks(keys, causal, queries)", combined),
        ("masked_softmax(scores, merged)", weights),
    )
    for ax, (title, matrix) in zip(axes, panels, strict=True):
        is_mask = matrix.dtype == bool
        ax.imshow(
            matrix.astype(float),
            cmap=mask_cmap if is_mask else "viridis",
            vmin=0,
            vmax=1,
        )
        for (t, s), value in np.ndenumerate(matrix):
            text = ("T" if value else "F") if is_mask else f"{value:.2f}"
            bright = value if is_mask else value < 0.6
            ax.text(
                s,
                t,
                text,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if bright else "black",
            )
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(6), labels)
        ax.set_yticks(range(6), labels)
        ax.set_xlabel("key token", fontsize=8)
        ax.set_ylabel("query token", fontsize=8)
    fig.suptitle(
        "Tokens [7, 3, 9, 5, 0, 0], 0 = padding. True (blue) = may attend. "
        "Padded query rows get all-zero weights.",
        fontsize=10,
    )
    path = out_dir / "masking-masks-and-weights.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
