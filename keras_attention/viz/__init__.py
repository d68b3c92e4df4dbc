"""Figures of attention and of results, written to PNG with matplotlib (and
one self-contained HTML page of highlighted text).

matplotlib is the optional `apps` extra: `keras_attention` imports this
package on first use of `keras_attention.viz`. Its modules, by what they draw:

- `figures`: what every figure shares, `pyplot()` (matplotlib, headless,
  imported lazily), `save_figure(fig, path)` and `finish_figure(fig, path,
  title=None)` (a title, the layout, then `save_figure`).
- `heatmaps`: attention matrices, the sinusoidal position encoding, confusion
  matrices.
- `text`: attention over words, as HTML or as a figure.
- `images`: attention over images (caption overlays, SAGAN self-attention),
  image grids.
- `charts`: scores, training curves and benchmark bars.

Every public name is importable from `keras_attention.viz` itself.
"""

from keras_attention.viz.charts import (
    plot_curves,
    plot_gan_history,
    plot_grouped_bars,
    plot_learning_curves,
    plot_localization,
    plot_metric_spread,
    plot_score_by_length,
)
from keras_attention.viz.figures import finish_figure, pyplot, save_figure
from keras_attention.viz.heatmaps import (
    plot_attention,
    plot_confusion_matrix,
    plot_position_encoding,
)
from keras_attention.viz.images import (
    plot_caption_attention,
    plot_caption_grid,
    plot_image_grid,
    plot_self_attention,
    smooth_attention,
    upsample_attention,
)
from keras_attention.viz.text import highlight_html, plot_highlighted_text

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
    "plot_learning_curves",
    "plot_localization",
    "plot_metric_spread",
    "plot_position_encoding",
    "plot_score_by_length",
    "plot_self_attention",
    "pyplot",
    "finish_figure",
    "save_figure",
    "smooth_attention",
    "upsample_attention",
]
