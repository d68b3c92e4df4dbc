import numpy as np
import pytest

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
