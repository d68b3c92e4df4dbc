"""Charts of results: scores by length and over seeds, the localization
histogram, GAN history, curves, grouped bars."""

import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer

from keras_attention import viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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


def test_plot_localization_titles_the_ratio(tmp_path):
    path = tmp_path / "localization.png"
    fig = viz.plot_localization([0.6, 0.4], [0.1, 0.1], path=path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert "5.0x" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="one length"):
        viz.plot_localization([0.5], [0.1, 0.2])


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


def test_learning_curves_draw_a_line_and_interval_bars_per_model(tmp_path):
    from keras_attention.viz import plot_learning_curves

    curves = {
        name: {
            str(size): {
                "values": [offset + 0.1 * i, offset + 0.1 * i + 0.02],
                "interval": [offset + 0.1 * i - 0.05, offset + 0.1 * i + 0.07],
            }
            for i, size in enumerate((100, 1000, 300))
        }
        for name, offset in (("pretrained", 0.5), ("scratch", 0.4))
    }
    fig = plot_learning_curves(
        {"accuracy": curves, "macro-F1": curves},
        path=tmp_path / "curve.png",
        references={"macro-F1": (0.4, "most frequent class")},
    )
    first, second = fig.axes
    assert [line.get_label() for line in first.get_lines()] == [
        "pretrained",
        "scratch",
    ]
    # Sizes in order along a log axis, through the means; the two models side
    # by side around each size, the same factor from it on either side.
    left, right = (line.get_xdata() for line in first.get_lines())
    np.testing.assert_allclose(np.sqrt(left * right), [100, 300, 1000])
    np.testing.assert_allclose(right / left, 1.05)
    np.testing.assert_allclose(first.get_lines()[1].get_ydata(), [0.41, 0.61, 0.51])
    assert first.get_xscale() == "log"
    np.testing.assert_allclose(first.get_xticks(), [100, 300, 1000])
    assert len(first.collections) == 2 + 2 * 3  # two sets of bars, six seed clouds
    # Each interval bar spans its interval, at its model's position.
    bars = first.collections[-4]  # scratch's bars, then its three seed clouds
    segments = np.array(bars.get_segments())
    np.testing.assert_allclose(segments[:, 0, 0], right)
    np.testing.assert_allclose(
        segments[:, :, 1], [[0.35, 0.47], [0.55, 0.67], [0.45, 0.57]]
    )
    assert (first.get_ylabel(), second.get_ylabel()) == ("accuracy", "macro-F1")
    # The reference line only where it is given.
    assert second.get_lines()[-1].get_label() == "most frequent class"
    assert len(first.get_lines()) == 2
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_learning_curves_need_a_model_with_points():
    from keras_attention.viz import plot_learning_curves

    with pytest.raises(ValueError, match="at least one score"):
        plot_learning_curves({})
    with pytest.raises(ValueError, match="at least one model"):
        plot_learning_curves({"accuracy": {}})
    with pytest.raises(ValueError, match="has no point"):
        plot_learning_curves({"accuracy": {"empty": {}}})
