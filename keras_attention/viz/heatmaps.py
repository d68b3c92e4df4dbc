"""Heatmaps of matrices: attention weights (query x key), the sinusoidal
position encoding and a confusion matrix."""

import numpy as np

from keras_attention.viz.figures import (
    _check_labels,
    _to_matrix,
    finish_figure,
    pyplot,
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
    plt = pyplot()
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
    return finish_figure(fig, path)


def plot_position_encoding(length=50, depth=128, max_wavelength=10000, path=None):
    """Heatmap of the sinusoidal encoding: one row per position, one column per
    dimension (the "128-dimensional positional encoding for a sentence with
    maximum length 50" figure).

    Returns:
        The matplotlib figure.
    """
    from keras import ops

    from keras_attention.layers.position_encoding import sinusoidal_encoding

    positions = ops.cast(ops.arange(length, dtype="int32"), "float32")
    encoding = ops.convert_to_numpy(
        sinusoidal_encoding(positions, depth, max_wavelength)
    )
    plt = pyplot()
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
    return finish_figure(fig, path)


def plot_confusion_matrix(matrix, class_names, path=None, title=None, normalize=False):
    """Heatmap of a confusion matrix with the value written in every cell.

    Args:
        matrix: `(n_classes, n_classes)` counts; rows = true classes, columns =
            predicted classes.
        class_names: one name per class, in the order of the rows.
        path: where to write the PNG (folders are created); None to skip.
        title: figure title.
        normalize: show each row as shares of its total (rows summing to 1)
            instead of counts; empty rows stay at 0.

    Returns:
        The matplotlib figure.
    """
    counts = np.asarray(matrix, dtype="float64")
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1]:
        raise ValueError(
            "`matrix` must be a square 2-D matrix (rows = true, columns = "
            f"predicted); received shape {counts.shape}."
        )
    if len(class_names) != counts.shape[0]:
        raise ValueError(
            f"`class_names` has {len(class_names)} names but `matrix` is "
            f"{counts.shape[0]}x{counts.shape[1]}; expected one name per class."
        )
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ValueError("`matrix` must hold finite, non-negative counts.")
    if normalize:
        totals = counts.sum(axis=1, keepdims=True)
        values = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
        cell_text = [[f"{value:.2f}" for value in row] for row in values]
    else:
        values = counts
        cell_text = [
            [
                str(int(value)) if float(value).is_integer() else f"{value:.3g}"
                for value in row
            ]
            for row in values
        ]
    plt = pyplot()
    n = counts.shape[0]
    fig, ax = plt.subplots(figsize=(max(3.5, 0.6 * n + 2.5), max(3.0, 0.6 * n + 1.8)))
    top = 1.0 if normalize else max(1.0, values.max())
    image = ax.imshow(values, cmap="Blues", vmin=0.0, vmax=top)
    for row in range(n):
        for column in range(n):
            ax.text(
                column,
                row,
                cell_text[row][column],
                ha="center",
                va="center",
                color="white" if values[row, column] > 0.6 * top else "black",
            )
    ax.set_xticks(range(n))
    ax.set_xticklabels([str(name) for name in class_names], rotation=45, ha="right")
    ax.set_yticks(range(n))
    ax.set_yticklabels([str(name) for name in class_names])
    ax.set_xlabel("Predicted")
    ax.set_ylabel("True")
    ax.set_title(
        title or ("Confusion matrix (row shares)" if normalize else "Confusion matrix")
    )
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return finish_figure(fig, path)
