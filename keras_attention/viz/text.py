"""Attention heatmaps and other figures, written to PNG with matplotlib (and
one self-contained HTML page of highlighted text)."""

import html
import math
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


def _check_weight_list(name, values, expected, what):
    """`values` as a list of floats, checked to hold `expected` finite,
    non-negative numbers (`what` says what they belong to)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ValueError(
            f"`{name}` must be a sequence of {expected} weights ({what}); "
            f"received {type(values).__name__}."
        )
    array = np.asarray(values, dtype="float64")
    if array.ndim != 1:
        raise ValueError(
            f"`{name}` must be a flat sequence of weights ({what}); "
            f"received shape {array.shape}."
        )
    if array.shape[0] != expected:
        raise ValueError(
            f"`{name}` has {array.shape[0]} weights but expected {expected} ({what})."
        )
    for index, value in enumerate(array):
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"`{name}[{index}]` is {value}; weights must be finite and "
                "non-negative."
            )
    return [float(value) for value in array]


def _check_document(sentences, word_weights, sentence_weights):
    """Validates a (possibly hierarchical) document of words and weights.

    Returns:
        `(sentences, word_weights, sentence_weights)` as lists of word strings,
        lists of floats and a list of floats (or None).
    """
    if isinstance(sentences, (str, bytes)) or not hasattr(sentences, "__len__"):
        raise ValueError(
            "`sentences` must be a list of sentences, each a list of word "
            f"strings; received {type(sentences).__name__}."
        )
    if len(sentences) == 0:
        raise ValueError("`sentences` must hold at least one sentence; received 0.")
    if isinstance(word_weights, (str, bytes)) or not hasattr(word_weights, "__len__"):
        raise ValueError(
            "`word_weights` must be a list with one list of weights per "
            f"sentence; received {type(word_weights).__name__}."
        )
    if len(word_weights) != len(sentences):
        raise ValueError(
            f"`word_weights` has {len(word_weights)} sentences but `sentences` "
            f"has {len(sentences)}; expected one list of weights per sentence."
        )
    words, weights = [], []
    for index, (sentence, sentence_word_weights) in enumerate(
        zip(sentences, word_weights, strict=True)
    ):
        if isinstance(sentence, (str, bytes)) or not hasattr(sentence, "__len__"):
            raise ValueError(
                f"`sentences[{index}]` must be a list of word strings; received "
                f"{type(sentence).__name__} {sentence!r}. Split it into words."
            )
        words.append([str(word) for word in sentence])
        weights.append(
            _check_weight_list(
                f"word_weights[{index}]",
                sentence_word_weights,
                len(sentence),
                f"sentence {index} has {len(sentence)} words",
            )
        )
    if sentence_weights is not None:
        sentence_weights = _check_weight_list(
            "sentence_weights",
            sentence_weights,
            len(sentences),
            f"one per sentence; the document has {len(sentences)} sentences",
        )
    return words, weights, sentence_weights


def _intensities(values):
    """`values` divided by their maximum (all zeros stay zeros)."""
    top = max(values, default=0.0)
    if top <= 0:
        return [0.0 for _ in values]
    return [value / top for value in values]


def _document_intensities(word_weights, sentence_weights):
    """Word weights normalised by the largest weight in the whole document,
    and sentence weights by the largest sentence weight."""
    flat = _intensities([value for weights in word_weights for value in weights])
    word_intensities, start = [], 0
    for weights in word_weights:
        word_intensities.append(flat[start : start + len(weights)])
        start += len(weights)
    sentence_intensities = (
        None if sentence_weights is None else _intensities(sentence_weights)
    )
    return word_intensities, sentence_intensities


def _make_parent(path):
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)


_WORD_RGB = (33, 113, 181)  # a dark blue of matplotlib's Blues colormap
_SENTENCE_RGB = (203, 24, 29)  # a dark red of matplotlib's Reds colormap

_HTML_STYLE = """\
body { font-family: Georgia, "Times New Roman", serif; font-size: 16px;
       line-height: 2; color: #111; background: #fff;
       max-width: 60em; margin: 2em auto; padding: 0 1em; }
h3 { font-family: Helvetica, Arial, sans-serif; }
.sentence { margin: 0.15em 0; }
.sentence-bar { display: inline-block; width: 0.9em; height: 0.9em;
                margin-right: 0.6em; vertical-align: middle;
                border: 1px solid #bbb; }
.word { padding: 0.15em 0.2em; border-radius: 3px; }"""


def highlight_html(
    sentences, word_weights, sentence_weights=None, title=None, path=None
):
    """Renders attention over a document as a self-contained HTML page, like
    the explanation figure of the Hierarchical Attention Network (Yang et al.,
    2016, figure 5): every word on a blue background as intense as its weight,
    every sentence on its own line after a red box as intense as the sentence
    weight. Hovering a word or a box shows its weight.

    The page uses inline CSS only: no scripts, no external resources.

    Args:
        sentences: list of sentences, each a list of word strings. For flat
            (non-hierarchical) models, pass the whole document as one sentence.
        word_weights: the same nested structure as `sentences`, holding one
            non-negative float per word, on any scale: intensities are
            normalised by the largest weight in the document.
        sentence_weights: one non-negative float per sentence, or None to draw
            no sentence boxes. Normalised by the largest sentence weight.
        title: page title, also shown as a heading.
        path: where to write the HTML (UTF-8; folders are created); None to
            skip.

    Returns:
        The HTML document as a string.
    """
    words, weights, sentence_weights = _check_document(
        sentences, word_weights, sentence_weights
    )
    word_intensities, sentence_intensities = _document_intensities(
        weights, sentence_weights
    )
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{html.escape(title or 'Attention highlights')}</title>",
        f"<style>\n{_HTML_STYLE}\n</style>",
        "</head>",
        "<body>",
    ]
    if title:
        lines.append(f"<h3>{html.escape(title)}</h3>")
    lines.append('<div class="document">')
    for index, sentence in enumerate(words):
        parts = []
        if sentence_weights is not None:
            parts.append(
                f'<span class="sentence-bar" title="{sentence_weights[index]:.3f}" '
                'style="background-color: '
                f"rgba({_SENTENCE_RGB[0]}, {_SENTENCE_RGB[1]}, {_SENTENCE_RGB[2]}, "
                f'{sentence_intensities[index]:.3f})"></span>'
            )
        spans = []
        for word, weight, intensity in zip(
            sentence, weights[index], word_intensities[index], strict=True
        ):
            text_colour = "#fff" if intensity > 0.6 else "#111"
            spans.append(
                f'<span class="word" title="{weight:.3f}" style="background-color: '
                f"rgba({_WORD_RGB[0]}, {_WORD_RGB[1]}, {_WORD_RGB[2]}, "
                f'{intensity:.3f}); color: {text_colour}">{html.escape(word)}</span>'
            )
        parts.append(" ".join(spans))
        lines.append(f'<div class="sentence">{"".join(parts)}</div>')
    lines += ["</div>", "</body>", "</html>", ""]
    document = "\n".join(lines)
    if path is not None:
        _make_parent(path)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(document)
    return document


def _wrap_sentence(words, max_line_chars):
    """Greedy line wrapping: lists of `(word_index, column)` per line. A word
    longer than `max_line_chars` gets a line of its own."""
    lines, line, used = [], [], 0
    for index, word in enumerate(words):
        start = used + 1 if line else 0
        if line and start + len(word) > max_line_chars:
            lines.append(line)
            line, start = [], 0
        line.append((index, start))
        used = start + len(word)
    lines.append(line)  # an empty sentence still gets its (empty) line
    return lines


def plot_highlighted_text(
    sentences,
    word_weights,
    sentence_weights=None,
    title=None,
    path=None,
    max_line_chars=80,
):
    """The picture of `highlight_html` as a matplotlib figure: words left to
    right in a monospace font, each on a box of the Blues colormap as dark as
    its weight, wrapped at `max_line_chars` characters, every sentence starting
    on a new line after a square of the Reds colormap as dark as its sentence
    weight (Yang et al., 2016, figure 5).

    Args:
        sentences: list of sentences, each a list of word strings. For flat
            (non-hierarchical) models, pass the whole document as one sentence.
        word_weights: the same nested structure as `sentences`, holding one
            non-negative float per word, on any scale: intensities are
            normalised by the largest weight in the document.
        sentence_weights: one non-negative float per sentence, or None to draw
            no sentence squares. Normalised by the largest sentence weight.
        title: figure title.
        path: where to write the PNG (folders are created); None to skip.
        max_line_chars: the longest line, in characters, before wrapping.

    Returns:
        The matplotlib figure (one axis, whose `texts` are the words in order).
    """
    if (
        isinstance(max_line_chars, bool)
        or not isinstance(max_line_chars, (int, np.integer))
        or max_line_chars < 1
    ):
        raise ValueError(
            f"`max_line_chars` must be a positive integer; received {max_line_chars!r}."
        )
    words, weights, sentence_weights = _check_document(
        sentences, word_weights, sentence_weights
    )
    word_intensities, sentence_intensities = _document_intensities(
        weights, sentence_weights
    )
    plt = _pyplot()
    from matplotlib.patches import Rectangle

    font_size = 11
    char_width = font_size * 0.6 / 72  # inches; monospace advance is ~0.6 em
    line_height = font_size * 2.0 / 72  # inches, room for the word boxes
    square = 0.6  # side of a sentence square, in line heights
    square_chars = square * line_height / char_width
    margin = square_chars + 1.5 if sentence_weights is not None else 1.0

    layout = []  # (sentence index, line number, [(word index, column)])
    line_number = 0
    for index, sentence in enumerate(words):
        for line in _wrap_sentence(sentence, int(max_line_chars)):
            layout.append((index, line_number, line))
            line_number += 1
    n_lines = line_number
    first_lines = {}
    for index, number, _ in layout:
        first_lines.setdefault(index, number)
    widest = max(
        [
            column + len(words[index][word])
            for index, _, line in layout
            for word, column in line
        ],
        default=0,
    )
    width_chars = margin + max(widest, 1) + 1
    title_height = 0.45 if title else 0.0
    text_height = (n_lines + 0.4) * line_height
    fig = plt.figure(figsize=(width_chars * char_width, text_height + title_height))
    ax = fig.add_axes([0, 0, 1, text_height / (text_height + title_height)])
    ax.set_xlim(0, width_chars)
    ax.set_ylim(n_lines + 0.2, -0.2)
    ax.axis("off")
    blues, reds = plt.get_cmap("Blues"), plt.get_cmap("Reds")
    for index, number, line in layout:
        if sentence_weights is not None and number == first_lines[index]:
            ax.add_patch(
                Rectangle(
                    (0.5, number + 0.5 - square / 2),
                    square_chars,
                    square,
                    facecolor=reds(sentence_intensities[index]),
                    edgecolor="#999999",
                    linewidth=0.5,
                    label=f"sentence {index}: {sentence_weights[index]:.3f}",
                )
            )
        for word, column in line:
            intensity = word_intensities[index][word]
            ax.text(
                margin + column,
                number + 0.5,
                words[index][word],
                family="monospace",
                fontsize=font_size,
                ha="left",
                va="center",
                color="white" if intensity > 0.6 else "black",
                parse_math=False,  # words are user text: "$" is not mathtext
                bbox=dict(
                    boxstyle="square,pad=0.15",
                    facecolor=blues(intensity),
                    edgecolor="none",
                ),
            )
    if title:
        fig.suptitle(title, y=1 - 0.1 / (text_height + title_height), va="top")
    if path is not None:
        _save(fig, path)
    return fig


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
    plt = _pyplot()
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
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_metric_spread(
    results, metrics=("accuracy", "macro_f1"), path=None, title=None
):
    """Grouped bar chart of scores over several seeds: one group per model,
    one bar per metric at the mean, an error bar of one (population) standard
    deviation, and every seed's value as a dot.

    Args:
        results: `{model_name: {metric_name: [value per seed, ...]}}`; groups
            follow the order of the keys.
        metrics: the metrics to draw, one bar each (in this order).
        path: where to write the PNG (folders are created); None to skip.
        title: figure title.

    Returns:
        The matplotlib figure (its axis holds one bar container per metric).
    """
    if isinstance(metrics, str):
        metrics = (metrics,)
    metrics = list(metrics)
    if not metrics:
        raise ValueError("`metrics` must name at least one metric; received none.")
    if not results:
        raise ValueError("`results` must name at least one model; received none.")
    values = {}
    for model, scores in results.items():
        for metric in metrics:
            if metric not in scores:
                raise ValueError(
                    f"`results[{model!r}]` has no metric {metric!r}; it has "
                    f"{sorted(scores)}, expected every metric of {metrics}."
                )
            seeds = np.asarray(scores[metric], dtype="float64").reshape(-1)
            if seeds.size == 0:
                raise ValueError(
                    f"`results[{model!r}][{metric!r}]` is empty; expected at "
                    "least one value (one per seed)."
                )
            if not np.all(np.isfinite(seeds)):
                raise ValueError(
                    f"`results[{model!r}][{metric!r}]` holds non-finite values: "
                    f"{seeds.tolist()}."
                )
            values[model, metric] = seeds
    plt = _pyplot()
    models = list(results)
    fig, ax = plt.subplots(
        figsize=(max(4.0, 0.5 * len(models) * len(metrics) + 2.0), 4.0)
    )
    bar_width = 0.8 / len(metrics)
    centers = np.arange(len(models))
    for position, metric in enumerate(metrics):
        offsets = centers + (position - (len(metrics) - 1) / 2) * bar_width
        means = [values[model, metric].mean() for model in models]
        spreads = [values[model, metric].std() for model in models]
        ax.bar(
            offsets,
            means,
            bar_width * 0.9,
            yerr=spreads,
            capsize=3,
            label=metric,
            alpha=0.85,
        )
        for offset, model in zip(offsets, models, strict=True):
            seeds = values[model, metric]
            jitter = np.linspace(-0.2, 0.2, seeds.size) if seeds.size > 1 else [0.0]
            ax.scatter(
                offset + np.asarray(jitter) * bar_width,
                seeds,
                s=12,
                color="black",
                zorder=3,
            )
    ax.set_xticks(centers)
    ax.set_xticklabels(models)
    ax.set_ylabel("score (mean ± std over seeds)")
    ax.set_title(title or "Scores over seeds")
    ax.grid(axis="y", alpha=0.3)
    everything = np.concatenate(list(values.values()))
    low, high = min(0.0, everything.min()), max(0.0, everything.max())
    ax.set_ylim(low, high + 0.2 * max(high - low, 1e-9))  # room for the legend
    ax.legend(loc="upper right", ncol=len(metrics), frameon=False)
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def _save(fig, path):
    _make_parent(path)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)


def _attention_grid(weights, grid_shape):
    """`(L,)` weights over row-major grid locations as an `(h, w)` float32 grid."""
    weights = np.asarray(weights, "float32")
    h, w = grid_shape
    if weights.shape != (h * w,):
        raise ValueError(
            f"`weights` must have shape ({h * w},) for a {h}x{w} grid; received "
            f"{weights.shape}."
        )
    return weights.reshape(h, w)


def upsample_attention(weights, grid_shape, image_shape):
    """Spreads attention over grid locations onto the image's pixels.

    Each location's weight is shared evenly among the pixels of its cell
    (the image divided into `grid_shape` equal cells, row-major), so the
    map sums to the same total as `weights`.

    Args:
        weights: `(L,)` with `L = grid_shape[0] * grid_shape[1]`.
        grid_shape: `(h, w)` of the grid.
        image_shape: `(H, W)`, multiples of `h` and `w`.

    Returns:
        float32 `(H, W)`.
    """
    grid = _attention_grid(weights, grid_shape)
    h, w = grid_shape
    height, width = image_shape[:2]
    if height % h or width % w:
        raise ValueError(
            f"The image {height}x{width} must divide into the {h}x{w} grid."
        )
    cell = (height // h, width // w)
    return np.kron(grid, np.ones(cell, "float32")) / (cell[0] * cell[1])


def _show_image(ax, image):
    image = np.asarray(image, "float32")
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0, vmax=1)
    ax.set_xticks([])
    ax.set_yticks([])


def smooth_attention(weights, grid_shape, image_shape):
    """Spreads attention over grid locations onto the image's pixels by
    bilinear resizing, the smooth look of the Show, Attend and Tell figures.

    Unlike `upsample_attention`, whose cells are flat blocks, the map varies
    smoothly between cell centres; it is rescaled to the same total as
    `weights`.

    Args:
        weights: `(L,)` with `L = grid_shape[0] * grid_shape[1]`.
        grid_shape: `(h, w)` of the grid (row-major locations).
        image_shape: `(H, W)` of the image, any size.

    Returns:
        float32 `(H, W)`.
    """
    from PIL import Image

    grid = _attention_grid(weights, grid_shape)
    height, width = image_shape[:2]
    resized = Image.fromarray(grid, mode="F").resize((width, height), Image.BILINEAR)
    heat = np.asarray(resized, "float32")
    total = float(heat.sum())
    return heat * (float(grid.sum()) / total) if total > 0 else heat


def plot_caption_attention(
    image, words, weights, grid_shape, path=None, title=None, boxes=None
):
    """Where the decoder looked for each word: the image, then one panel per
    word with the attention overlaid in white (the figures of Xu et al.,
    2015).

    Args:
        image: `(H, W)` or `(H, W, C)` in [0, 1].
        words: the generated words (tokens), one per row of `weights`.
        weights: `(len(words), L)`, attention over the `L` grid locations.
        grid_shape: `(h, w)` of the grid (row-major locations).
        path: where to write the PNG; None to skip.
        title: figure title.
        boxes: optional `(top, left, bottom, right)` boxes drawn on the
            image panel.

    Returns:
        The matplotlib figure.
    """
    plt = _pyplot()
    weights = _to_matrix(weights)
    words = list(words)
    _check_labels("words", words, weights.shape[0], "rows")
    image = np.asarray(image, "float32")
    height, width = image.shape[:2]
    columns = min(6, len(words) + 1)
    rows = math.ceil((len(words) + 1) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(2.0 * columns, 2.2 * rows), squeeze=False
    )
    for ax in axes.flat:
        ax.axis("off")
    _show_image(axes[0, 0], image)
    axes[0, 0].axis("on")
    axes[0, 0].set_title("image", fontsize=10)
    for box in [] if boxes is None else boxes:
        top, left, bottom, right = box
        if top < 0:
            continue
        axes[0, 0].add_patch(
            plt.Rectangle(
                (left - 0.5, top - 0.5),
                right - left,
                bottom - top,
                fill=False,
                edgecolor="tab:orange",
                linewidth=1,
            )
        )
    for k, (word, row) in enumerate(zip(words, weights, strict=True), start=1):
        ax = axes.flat[k]
        heat = smooth_attention(row, grid_shape, (height, width))
        _show_image(ax, image)
        ax.imshow(heat / max(float(heat.max()), 1e-12), cmap="gray", alpha=0.6)
        ax.axis("on")
        ax.set_title(word, fontsize=11)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_caption_grid(images, captions, path=None, references=None, columns=4):
    """A grid of images with their generated captions; with `references`, a
    caption that matches one of its references is green, others red.

    Args:
        images: `(N, H, W)` or `(N, H, W, C)` in [0, 1].
        captions: N generated captions.
        path: where to write the PNG; None to skip.
        references: optional, for each image a list of reference captions.
        columns: images per row.

    Returns:
        The matplotlib figure.
    """
    import textwrap

    plt = _pyplot()
    images = np.asarray(images, "float32")
    captions = list(captions)
    if len(images) != len(captions) or not captions:
        raise ValueError(
            f"Expected one caption per image and at least one image; received "
            f"{len(images)} images and {len(captions)} captions."
        )
    if references is not None and len(references) != len(captions):
        raise ValueError(
            f"Expected one list of references per image; received "
            f"{len(references)} for {len(captions)} images."
        )
    columns = min(columns, len(captions))
    rows = math.ceil(len(captions) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.0 * columns, 3.6 * rows), squeeze=False
    )
    for ax in axes.flat:
        ax.axis("off")
    for i, (image, caption) in enumerate(zip(images, captions, strict=True)):
        ax = axes.flat[i]
        _show_image(ax, image)
        ax.axis("on")
        color = "black"
        if references is not None:
            color = "tab:green" if caption in references[i] else "tab:red"
        ax.set_title(textwrap.fill(caption, 28), fontsize=8, color=color)
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_localization(in_box, chance, path=None, title=None):
    """The distribution of the attention mass inside the named object's box,
    against the box's share of the image (the chance level).

    Args:
        in_box: per named word, the share of its attention inside the box.
        chance: per named word, the box's area over the image's.
        path: where to write the PNG; None to skip.
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    plt = _pyplot()
    in_box = np.asarray(in_box, "float32")
    chance = np.asarray(chance, "float32")
    if in_box.shape != chance.shape or in_box.ndim != 1 or not len(in_box):
        raise ValueError(
            "`in_box` and `chance` must be non-empty 1-D arrays of one length; "
            f"received shapes {in_box.shape} and {chance.shape}."
        )
    fig, ax = plt.subplots(figsize=(6, 3.6))
    bins = np.linspace(0, 1, 21)
    ax.hist(in_box, bins=bins, alpha=0.7, label="attention inside the box")
    ax.hist(chance, bins=bins, alpha=0.7, label="box share of the image (chance)")
    ax.axvline(in_box.mean(), color="tab:blue", linestyle="--")
    ax.axvline(chance.mean(), color="tab:orange", linestyle="--")
    ax.set_xlabel("share of the image / of the attention")
    ax.set_ylabel("named words")
    ax.legend(frameon=False)
    ax.set_title(
        title
        or f"mean {in_box.mean():.2f} inside vs {chance.mean():.2f} chance "
        f"({in_box.mean() / max(chance.mean(), 1e-12):.1f}x)"
    )
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_image_grid(images, path=None, columns=8, row_titles=None, title=None):
    """A grid of images (generated samples, say), `columns` per row.

    Args:
        images: `(N, H, W, C)` in [0, 1], C = 1 or 3.
        path: where to write the PNG; None to skip.
        columns: images per row.
        row_titles: optional label per row (e.g. the class of a conditional
            generator's row).
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    images = np.asarray(images, "float32")
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(
            f"`images` must have shape (N, H, W, 1 or 3); received {images.shape}."
        )
    rows = math.ceil(len(images) / columns)
    if row_titles is not None and len(row_titles) != rows:
        raise ValueError(f"`row_titles` has {len(row_titles)} labels for {rows} rows.")
    plt = _pyplot()
    fig, axes = plt.subplots(
        rows, columns, figsize=(columns * 1.0, rows * 1.0 + 0.4), squeeze=False
    )
    for i, ax in enumerate(axes.flat):
        if i < len(images):
            _show_image(ax, images[i])
        else:
            ax.axis("off")
    if row_titles is not None:
        for ax, label in zip(axes[:, 0], row_titles, strict=True):
            ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    # Room at the top for the title.
    fig.tight_layout(pad=0.3, rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    if path is not None:
        _save(fig, path)
    return fig


def plot_gan_history(history, path=None, title=None):
    """The training curves of a GAN, one point per epoch: the hinge losses
    of both networks and their mean logits on real and generated images, and
    FID when the history has it.

    Args:
        history: `{"d_loss": [...], "g_loss": [...], "d_real": [...],
            "d_fake": [...], "fid": [...] (optional)}`, one value per epoch.
        path: where to write the PNG; None to skip.
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    required = ("d_loss", "g_loss", "d_real", "d_fake")
    missing = [k for k in required if k not in history]
    if missing:
        raise ValueError(
            f"`history` lacks {missing}; it has {sorted(history)}, expected "
            f"every one of {list(required)}."
        )
    plt = _pyplot()
    panels = 3 if history.get("fid") else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.2))
    epochs = np.arange(1, len(history["d_loss"]) + 1)
    for key, label in (("d_loss", "discriminator"), ("g_loss", "generator")):
        axes[0].plot(epochs, history[key], marker="o", label=label)
    axes[0].set_title("hinge loss")
    for key, label in (("d_real", "D(real)"), ("d_fake", "D(generated)")):
        axes[1].plot(epochs, history[key], marker="o", label=label)
    axes[1].set_title("mean discriminator logit")
    if panels == 3:
        axes[2].plot(epochs, history["fid"], marker="o", color="tab:green")
        axes[2].set_title("FID (lower is better)")
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.legend(frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_self_attention(images, weights, query_points, path=None, title=None):
    """Where chosen query positions of generated images attend, in the style
    of the SAGAN paper's figure: each row shows one image with its query
    points marked, then one attention map per point over the image.

    Args:
        images: `(B, H, W, C)` in [0, 1].
        weights: `(B, r * r, r * r)` self-attention weights over an `r x r`
            map (row = query, row-major), `r` dividing H and W.
        query_points: `(row, column)` pairs in map coordinates.
        path: where to write the PNG; None to skip.
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    images = np.asarray(images, "float32")
    weights = np.asarray(weights, "float32")
    if weights.ndim != 3 or weights.shape[1] != weights.shape[2]:
        raise ValueError(
            f"`weights` must have shape (B, r * r, r * r); received {weights.shape}."
        )
    side = math.isqrt(weights.shape[1])
    if side * side != weights.shape[1] or len(images) != len(weights):
        raise ValueError(
            f"`weights` {weights.shape} must be square maps of a square grid, "
            f"one per image ({len(images)} images)."
        )
    for row, column in query_points:
        if not (0 <= row < side and 0 <= column < side):
            raise ValueError(
                f"Query point ({row}, {column}) is outside the {side}x{side} map."
            )
    plt = _pyplot()
    columns = 1 + len(query_points)
    fig, axes = plt.subplots(
        len(images), columns, figsize=(1.8 * columns, 1.8 * len(images)), squeeze=False
    )
    scale = images.shape[1] / side
    colors = plt.cm.tab10.colors
    for b, image in enumerate(images):
        _show_image(axes[b, 0], image)
        for k, (row, column) in enumerate(query_points):
            color = colors[k % len(colors)]
            center = ((column + 0.5) * scale - 0.5, (row + 0.5) * scale - 0.5)
            axes[b, 0].plot(*center, "o", color=color, markersize=5)
            attention = weights[b, row * side + column]
            heatmap = upsample_attention(attention, (side, side), images.shape[1:3])
            ax = axes[b, k + 1]
            _show_image(ax, image)
            ax.imshow(heatmap, cmap="jet", alpha=0.55)
            ax.plot(*center, "o", color=color, markersize=5)
            for spine in ax.spines.values():
                spine.set_edgecolor(color)
                spine.set_linewidth(2)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(pad=0.3)
    if path is not None:
        _save(fig, path)
    return fig


def plot_curves(curves, path=None, xlabel="epoch", ylabel=None, title=None):
    """Lines of a metric over epochs, one per run (e.g. FID per epoch of
    every model and seed of an ablation).

    Args:
        curves: `{label: [value per epoch, ...]}`; epochs count from 1.
        path: where to write the PNG; None to skip.
        xlabel: x-axis label.
        ylabel: y-axis label.
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    if not curves:
        raise ValueError("`curves` must hold at least one curve; received none.")
    empty = [label for label, values in curves.items() if not len(values)]
    if empty:
        raise ValueError(f"Curves {empty} are empty; expected a value per epoch.")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for label, values in curves.items():
        ax.plot(np.arange(1, len(values) + 1), values, marker="o", label=label)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    if path is not None:
        _save(fig, path)
    return fig


def plot_grouped_bars(groups, series, path=None, ylabel=None, title=None, log=True):
    """Bars side by side per group, one colour per series (benchmark
    comparisons such as ours vs Keras per layer).

    Args:
        groups: the x-axis labels.
        series: `{label: [value per group, ...]}`; None or 0 draws no bar.
        path: where to write the PNG; None to skip.
        ylabel: y-axis label.
        title: figure title.
        log: logarithmic y axis.

    Returns:
        The matplotlib figure.
    """
    if not groups or not series:
        raise ValueError("`groups` and `series` must not be empty.")
    for label, values in series.items():
        if len(values) != len(groups):
            raise ValueError(
                f"Series {label!r} has {len(values)} values; expected one per "
                f"group ({len(groups)})."
            )
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) + 2), 4.0))
    width = 0.8 / len(series)
    positions = np.arange(len(groups))
    for i, (label, values) in enumerate(series.items()):
        heights = [value or 0.0 for value in values]
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar(positions + offset, heights, width, label=label)
    ax.set_xticks(positions, groups, rotation=30, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    if path:
        _save(fig, path)
    return fig
