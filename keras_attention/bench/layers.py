"""The `layers` suite: each attention layer against its nearest Keras layer.

Forward+backward (gradients of the weights and the input), XLA on, of every
attention layer of `keras_attention.layers` and of the Keras layer a user
would otherwise reach for, on the same input:

- `DotProductAttention` / `keras.layers.Attention()`: the same computation.
- `DotProductAttention(scale=True)` / `keras.layers.Attention(use_scale=True)`:
  a fixed 1/sqrt(d) against a learned scalar.
- `MultiplicativeAttention` / `keras.layers.Attention()`: ours adds the W of
  Luong's general score.
- `CosineAttention` / `keras.layers.Attention()`: ours normalizes.
- `AdditiveAttention` / `keras.layers.AdditiveAttention()`: ours projects the
  query and the keys (Bahdanau's W_1, W_2).
- `LocationAttention` / `keras.layers.Attention()`: ours scores from the query
  alone.
- `MultiHeadAttention` / `keras.layers.MultiHeadAttention`: the same.
- `AttentionPooling` / `keras.layers.GlobalAveragePooling1D`: Keras has no
  attention pooling; this is the pooling it replaces.
- `SelfAttention2D` / a 1-head `keras.layers.MultiHeadAttention` over the
  flattened map: ours adds the 1x1 convolutions and the SAGAN gate.

Usage: `python -m keras_attention.bench --suite layers [--quick] [--out DIR]`.
"""

import numpy as np

from keras_attention.bench.common import (
    case_runner,
    describe,
    start_suite,
    write_report,
)
from keras_attention.utils.progress import phase

FULL = {"batch_size": 16, "length": 128, "width": 256, "image": 32, "repeats": 5}
QUICK = {"batch_size": 2, "length": 8, "width": 16, "image": 8, "repeats": 2}
PAIRS = (
    "dot_product",
    "scaled_dot_product",
    "multiplicative",
    "cosine",
    "additive",
    "location",
    "multi_head",
    "attention_pooling",
    "self_attention_2d",
)


def build_pair(name, quick=False):
    """`((ours, forward, x), (keras_layer, forward, x))` for the pair `name`:
    each layer, the function of `x` that calls it, and the input."""
    import keras

    from keras_attention import layers

    config = QUICK if quick else FULL
    batch, length, width = config["batch_size"], config["length"], config["width"]
    rng = np.random.default_rng(0)
    shape = (batch, length, width)
    if name == "self_attention_2d":
        shape = (batch, config["image"], config["image"], width // 4)
    x = keras.ops.convert_to_tensor(rng.normal(size=shape).astype("float32"))

    def attend(layer):
        return layer, lambda x: layer([x, x]), x

    pairs = {
        "dot_product": lambda: (layers.DotProductAttention(), keras.layers.Attention()),
        "scaled_dot_product": lambda: (
            layers.DotProductAttention(scale=True),
            keras.layers.Attention(use_scale=True),
        ),
        "multiplicative": lambda: (
            layers.MultiplicativeAttention(),
            keras.layers.Attention(),
        ),
        "cosine": lambda: (layers.CosineAttention(), keras.layers.Attention()),
        "additive": lambda: (
            layers.AdditiveAttention(),
            keras.layers.AdditiveAttention(),
        ),
        "location": lambda: (
            layers.LocationAttention(max_length=length),
            keras.layers.Attention(),
        ),
    }
    if name in pairs:
        ours, theirs = pairs[name]()
        pair = attend(ours), attend(theirs)
    elif name == "multi_head":
        heads = max(1, width // 64)
        key_dim = min(64, width)
        ours = layers.MultiHeadAttention(num_heads=heads, key_dim=key_dim)
        theirs = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=key_dim)
        pair = (ours, lambda x: ours(x, x), x), (theirs, lambda x: theirs(x, x), x)
    elif name == "attention_pooling":
        ours, theirs = layers.AttentionPooling(), keras.layers.GlobalAveragePooling1D()
        pair = (ours, ours, x), (theirs, theirs, x)
    elif name == "self_attention_2d":
        channels = shape[-1]
        ours = layers.SelfAttention2D()
        key_dim = max(1, channels // 8)
        # SAGAN's values are C/2 wide; Keras' MultiHeadAttention on JAX calls
        # jax.nn.dot_product_attention, which needs values as wide as keys.
        value_dim = key_dim if keras.backend.backend() == "jax" else channels // 2
        theirs = keras.layers.MultiHeadAttention(
            num_heads=1, key_dim=key_dim, value_dim=value_dim
        )

        def flattened(x):
            tokens = keras.ops.reshape(x, (batch, -1, channels))
            return theirs(tokens, tokens)

        pair = (ours, ours, x), (theirs, flattened, x)
    else:
        raise ValueError(f"`name` must be one of {PAIRS}; received {name!r}.")
    for _, forward, inputs in pair:
        forward(inputs)  # builds the weights
    return pair


def _case_pair(case):
    from keras_attention.bench.common import jit, layer_value_and_grad, time_call

    result = {}
    for side, (layer, forward, x) in zip(
        ("ours", "keras"), build_pair(case["pair"], case["quick"]), strict=True
    ):
        step = jit(layer_value_and_grad(layer, forward))
        result[side] = time_call(
            step,
            [v.value for v in layer.trainable_variables],
            x,
            repeats=case["repeats"],
        )
    result["time_ratio"] = result["ours"]["median_s"] / result["keras"]["median_s"]
    return result


CASES = {"pair": _case_pair}


def run(quick=False, out="runs/bench", timeout=900):
    """Runs the suite, prints its table, writes `layers.json`, `layers.md`
    and `layers.png` under `out`; returns the results."""
    config, results = start_suite("layers", quick, FULL, QUICK)
    measure = case_runner("layers", CASES, results, out, timeout, isolated=not quick)
    for name in PAIRS:
        phase(f"{name}: ours vs keras")
        measure(
            name,
            {
                "kind": "pair",
                "pair": name,
                "quick": quick,
                "repeats": config["repeats"],
            },
        )
    write_report(results, out, "layers", markdown(results), plot)
    return results


def markdown(results):
    config, m = results["config"], results["machine"]
    lines = [
        f"Machine: {describe(m)}. XLA on, forward+backward, batch "
        f"{config['batch_size']}, {config['length']} queries and keys of width "
        f"{config['width']} ({config['image']}x{config['image']}x"
        f"{config['width'] // 4} maps for SelfAttention2D); median of "
        f"{config['repeats']} (min-max).",
        "",
        "| layer | ours ms | keras ms | ours / keras |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, case in results["cases"].items():
        if "skipped" in case:
            lines.append(f"| {name} | skipped: {case['skipped']} | | |")
            continue
        cells = [
            f"{1e3 * t['median_s']:.2f} ({1e3 * t['min_s']:.2f}-{1e3 * t['max_s']:.2f})"
            for t in (case["ours"], case["keras"])
        ]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {case['time_ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(results, path):
    from keras_attention.viz import plot_grouped_bars

    names = [n for n, c in results["cases"].items() if "time_ratio" in c]
    plot_grouped_bars(
        names,
        {
            side: [1e3 * results["cases"][n][side]["median_s"] for n in names]
            for side in ("ours", "keras")
        },
        path,
        ylabel="forward+backward (ms)",
        title=f"XLA: {describe(results['machine'])}",
    )
