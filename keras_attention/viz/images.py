"""Attention over images: grid attention spread onto pixels, caption
attention overlays (Xu et al., 2015), SAGAN self-attention maps, and grids of
images with or without captions."""

import math

import numpy as np

from keras_attention.viz.figures import _check_labels, _to_matrix, pyplot, save_figure


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
    plt = pyplot()
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
        save_figure(fig, path)
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

    plt = pyplot()
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
        save_figure(fig, path)
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
    plt = pyplot()
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
        save_figure(fig, path)
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
    plt = pyplot()
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
        save_figure(fig, path)
    return fig
