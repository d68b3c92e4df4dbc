"""Heatmaps: attention matrices, the position encoding, confusion matrices."""

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
