"""Attention heatmaps and other figures, written to PNG with matplotlib."""

import os

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _to_matrix(weights, name="weights"):
    matrix = np.asarray(weights, dtype="float32")
    if matrix.ndim != 2:
        raise ValueError(
            f"`{name}` must be a 2-D matrix (rows = queries, columns = keys); "
            f"received shape {matrix.shape}. Select one example (and one head)."
        )
    return matrix


def _check_labels(name, labels, size, axis):
    if labels is not None and len(labels) != size:
        raise ValueError(
            f"`{name}` has {len(labels)} labels but the weights have {size} {axis}."
        )


def plot_attention(
    weights,
    source_tokens=None,
    target_tokens=None,
    path=None,
    title=None,
    ax=None,
):
    """Draws an attention matrix as a heatmap, like the alignment figures of
    Bahdanau et al. (2015): one row per output (query) token, one column per
    input (key) token, white = high weight.

    Args:
        weights: `(T_target, T_source)` array-like of attention weights.
        source_tokens: labels of the columns (x axis, top).
        target_tokens: labels of the rows (y axis).
        path: where to write the PNG (folders are created); None to skip.
        title: figure title.
        ax: an existing matplotlib axis to draw into.

    Returns:
        The matplotlib figure.
    """
    matrix = _to_matrix(weights)
    _check_labels("source_tokens", source_tokens, matrix.shape[1], "columns")
    _check_labels("target_tokens", target_tokens, matrix.shape[0], "rows")
    plt = _pyplot()
    if ax is None:
        height, width = matrix.shape
        fig, ax = plt.subplots(
            figsize=(max(3.0, 0.45 * width + 1.5), max(2.5, 0.45 * height + 1.0))
        )
    else:
        fig = ax.figure
    image = ax.imshow(matrix, cmap="gray", vmin=0.0, vmax=max(1e-9, matrix.max()))
    ax.xaxis.tick_top()
    if source_tokens is not None:
        ax.set_xticks(range(len(source_tokens)))
        ax.set_xticklabels(source_tokens, rotation=90)
    if target_tokens is not None:
        ax.set_yticks(range(len(target_tokens)))
        ax.set_yticklabels(target_tokens)
    if title:
        ax.set_title(title, pad=30 if source_tokens is not None else 6)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_position_encoding(length=50, depth=128, max_wavelength=10000, path=None):
    """Heatmap of the sinusoidal encoding: one row per position, one column per
    dimension (the "128-dimensional positional encoding for a sentence with
    maximum length 50" figure).

    Returns:
        The matplotlib figure.
    """
    from keras import ops

    from keras_attention.layers.position_encoding import sinusoidal_encoding

    positions = ops.cast(ops.arange(length), "float32")
    encoding = ops.convert_to_numpy(
        sinusoidal_encoding(positions, depth, max_wavelength)
    )
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    image = ax.pcolormesh(encoding, cmap="RdBu", vmin=-1, vmax=1)
    ax.set_xlabel("Depth (embedding dimension)")
    ax.set_ylabel("Position")
    ax.set_xlim(0, depth)
    ax.set_ylim(length, 0)
    ax.set_title(
        f"{depth}-dimensional sinusoidal position encoding, {length} positions"
    )
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_score_by_length(results, path=None, metric="bleu", title=None):
    """Score against source length, one line per model, like the BLEU vs
    sentence length figure of Bahdanau et al. (2015).

    Args:
        results: `{model_name: {bucket_label: {metric: value, "count": n}}}`,
            the `by_length` entries of translation metrics; buckets in order.
        path: where to write the PNG; None to skip.
        metric: the score to plot (`"bleu"`, `"chrf"` or `"exact_match"`).
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    if not results:
        raise ValueError("`results` must name at least one model.")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, buckets in results.items():
        labels = list(buckets)
        ax.plot(
            range(len(labels)),
            [buckets[label][metric] for label in labels],
            marker="o",
            label=name,
        )
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels)
    ax.set_xlabel("Source length (words)")
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} by source length")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def _save(fig, path):
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
