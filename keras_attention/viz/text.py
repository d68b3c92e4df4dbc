"""Attention over words: a self-contained HTML page of highlighted text and
the same picture as a matplotlib figure (Yang et al., 2016, figure 5)."""

import html
import math

import numpy as np

from keras_attention.utils.files import write_text
from keras_attention.viz.figures import _make_parent, pyplot, save_figure


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


def _checked_document(sentences, word_weights, sentence_weights):
    """`_check_document`'s `(words, weights, sentence_weights)`, then the
    intensities of the words and of the sentences
    (`_document_intensities`)."""
    words, weights, sentence_weights = _check_document(
        sentences, word_weights, sentence_weights
    )
    return (
        words,
        weights,
        sentence_weights,
        *_document_intensities(weights, sentence_weights),
    )


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
    document = _checked_document(sentences, word_weights, sentence_weights)
    words, weights, sentence_weights, word_intensities, sentence_intensities = document
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
        write_text(path, document)
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
        sentences, word_weights: as `highlight_html`'s.
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
    document = _checked_document(sentences, word_weights, sentence_weights)
    words, weights, sentence_weights, word_intensities, sentence_intensities = document
    plt = pyplot()
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
        save_figure(fig, path)
    return fig
