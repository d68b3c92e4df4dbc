"""Charts of results: scores by source length, scores over seeds, GAN
training curves, metric curves, grouped bars for benchmarks and the
localization histogram of caption attention."""

import numpy as np

from keras_attention.viz.figures import finish_figure, pyplot, save_figure

# The factor between neighbouring models' positions at one size of a learning
# curve (on its log axis, a fixed distance).
LEARNING_CURVE_DODGE = 1.05


def plot_score_by_length(results, path=None, metric="bleu", title=None):
    """Score against source length, one line per model, like the BLEU vs
    sentence length figure of Bahdanau et al. (2015).

    Args:
        results: `{model_name: {bucket_label: {metric: value, "count": n}}}`,
            the `by_length` entries of translation metrics; buckets in order.
        path: where to write the PNG; None to skip.
        metric: the score to plot (`"bleu"`, `"chrf"` or `"exact_match"`).
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    if not results:
        raise ValueError("`results` must name at least one model.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, buckets in results.items():
        labels = list(buckets)
        ax.plot(
            range(len(labels)),
            [buckets[label][metric] for label in labels],
            marker="o",
            label=name,
        )
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels)
    ax.set_xlabel("Source length (words)")
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} by source length")
    ax.grid(alpha=0.3)
    ax.legend()
    return finish_figure(fig, path)


def plot_metric_spread(
    results, metrics=("accuracy", "macro_f1"), path=None, title=None
):
    """Grouped bar chart of scores over several seeds: one group per model,
    one bar per metric at the mean, an error bar of one (population) standard
    deviation, and every seed's value as a dot.

    Args:
        results: `{model_name: {metric_name: [value per seed, ...]}}`; groups
            follow the order of the keys.
        metrics: the metrics to draw, one bar each (in this order).
        path: where to write the PNG (folders are created); None to skip.
        title: figure title.

    Returns:
        The matplotlib figure (its axis holds one bar container per metric).
    """
    if isinstance(metrics, str):
        metrics = (metrics,)
    metrics = list(metrics)
    if not metrics:
        raise ValueError("`metrics` must name at least one metric; received none.")
    if not results:
        raise ValueError("`results` must name at least one model; received none.")
    values = {}
    for model, scores in results.items():
        for metric in metrics:
            if metric not in scores:
                raise ValueError(
                    f"`results[{model!r}]` has no metric {metric!r}; it has "
                    f"{sorted(scores)}, expected every metric of {metrics}."
                )
            seeds = np.asarray(scores[metric], dtype="float64").reshape(-1)
            if seeds.size == 0:
                raise ValueError(
                    f"`results[{model!r}][{metric!r}]` is empty; expected at "
                    "least one value (one per seed)."
                )
            if not np.all(np.isfinite(seeds)):
                raise ValueError(
                    f"`results[{model!r}][{metric!r}]` holds non-finite values: "
                    f"{seeds.tolist()}."
                )
            values[model, metric] = seeds
    plt = pyplot()
    models = list(results)
    fig, ax = plt.subplots(
        figsize=(max(4.0, 0.5 * len(models) * len(metrics) + 2.0), 4.0)
    )
    bar_width = 0.8 / len(metrics)
    centers = np.arange(len(models))
    for position, metric in enumerate(metrics):
        offsets = centers + (position - (len(metrics) - 1) / 2) * bar_width
        means = [values[model, metric].mean() for model in models]
        spreads = [values[model, metric].std() for model in models]
        ax.bar(
            offsets,
            means,
            bar_width * 0.9,
            yerr=spreads,
            capsize=3,
            label=metric,
            alpha=0.85,
        )
        for offset, model in zip(offsets, models, strict=True):
            seeds = values[model, metric]
            jitter = np.linspace(-0.2, 0.2, seeds.size) if seeds.size > 1 else [0.0]
            ax.scatter(
                offset + np.asarray(jitter) * bar_width,
                seeds,
                s=12,
                color="black",
                zorder=3,
            )
    ax.set_xticks(centers)
    ax.set_xticklabels(models)
    ax.set_ylabel("score (mean ± std over seeds)")
    ax.set_title(title or "Scores over seeds")
    ax.grid(axis="y", alpha=0.3)
    everything = np.concatenate(list(values.values()))
    low, high = min(0.0, everything.min()), max(0.0, everything.max())
    ax.set_ylim(low, high + 0.2 * max(high - low, 1e-9))  # room for the legend
    ax.legend(loc="upper right", ncol=len(metrics), frameon=False)
    return finish_figure(fig, path)


def plot_localization(in_box, chance, path=None, title=None):
    """The distribution of the attention mass inside the named object's box,
    against the box's share of the image (the chance level).

    Args:
        in_box: per named word, the share of its attention inside the box.
        chance: per named word, the box's area over the image's.
        path: where to write the PNG; None to skip.
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    plt = pyplot()
    in_box = np.asarray(in_box, "float32")
    chance = np.asarray(chance, "float32")
    if in_box.shape != chance.shape or in_box.ndim != 1 or not len(in_box):
        raise ValueError(
            "`in_box` and `chance` must be non-empty 1-D arrays of one length; "
            f"received shapes {in_box.shape} and {chance.shape}."
        )
    fig, ax = plt.subplots(figsize=(6, 3.6))
    bins = np.linspace(0, 1, 21)
    ax.hist(in_box, bins=bins, alpha=0.7, label="attention inside the box")
    ax.hist(chance, bins=bins, alpha=0.7, label="box share of the image (chance)")
    ax.axvline(in_box.mean(), color="tab:blue", linestyle="--")
    ax.axvline(chance.mean(), color="tab:orange", linestyle="--")
    ax.set_xlabel("share of the image / of the attention")
    ax.set_ylabel("named words")
    ax.legend(frameon=False)
    ax.set_title(
        title
        or f"mean {in_box.mean():.2f} inside vs {chance.mean():.2f} chance "
        f"({in_box.mean() / max(chance.mean(), 1e-12):.1f}x)"
    )
    return finish_figure(fig, path)


def plot_gan_history(history, path=None, title=None):
    """The training curves of a GAN, one point per epoch: the hinge losses
    of both networks and their mean logits on real and generated images, and
    FID when the history has it.

    Args:
        history: `{"d_loss": [...], "g_loss": [...], "d_real": [...],
            "d_fake": [...], "fid": [...] (optional)}`, one value per epoch.
        path: where to write the PNG; None to skip.
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    required = ("d_loss", "g_loss", "d_real", "d_fake")
    missing = [k for k in required if k not in history]
    if missing:
        raise ValueError(
            f"`history` lacks {missing}; it has {sorted(history)}, expected "
            f"every one of {list(required)}."
        )
    plt = pyplot()
    panels = 3 if history.get("fid") else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.2))
    epochs = np.arange(1, len(history["d_loss"]) + 1)
    for key, label in (("d_loss", "discriminator"), ("g_loss", "generator")):
        axes[0].plot(epochs, history[key], marker="o", label=label)
    axes[0].set_title("hinge loss")
    for key, label in (("d_real", "D(real)"), ("d_fake", "D(generated)")):
        axes[1].plot(epochs, history[key], marker="o", label=label)
    axes[1].set_title("mean discriminator logit")
    if panels == 3:
        axes[2].plot(epochs, history["fid"], marker="o", color="tab:green")
        axes[2].set_title("FID (lower is better)")
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.legend(frameon=False)
    return finish_figure(fig, path, title)


def plot_curves(curves, path=None, xlabel="epoch", ylabel=None, title=None):
    """Lines of a metric over epochs, one per run (e.g. FID per epoch of
    every model and seed of an ablation).

    Args:
        curves: `{label: [value per epoch, ...]}`; epochs count from 1.
        path: where to write the PNG; None to skip.
        xlabel: x-axis label.
        ylabel: y-axis label.
        title: figure title.

    Returns:
        The matplotlib figure.
    """
    if not curves:
        raise ValueError("`curves` must hold at least one curve; received none.")
    empty = [label for label, values in curves.items() if not len(values)]
    if empty:
        raise ValueError(f"Curves {empty} are empty; expected a value per epoch.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for label, values in curves.items():
        ax.plot(np.arange(1, len(values) + 1), values, marker="o", label=label)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return finish_figure(fig, path)


def plot_grouped_bars(groups, series, path=None, ylabel=None, title=None, log=True):
    """Bars side by side per group, one colour per series (benchmark
    comparisons such as ours vs Keras per layer).

    Args:
        groups: the x-axis labels.
        series: `{label: [value per group, ...]}`; None or 0 draws no bar.
        path: where to write the PNG; None to skip.
        ylabel: y-axis label.
        title: figure title.
        log: logarithmic y axis.

    Returns:
        The matplotlib figure.
    """
    if not groups or not series:
        raise ValueError("`groups` and `series` must not be empty.")
    for label, values in series.items():
        if len(values) != len(groups):
            raise ValueError(
                f"Series {label!r} has {len(values)} values; expected one per "
                f"group ({len(groups)})."
            )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) + 2), 4.0))
    width = 0.8 / len(series)
    positions = np.arange(len(groups))
    for i, (label, values) in enumerate(series.items()):
        heights = [value or 0.0 for value in values]
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar(positions + offset, heights, width, label=label)
    ax.set_xticks(positions, groups, rotation=30, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    if path:
        save_figure(fig, path)
    return fig


def plot_learning_curves(panels, path=None, title=None, references=None):
    """Scores against the number of labelled examples (log scale), one panel
    per score: a line per model through the means over seeds, a vertical bar
    for the interval around each mean and every seed's value as a dot. At
    each size the models stand side by side (shifted by a few percent), so
    that their intervals and seeds stay apart even with a single size.

    Args:
        panels: `{score label: {model label: {size: {"values": [...],
            "interval": [low, high]}}}}` (sizes as ints or strings of ints);
            panels and lines follow the order of the keys.
        path: where to write the PNG; None to skip.
        title: figure title.
        references: optional `{score label: (value, label)}`: a dashed line
            across a panel (e.g. the score of always guessing the most
            frequent class).

    Returns:
        The matplotlib figure, one axis per panel.
    """
    if not panels:
        raise ValueError("`panels` must hold at least one score; received none.")
    plt = pyplot()
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False
    )
    for ax, (ylabel, curves) in zip(axes[0], panels.items(), strict=True):
        if not curves:
            raise ValueError(
                f"`panels[{ylabel!r}]` must hold at least one model; received none."
            )
        all_sizes = set()
        for index, (label, points) in enumerate(curves.items()):
            if not points:
                raise ValueError(
                    f"`panels[{ylabel!r}][{label!r}]` has no point; expected sizes."
                )
            sizes = sorted(points, key=int)
            counts = [int(size) for size in sizes]
            all_sizes.update(counts)
            shift = LEARNING_CURVE_DODGE ** (index - (len(curves) - 1) / 2)
            x = shift * np.array(counts, "float64")
            means = np.array([np.mean(points[size]["values"]) for size in sizes])
            low, high = np.array([points[size]["interval"] for size in sizes]).T
            (line,) = ax.plot(x, means, marker="o", label=label)
            ax.vlines(x, low, high, color=line.get_color(), linewidth=2.5, alpha=0.5)
            for size, position in zip(sizes, x, strict=True):
                values = points[size]["values"]
                ax.scatter(
                    np.full(len(values), position),
                    values,
                    s=9,
                    color=line.get_color(),
                    alpha=0.6,
                    zorder=3,
                )
        if references and ylabel in references:
            value, label = references[ylabel]
            ax.axhline(value, color="gray", linestyle="--", linewidth=1, label=label)
        ax.set_xscale("log")
        ticks = sorted(all_sizes)
        ax.set_xticks(ticks, [f"{size:,}" for size in ticks])
        ax.minorticks_off()
        # Two dodge steps of room beyond the outermost models.
        room = LEARNING_CURVE_DODGE ** ((len(curves) + 3) / 2)
        ax.set_xlim(ticks[0] / room, ticks[-1] * room)
        ax.set_xlabel("labelled training examples")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=8)
    return finish_figure(fig, path, title)
