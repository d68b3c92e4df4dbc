"""Positions inside attention, computed with the package's functions: ALiBi's
bias for three of eight heads (`ops.alibi_bias`), T5's bucket map
(`ops.relative_position_buckets`), and the score of a fixed query and key
rotated by `RotaryEmbedding` as a function of their offset."""

import numpy as np

ALIBI_HEADS, ALIBI_SHOWN, ALIBI_LENGTH = 8, (0, 3, 7), 12
BUCKET_LENGTH = 160  # past T5's max_distance of 128
ROPE_DIM, ROPE_OFFSETS, ROPE_QUERY_POSITIONS = 64, np.arange(-100, 101), (100, 900)


def alibi():
    """`(ALIBI_HEADS, T, T)` bias and the slopes."""
    from keras import ops

    from keras_attention.ops import alibi_bias, alibi_slopes

    slopes = alibi_slopes(ALIBI_HEADS)
    return ops.convert_to_numpy(alibi_bias(slopes, ALIBI_LENGTH)), slopes


def buckets():
    """T5's buckets (32, max_distance 128, bidirectional), `(T, T)`."""
    from keras import ops

    from keras_attention.ops import relative_position_buckets

    return ops.convert_to_numpy(relative_position_buckets(BUCKET_LENGTH))


def rope_scores(query, key, query_position):
    """`q_m . k_n / (|q| |k|)` for the keys at `query_position + ROPE_OFFSETS`,
    both rotated by our layer."""
    from keras import ops

    from keras_attention.layers import RotaryEmbedding

    rope = RotaryEmbedding()
    q = rope(query[None, None], start_index=query_position)
    positions = query_position + ROPE_OFFSETS
    keys = np.broadcast_to(key, (1, len(positions), len(key)))
    k = rope(keys, positions=positions)
    q, k = ops.convert_to_numpy(q)[0, 0], ops.convert_to_numpy(k)[0]
    return k @ q / (np.linalg.norm(query) * np.linalg.norm(key))


def build(out_dir):
    from keras_attention.viz import pyplot

    plt = pyplot()
    bias, slopes = alibi()
    bucket_map = buckets()
    rng = np.random.default_rng(0)
    query, key = rng.normal(size=(2, ROPE_DIM)).astype("float32")
    ones = np.ones(ROPE_DIM, "float32")

    fig = plt.figure(figsize=(13, 7.6), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=(1, 1.15))
    axes = top.subplots(1, len(ALIBI_SHOWN))
    vmin = bias[list(ALIBI_SHOWN)].min()
    for ax, head in zip(axes, ALIBI_SHOWN, strict=True):
        image = ax.imshow(bias[head], cmap="magma", vmin=vmin, vmax=0)
        ax.set_title(
            f"ALiBi, head {head + 1} of {ALIBI_HEADS}: slope 1/{1 / slopes[head]:.0f}, "
            f"{bias[head].min():.2f} at |i - j| = {ALIBI_LENGTH - 1}",
            fontsize=9,
        )
        ax.set_xlabel("key position j", fontsize=8)
        ax.set_ylabel("query position i", fontsize=8)
        ax.tick_params(labelsize=7)
    top.colorbar(image, ax=axes, shrink=0.85, label="bias -slope * |i - j|")

    left, right = bottom.subplots(1, 2, width_ratios=(1, 2))
    ax = left
    image = ax.imshow(bucket_map, cmap="twilight_shifted", interpolation="nearest")
    ax.set_title(
        f"T5 buckets ({bucket_map.max() + 1}, max_distance 128), "
        f"{BUCKET_LENGTH} positions",
        fontsize=9,
    )
    ax.set_xlabel("key position j", fontsize=8)
    ax.set_ylabel("query position i", fontsize=8)
    ax.tick_params(labelsize=7)
    bottom.colorbar(image, ax=ax, shrink=0.85, label="bucket of j - i")

    ax = right
    for position, style in zip(ROPE_QUERY_POSITIONS, ("-", "--"), strict=True):
        ax.plot(
            ROPE_OFFSETS,
            rope_scores(query, key, position),
            style,
            label=f"random q, k; query at m = {position}",
        )
    ax.plot(
        ROPE_OFFSETS,
        rope_scores(ones, ones, ROPE_QUERY_POSITIONS[0]),
        color="gray",
        lw=1,
        label="q = k = (1, ..., 1): the long-term decay",
    )
    ax.axhline(0, color="gray", lw=0.5)
    ax.set_xlabel("offset n - m (key position - query position)", fontsize=9)
    ax.set_ylabel("(R_m q) . (R_n k) / (|q| |k|)", fontsize=9)
    ax.set_title(
        f"RoPE ({ROPE_DIM} features): the score of a fixed pair depends on n - m only",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")

    path = out_dir / "positions_in_attention-mechanisms.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
