import html
import re

import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer

from keras_attention import viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plot_attention_writes_png_with_labels(tmp_path):
    weights = np.eye(3)[::-1]
    path = tmp_path / "nested" / "alignment.png"
    fig = viz.plot_attention(weights, ["a", "b", "c"], ["x", "y", "z"], path=path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]


def test_plot_attention_rejects_batched_weights():
    with pytest.raises(ValueError, match=r"2-D matrix.*\(2, 3, 3\)"):
        viz.plot_attention(np.zeros((2, 3, 3)))


def test_plot_attention_rejects_label_count_mismatch():
    with pytest.raises(ValueError, match=r"`source_tokens` has 2 labels.*3 columns"):
        viz.plot_attention(np.zeros((3, 3)), source_tokens=["a", "b"])


def test_plot_position_encoding(tmp_path):
    path = tmp_path / "pe.png"
    fig = viz.plot_position_encoding(length=50, depth=128, path=path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    mesh = fig.axes[0].collections[0]
    assert mesh.get_array().shape == (50 * 128,) or mesh.get_array().shape == (50, 128)


def test_plot_score_by_length_draws_one_line_per_model(tmp_path):
    path = tmp_path / "length.png"
    results = {
        "transformer": {"1-5": {"bleu": 30.0}, "6-10": {"bleu": 25.0}},
        "rnn": {"1-5": {"bleu": 20.0}, "6-10": {"bleu": 8.0}},
    }
    fig = viz.plot_score_by_length(results, path=path, metric="bleu")
    assert path.read_bytes().startswith(PNG_MAGIC)
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["transformer", "rnn"]
    assert list(lines[1].get_ydata()) == [20.0, 8.0]


def test_plot_score_by_length_needs_a_model():
    with pytest.raises(ValueError, match="at least one model"):
        viz.plot_score_by_length({})


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


def test_plot_confusion_matrix_annotates_counts(tmp_path):
    path = tmp_path / "nested" / "confusion.png"
    matrix = np.array([[5, 2, 0], [1, 7, 3], [0, 0, 9]])
    names = ["neg", "neutral", "pos"]
    fig = viz.plot_confusion_matrix(matrix, names, path=path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == [str(v) for v in matrix.ravel()]
    assert [t.get_text() for t in ax.get_xticklabels()] == names
    assert [t.get_text() for t in ax.get_yticklabels()] == names
    assert ax.get_xlabel() == "Predicted" and ax.get_ylabel() == "True"


def test_plot_confusion_matrix_normalizes_rows():
    fig = viz.plot_confusion_matrix([[3, 1], [0, 0]], ["a", "b"], normalize=True)
    assert [t.get_text() for t in fig.axes[0].texts] == ["0.75", "0.25", "0.00", "0.00"]


def test_plot_confusion_matrix_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"square.*\(2, 3\)"):
        viz.plot_confusion_matrix(np.zeros((2, 3)), ["a", "b"])
    with pytest.raises(ValueError, match=r"`class_names` has 3 names.*2x2"):
        viz.plot_confusion_matrix(np.zeros((2, 2)), ["a", "b", "c"])


def test_plot_metric_spread_draws_mean_bars_and_seed_dots(tmp_path):
    path = tmp_path / "nested" / "spread.png"
    results = {
        "han": {"accuracy": [0.8, 0.9], "macro_f1": [0.7, 0.75, 0.8]},
        "bilstm": {"accuracy": [0.6], "macro_f1": [0.5, 0.55]},
    }
    fig = viz.plot_metric_spread(results, path=path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    ax = fig.axes[0]
    bar_groups = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert len(bar_groups) == 2  # one bar container per metric
    assert [c.get_label() for c in bar_groups] == ["accuracy", "macro_f1"]
    bars = [bar for container in bar_groups for bar in container]
    assert len(bars) == 4  # models x metrics
    heights = [bar.get_height() for bar in bars]
    assert heights == pytest.approx([0.85, 0.6, 0.75, 0.525])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["han", "bilstm"]
    dots = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert sum(len(c.get_offsets()) for c in dots) == 8  # every seed value


def test_plot_metric_spread_rejects_missing_values():
    with pytest.raises(
        ValueError, match=r"`results\['rnn'\]` has no metric 'macro_f1'"
    ):
        viz.plot_metric_spread({"rnn": {"accuracy": [0.5]}})
    with pytest.raises(ValueError, match=r"`results\['rnn'\]\['accuracy'\]` is empty"):
        viz.plot_metric_spread({"rnn": {"accuracy": []}}, metrics=["accuracy"])
    with pytest.raises(ValueError, match="at least one model"):
        viz.plot_metric_spread({})


def test_upsample_attention_spreads_each_cell_evenly():
    weights = np.array([0.5, 0.25, 0.25, 0.0])
    heat = viz.upsample_attention(weights, (2, 2), (4, 6))
    assert heat.shape == (4, 6)
    assert heat.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(heat[:2, :3], 0.5 / 6)
    np.testing.assert_allclose(heat[2:, 3:], 0.0)
    with pytest.raises(ValueError, match=r"shape \(4,\) for a 2x2 grid"):
        viz.upsample_attention(np.ones(3), (2, 2), (4, 4))
    with pytest.raises(ValueError, match="divide into the 2x2 grid"):
        viz.upsample_attention(np.ones(4), (2, 2), (5, 4))


def test_plot_caption_attention_has_a_panel_per_word(tmp_path):
    image = np.random.default_rng(0).random((16, 16, 1))
    weights = np.eye(4)[:3]
    path = tmp_path / "overlay.png"
    fig = viz.plot_caption_attention(
        image, ["a", "bag", "[END]"], weights, (2, 2), path=path, boxes=[(0, 0, 8, 8)]
    )
    assert path.read_bytes().startswith(PNG_MAGIC)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["image", "a", "bag", "[END]"]
    with pytest.raises(ValueError, match="`words` has 2 labels"):
        viz.plot_caption_attention(image, ["a", "bag"], weights, (2, 2))


def test_plot_caption_grid_colors_matches(tmp_path):
    images = np.zeros((3, 8, 8))
    path = tmp_path / "grid.png"
    fig = viz.plot_caption_grid(
        images,
        ["a bag", "a top", "a coat"],
        path=path,
        references=[["a bag"], ["a shirt"], ["a coat", "the coat"]],
    )
    assert path.read_bytes().startswith(PNG_MAGIC)
    colors = [ax.title.get_color() for ax in fig.axes[:3]]
    assert colors == ["tab:green", "tab:red", "tab:green"]
    with pytest.raises(ValueError, match="one caption per image"):
        viz.plot_caption_grid(images, ["a bag"])


def test_plot_localization_titles_the_ratio(tmp_path):
    path = tmp_path / "localization.png"
    fig = viz.plot_localization([0.6, 0.4], [0.1, 0.1], path=path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert "5.0x" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="one length"):
        viz.plot_localization([0.5], [0.1, 0.2])


def test_plot_image_grid_lays_out_rows_with_titles(tmp_path):
    images = np.random.default_rng(0).random((20, 8, 8, 1)).astype("float32")
    fig = viz.plot_image_grid(
        images, tmp_path / "grid.png", columns=5, row_titles=list("abcd")
    )
    assert (tmp_path / "grid.png").exists()
    assert len(fig.axes) == 20
    assert [fig.axes[i].get_ylabel() for i in (0, 5, 10, 15)] == list("abcd")
    with pytest.raises(ValueError, match="3 labels for 4 rows"):
        viz.plot_image_grid(images, columns=5, row_titles=list("abc"))
    with pytest.raises(ValueError, match=r"\(N, H, W, 1 or 3\)"):
        viz.plot_image_grid(images[..., 0])


def test_plot_gan_history_draws_losses_logits_and_fid(tmp_path):
    history = {
        "d_loss": [1.5, 1.2, 1.1],
        "g_loss": [0.4, 0.6, 0.7],
        "d_real": [0.3, 0.5, 0.6],
        "d_fake": [-0.3, -0.5, -0.6],
        "fid": [90.0, 60.0, 40.0],
    }
    fig = viz.plot_gan_history(history, tmp_path / "losses.png")
    assert (tmp_path / "losses.png").exists()
    assert [ax.get_title() for ax in fig.axes] == [
        "hinge loss",
        "mean discriminator logit",
        "FID (lower is better)",
    ]
    assert (
        len(viz.plot_gan_history({k: history[k] for k in list(history)[:4]}).axes) == 2
    )
    with pytest.raises(ValueError, match="lacks"):
        viz.plot_gan_history({"d_loss": [1.0]})


def test_plot_self_attention_draws_a_map_per_query_point(tmp_path):
    images = np.zeros((2, 16, 16, 1), "float32")
    weights = np.full((2, 16, 16), 1 / 16, "float32")
    fig = viz.plot_self_attention(images, weights, [(0, 0), (3, 3)], tmp_path / "a.png")
    assert (tmp_path / "a.png").exists()
    assert len(fig.axes) == 2 * 3
    with pytest.raises(ValueError, match="outside the 4x4 map"):
        viz.plot_self_attention(images, weights, [(4, 0)])
    with pytest.raises(ValueError, match="square"):
        viz.plot_self_attention(images, weights[:, :15, :15], [(0, 0)])


def test_plot_curves_draws_a_line_per_run(tmp_path):
    fig = viz.plot_curves(
        {"attention": [50.0, 30.0], "no attention": [55.0, 35.0, 33.0]},
        tmp_path / "curves.png",
        ylabel="FID",
    )
    assert (tmp_path / "curves.png").exists()
    assert [line.get_label() for line in fig.axes[0].lines] == [
        "attention",
        "no attention",
    ]
    with pytest.raises(ValueError, match="empty"):
        viz.plot_curves({"a": []})


def test_plot_grouped_bars_draws_a_bar_per_group_and_series(tmp_path):
    fig = viz.plot_grouped_bars(
        ["dot", "additive", "multi_head"],
        {"ours": [1.0, 2.0, 3.0], "keras": [1.5, None, 2.5]},
        tmp_path / "bars.png",
        ylabel="ms",
    )
    assert (tmp_path / "bars.png").read_bytes().startswith(b"\x89PNG")
    bars = fig.axes[0].patches
    assert len(bars) == 6
    assert [round(bar.get_height(), 3) for bar in bars] == [1, 2, 3, 1.5, 0, 2.5]
    labels = [text.get_text() for text in fig.axes[0].get_xticklabels()]
    assert labels == ["dot", "additive", "multi_head"]
    with pytest.raises(ValueError, match="expected one per group"):
        viz.plot_grouped_bars(["a", "b"], {"ours": [1.0]})
    with pytest.raises(ValueError, match="must not be empty"):
        viz.plot_grouped_bars([], {})


def test_smooth_attention_keeps_the_total_and_peaks_at_the_attended_cell():
    weights = np.zeros(16)
    weights[5] = 1.0  # row 1, column 1 of a 4x4 grid
    heat = viz.smooth_attention(weights, (4, 4), (32, 32))
    assert heat.shape == (32, 32)
    assert heat.sum() == pytest.approx(1.0, rel=1e-5)
    row, column = np.unravel_index(np.argmax(heat), heat.shape)
    assert 8 <= row < 16 and 8 <= column < 16
    assert len(np.unique(heat[8:16, 8:16])) > 1  # smooth, not a flat block
    with pytest.raises(ValueError, match=r"must have shape \(16,\)"):
        viz.smooth_attention(np.ones(15), (4, 4), (32, 32))
