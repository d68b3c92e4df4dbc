"""Attention heatmaps and other figures (being split into modules by what
they draw; everything is re-exported here)."""

from keras_attention.viz.text import (
    _pyplot as _pyplot,
)
from keras_attention.viz.text import (
    _save as _save,
)
from keras_attention.viz.text import (
    highlight_html,
    plot_attention,
    plot_caption_attention,
    plot_caption_grid,
    plot_confusion_matrix,
    plot_curves,
    plot_gan_history,
    plot_grouped_bars,
    plot_highlighted_text,
    plot_image_grid,
    plot_localization,
    plot_metric_spread,
    plot_position_encoding,
    plot_score_by_length,
    plot_self_attention,
    smooth_attention,
    upsample_attention,
)

__all__ = [
    "highlight_html",
    "plot_attention",
    "plot_caption_attention",
    "plot_caption_grid",
    "plot_confusion_matrix",
    "plot_curves",
    "plot_gan_history",
    "plot_grouped_bars",
    "plot_highlighted_text",
    "plot_image_grid",
    "plot_localization",
    "plot_metric_spread",
    "plot_position_encoding",
    "plot_score_by_length",
    "plot_self_attention",
    "smooth_attention",
    "upsample_attention",
]
