"""What every figure shares: matplotlib imported lazily with a headless
backend, a figure written to a PNG, and checks of the matrices drawn."""

import os

import numpy as np

from keras_attention.utils.files import written_whole

_DPI = 120  # the resolution of every PNG the package writes


def pyplot():
    """`matplotlib.pyplot` with the headless Agg backend, imported on first
    use: matplotlib is the optional `apps` extra, so `keras_attention`
    imports it only when a figure is drawn, and no display is needed.

    Returns:
        The `matplotlib.pyplot` module.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path):
    """Writes `fig` to `path` as a PNG at 120 dots per inch, creating the
    missing folders, then closes the figure (its pixels are its size in inches
    times 120).

    Args:
        fig: a matplotlib figure.
        path: where to write the PNG (a string or path-like).
    """
    _make_parent(path)
    try:
        with written_whole(path) as partial:
            fig.savefig(partial, dpi=_DPI, format=_format(path))
    finally:
        pyplot().close(fig)


def finish_figure(fig, path, title=None):
    """Lays `fig` out, under `title` where one is given, and writes it to
    `path` with `save_figure` unless `path` is None.

    Returns:
        `fig`.
    """
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def _format(path):
    """The image format `path`'s ending names (the partial file's ending is
    not the final one's for every name)."""
    ending = os.path.splitext(os.fspath(path))[1].lstrip(".").lower()
    return ending or "png"


def _make_parent(path):
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)


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
