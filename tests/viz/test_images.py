"""Attention over images: upsampling and smoothing, caption overlays,
SAGAN self-attention maps, image grids."""

import numpy as np
import pytest

from keras_attention import viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
