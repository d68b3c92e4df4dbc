"""Attention over words: the HTML page and the highlighted-text figure."""

import html
import re

import pytest

from keras_attention import viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


DOCUMENT = [["the", "pork", "belly", "was", "delicious"], ["<script>", "ok"]]


WORD_WEIGHTS = [[0.1, 0.3, 0.2, 0.05, 0.9], [0.4, 0.0]]


SENTENCE_WEIGHTS = [0.75, 0.25]


WORD_ALPHA = re.compile(
    r'<span class="word" title="([0-9.]+)" '
    r'style="background-color: rgba\(\d+, \d+, \d+, ([0-9.]+)\)[^"]*">([^<]*)</span>'
)


def test_highlight_html_escapes_words_and_shows_weights(tmp_path):
    path = tmp_path / "nested" / "explanation.html"
    page = viz.highlight_html(
        DOCUMENT, WORD_WEIGHTS, SENTENCE_WEIGHTS, title="Review <1>", path=path
    )
    assert path.read_text(encoding="utf-8") == page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<title>Review &lt;1&gt;</title>" in page
    assert "<h3>Review &lt;1&gt;</h3>" in page
    assert "http" not in page and "<link" not in page
    spans = WORD_ALPHA.findall(page)
    assert [html.unescape(word) for _, _, word in spans] == sum(DOCUMENT, [])
    assert [float(weight) for weight, _, _ in spans] == sum(WORD_WEIGHTS, [])
    alphas = {word: float(alpha) for _, alpha, word in spans}
    assert alphas["delicious"] == 1.0
    assert max(alphas, key=alphas.get) == "delicious"
    assert alphas["ok"] == 0.0
    assert page.count('class="sentence-bar"') == 2
    assert 'class="sentence-bar" title="0.750"' in page
    assert page.count('class="sentence"') == 2


def test_highlight_html_flat_document_has_no_sentence_bars():
    page = viz.highlight_html([["a", "b"]], [[0.0, 0.0]])
    assert 'class="sentence-bar"' not in page
    assert "<h3>" not in page
    # all-zero weights: no division by zero, no colour
    assert [float(alpha) for _, alpha, _ in WORD_ALPHA.findall(page)] == [0.0, 0.0]


def test_plot_highlighted_text_draws_one_text_per_word(tmp_path):
    path = tmp_path / "nested" / "highlight.png"
    fig = viz.plot_highlighted_text(
        DOCUMENT, WORD_WEIGHTS, SENTENCE_WEIGHTS, title="Review", path=path
    )
    assert path.read_bytes().startswith(PNG_MAGIC)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == sum(DOCUMENT, [])
    assert not ax.axison
    boxes = {t.get_text(): t.get_bbox_patch().get_facecolor() for t in ax.texts}
    darkest = min(boxes, key=lambda word: sum(boxes[word][:3]))
    assert darkest == "delicious"
    assert len(ax.patches) == 2  # one red square per sentence
    flat = viz.plot_highlighted_text(DOCUMENT, WORD_WEIGHTS)
    assert len(flat.axes[0].patches) == 0


def _line_count(fig):
    return len({round(t.get_position()[1], 6) for t in fig.axes[0].texts})


def test_plot_highlighted_text_wraps_long_sentences():
    short = [["a", "short", "one"]]
    long = [["word"] * 30]  # 30 * 5 - 1 = 149 characters
    short_fig = viz.plot_highlighted_text(short, [[1.0] * 3], max_line_chars=20)
    long_fig = viz.plot_highlighted_text(long, [[1.0] * 30], max_line_chars=20)
    assert _line_count(short_fig) == 1
    assert _line_count(long_fig) == 8  # four 4-letter words per 20-char line
    assert long_fig.get_figheight() > short_fig.get_figheight()
    # every sentence starts a new line
    two = viz.plot_highlighted_text([["a"], ["b"]], [[1.0], [1.0]])
    assert _line_count(two) == 2


@pytest.mark.parametrize("draw", [viz.highlight_html, viz.plot_highlighted_text])
@pytest.mark.parametrize(
    "sentences, word_weights, sentence_weights, message",
    [
        ([["a"], ["b"]], [[1.0]], None, r"`word_weights` has 1 sentences.*has 2"),
        (
            [["a"], ["b", "c"]],
            [[1.0], [1.0]],
            None,
            r"`word_weights\[1\]` has 1 weights but expected 2 \(sentence 1 has 2",
        ),
        (
            [["a"], ["b"]],
            [[1.0], [1.0]],
            [1.0],
            r"`sentence_weights` has 1 weights but expected 2",
        ),
        ([["a", "b"]], [[1.0, -0.5]], None, r"`word_weights\[0\]\[1\]` is -0\.5"),
        ([["a", "b"]], [[1.0, float("nan")]], None, r"`word_weights\[0\]\[1\]` is nan"),
        ([["a"]], [[1.0]], [float("nan")], r"`sentence_weights\[0\]` is nan"),
        (["a b"], [[1.0, 1.0]], None, r"`sentences\[0\]` must be a list of word"),
    ],
)
def test_highlight_rejects_mismatches(
    draw, sentences, word_weights, sentence_weights, message
):
    with pytest.raises(ValueError, match=message):
        draw(sentences, word_weights, sentence_weights)
