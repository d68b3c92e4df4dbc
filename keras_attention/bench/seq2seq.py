"""The `seq2seq` suite: Transformer against RNN baselines, as n and d grow.

- `train`: training throughput (target tokens per second of
  `model.train_on_batch`, one Adam step, XLA on) of the `Transformer`, the
  `RNNSeq2Seq` with Bahdanau attention and the `RNNSeq2Seq` without attention,
  for source = target length n and width d. The RNNs' `units` are chosen so
  that each model has the Transformer's parameter count (within 3%); every
  batch holds the same number of target tokens, so the batch shrinks as n
  grows.
- `layer`: forward+backward of one self-attention layer
  (`layers.MultiHeadAttention`, heads of 64) against one recurrent layer
  (`keras.layers.GRU`) of width d, the two rows of the seeds' complexity
  table, for n up to 4096 on a fixed batch of 4 sequences (a fixed batch, so
  that the time measures the work per sequence and not how well a batch that
  shrinks with n fills the machine).

From these it fits the exponent of time per sequence against n (all lengths,
and the upper half) and against d, prints them next to the table's
O(n^2 d) / O(n d^2), and finds the crossover length at which a self-attention
layer costs more per token than a recurrent one.

Usage: `python -m keras_attention.bench --suite seq2seq [--quick] [--out DIR]`.
"""

import numpy as np

from keras_attention.bench.common import (
    case_runner,
    describe,
    start_suite,
    write_report,
)
from keras_attention.utils.progress import phase

MODELS = ("transformer", "rnn-bahdanau", "rnn")
FULL = {
    "lengths": (16, 32, 64, 128, 256, 512),
    "widths": (128, 256, 512),
    "layer_lengths": (16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    "tokens_per_batch": 2048,
    "layer_batch_size": 4,
    "vocabulary_size": 1000,
    "repeats": 3,
}
QUICK = {
    "lengths": (8, 16),
    "widths": (32,),
    "layer_lengths": (8, 16),
    "tokens_per_batch": 64,
    "layer_batch_size": 2,
    "vocabulary_size": 50,
    "repeats": 2,
}
HEAD_DIM = 64


def build_model(
    name,
    width,
    length,
    vocabulary_size,
    units=None,
    dropout=0.1,
    target_length=None,
):
    """The benchmarked model `name` (one of `MODELS`) at width d = `width`:
    a Transformer with d_model d, heads of 64, 2 + 2 blocks and a 4d
    feed-forward; an RNN with d-wide embeddings and `units` units. Sources
    have up to `length` tokens, targets up to `target_length` (default
    `length`)."""
    target_length = target_length or length
    from keras_attention.models import RNNSeq2Seq, Transformer

    if name == "transformer":
        return Transformer(
            vocabulary_size,
            vocabulary_size,
            hidden_dim=width,
            num_heads=max(1, width // HEAD_DIM),
            intermediate_dim=4 * width,
            dropout=dropout,
            max_source_length=length,
            max_target_length=target_length,
        )
    return RNNSeq2Seq(
        vocabulary_size,
        vocabulary_size,
        embedding_dim=width,
        units=units,
        attention="none" if name == "rnn" else name[len("rnn-") :],
        dropout=dropout,
        max_source_length=length,
        max_target_length=target_length,
    )


def matched_units(name, width, vocabulary_size, parameters):
    """The RNN `units` (a multiple of 8) whose parameter count is closest to
    `parameters`. The count is a quadratic in `units` (recurrent and
    attention kernels are units x units), so three builds give it exactly."""

    def count(units):
        return build_model(name, width, 8, vocabulary_size, units).count_params()

    samples = (8, 16, 24)
    a, b, c = np.polyfit(samples, [count(u) for u in samples], 2)
    root = (-b + np.sqrt(b * b - 4 * a * (c - parameters))) / (2 * a)
    candidates = {max(8, 8 * int(np.floor(root / 8))), 8 * int(np.ceil(root / 8))}
    return min(candidates, key=lambda units: abs(count(units) - parameters))


def training_batch(batch_size, length, vocabulary_size, seed=0):
    """Random token ids (no padding): `(inputs, labels)` for `train_on_batch`."""
    rng = np.random.default_rng(seed)

    def ids():
        return rng.integers(4, vocabulary_size, (batch_size, length), dtype="int32")

    return {"encoder_token_ids": ids(), "decoder_token_ids": ids()}, ids()


def compile_for_training(model, jit_compile):
    import keras

    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )


def _case_train(case):
    from keras_attention.bench.common import time_call

    length, width = case["length"], case["width"]
    batch_size = max(1, case["tokens_per_batch"] // length)
    model = build_model(
        case["model"], width, length, case["vocabulary_size"], case.get("units")
    )
    compile_for_training(model, case.get("jit_compile", True))
    inputs, labels = training_batch(batch_size, length, case["vocabulary_size"])
    timing = time_call(model.train_on_batch, inputs, labels, repeats=case["repeats"])
    return {
        **timing,
        "batch_size": batch_size,
        "parameters": model.count_params(),
        "tokens_per_s": batch_size * length / timing["median_s"],
        "per_sequence_s": timing["median_s"] / batch_size,
    }


def _case_layer(case):
    import keras

    from keras_attention.bench.common import jit, layer_value_and_grad, time_call
    from keras_attention.layers import MultiHeadAttention

    length, width, batch_size = case["length"], case["width"], case["batch_size"]
    if case["layer"] == "self_attention":
        layer = MultiHeadAttention(
            num_heads=max(1, width // HEAD_DIM), key_dim=min(HEAD_DIM, width)
        )

        def forward(x):
            return layer(x, x)
    else:
        layer = keras.layers.GRU(width, return_sequences=True)
        forward = layer
    x = keras.ops.convert_to_tensor(
        np.random.default_rng(0)
        .normal(size=(batch_size, length, width))
        .astype("float32")
    )
    forward(x)
    step = jit(layer_value_and_grad(layer, forward))
    timing = time_call(
        step, [v.value for v in layer.trainable_variables], x, repeats=case["repeats"]
    )
    return {
        **timing,
        "batch_size": batch_size,
        "per_sequence_s": timing["median_s"] / batch_size,
        "per_token_s": timing["median_s"] / (batch_size * length),
    }


CASES = {"train": _case_train, "layer": _case_layer}


def run(quick=False, out="runs/bench", timeout=1800):
    """Runs the suite, prints its tables, writes `seq2seq.json`, `seq2seq.md`
    and `seq2seq.png` under `out`; returns the results."""
    config, results = start_suite("seq2seq", quick, FULL, QUICK)
    results["parameters"] = {}
    vocabulary_size = config["vocabulary_size"]
    for width in config["widths"]:
        phase(f"matching parameter counts at d={width}")
        target = build_model("transformer", width, 8, vocabulary_size).count_params()
        results["parameters"][f"transformer/{width}"] = {"parameters": target}
        for name in MODELS[1:]:
            units = matched_units(name, width, vocabulary_size, target)
            params = build_model(name, width, 8, vocabulary_size, units).count_params()
            results["parameters"][f"{name}/{width}"] = {
                "units": units,
                "parameters": params,
            }
    plan = []
    for width in config["widths"]:
        for length in config["lengths"]:
            for name in MODELS:
                case = {
                    "kind": "train",
                    "model": name,
                    "width": width,
                    "length": length,
                    "units": results["parameters"][f"{name}/{width}"].get("units"),
                    "tokens_per_batch": config["tokens_per_batch"],
                    "vocabulary_size": vocabulary_size,
                    "repeats": config["repeats"],
                }
                plan.append((f"train/{name}/{width}/{length}", case))
        for length in config["layer_lengths"]:
            for layer in ("self_attention", "recurrent"):
                case = {
                    "kind": "layer",
                    "layer": layer,
                    "width": width,
                    "length": length,
                    "batch_size": config["layer_batch_size"],
                    "repeats": config["repeats"],
                }
                plan.append((f"layer/{layer}/{width}/{length}", case))
    measure = case_runner("seq2seq", CASES, results, out, timeout, isolated=not quick)
    for key, case in plan:
        phase(f"{key.replace('/', ' ')}")
        measure(key, case)
    summarize(results)
    write_report(results, out, "seq2seq", markdown(results), plot)
    return results


def _series(results, prefix, width, lengths, field="per_sequence_s"):
    """`(lengths, values)` of the cases `prefix/width/n` that ran."""
    xs, ys = [], []
    for length in lengths:
        value = results["cases"].get(f"{prefix}/{width}/{length}", {}).get(field)
        if value:
            xs.append(length)
            ys.append(value)
    return xs, ys


def summarize(results):
    """Adds `exponents`, `ratios` and `crossover` to `results`."""
    from keras_attention.bench.common import fit_exponent

    config = results["config"]
    exponents, ratios, crossover = {}, {}, {}
    series = [(f"train/{name}", config["lengths"]) for name in MODELS]
    series += [
        (f"layer/{layer}", config["layer_lengths"])
        for layer in ("self_attention", "recurrent")
    ]
    for prefix, lengths in series:
        for width in config["widths"]:
            xs, ys = _series(results, prefix, width, lengths)
            upper = len(xs) // 2
            exponents[f"{prefix}/n/d{width}"] = fit_exponent(xs, ys)
            exponents[f"{prefix}/n_upper/d{width}"] = fit_exponent(
                xs[upper:], ys[upper:]
            )
        for length in lengths:
            widths, ys = [], []
            for width in config["widths"]:
                value = results["cases"].get(f"{prefix}/{width}/{length}", {})
                if value.get("per_sequence_s"):
                    widths.append(width)
                    ys.append(value["per_sequence_s"])
            exponents[f"{prefix}/d/n{length}"] = fit_exponent(widths, ys)
    for width in config["widths"]:
        for length in config["lengths"]:
            speeds = {
                name: results["cases"]
                .get(f"train/{name}/{width}/{length}", {})
                .get("tokens_per_s")
                for name in MODELS
            }
            if speeds["transformer"] and speeds["rnn-bahdanau"]:
                ratios[f"transformer_vs_rnn_bahdanau/d{width}/n{length}"] = (
                    speeds["transformer"] / speeds["rnn-bahdanau"]
                )
            if speeds["transformer"] and speeds["rnn"]:
                ratios[f"transformer_vs_rnn/d{width}/n{length}"] = (
                    speeds["transformer"] / speeds["rnn"]
                )
        # Compared over the lengths both layers ran (a long case may have been
        # skipped for memory).
        attention, recurrent = (
            dict(
                zip(
                    *_series(
                        results, prefix, width, config["layer_lengths"], "per_token_s"
                    ),
                    strict=True,
                )
            )
            for prefix in ("layer/self_attention", "layer/recurrent")
        )
        both = [n for n in config["layer_lengths"] if n in attention and n in recurrent]
        if both:
            crossover[f"d{width}"] = crossover_length(
                both, [attention[n] for n in both], [recurrent[n] for n in both]
            )
    results.update(exponents=exponents, ratios=ratios, crossover=crossover)


def crossover_length(lengths, attention, recurrent):
    """The length from which `attention` per token stays above `recurrent`
    per token, interpolated on log axes between the last measured length
    where it is not and the next; None if it is not above at the longest
    length measured."""
    ratio = np.log(np.asarray(attention) / np.asarray(recurrent))
    if ratio[-1] <= 0:
        return None
    below = np.flatnonzero(ratio <= 0)
    if not len(below):
        return float(lengths[0])
    i = below[-1]
    x0, x1 = np.log(lengths[i]), np.log(lengths[i + 1])
    fraction = -ratio[i] / (ratio[i + 1] - ratio[i])
    return float(np.exp(x0 + fraction * (x1 - x0)))


def _fmt(value, pattern="{:.2f}"):
    return "n/a" if value is None else pattern.format(value)


def markdown(results):
    config, exponents = results["config"], results["exponents"]
    m = results["machine"]
    lines = [
        f"Machine: {describe(m)}. XLA on; median of {config['repeats']} steps after "
        "warm-up.",
        "",
        "### Training throughput (target tokens/s)",
        "",
        "| d | n | transformer | rnn-bahdanau | rnn | transformer / rnn-bahdanau |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for width in config["widths"]:
        for length in config["lengths"]:
            cells = []
            for name in MODELS:
                case = results["cases"].get(f"train/{name}/{width}/{length}", {})
                cells.append(
                    f"{case['tokens_per_s']:.0f}"
                    if "tokens_per_s" in case
                    else f"skipped ({case.get('skipped', 'not run')})"
                )
            ratio = results["ratios"].get(
                f"transformer_vs_rnn_bahdanau/d{width}/n{length}"
            )
            lines.append(
                f"| {width} | {length} | " + " | ".join(cells) + f" | {_fmt(ratio)} |"
            )
    lines += [
        "",
        "Parameters: "
        + "; ".join(
            f"d={width}: "
            + ", ".join(
                f"{name} {results['parameters'][f'{name}/{width}']['parameters']:,}"
                + (
                    f" (units {results['parameters'][f'{name}/{width}']['units']})"
                    if name != "transformer"
                    else ""
                )
                for name in MODELS
            )
            for width in config["widths"]
        ),
        "",
        "### Fitted exponents against the seeds' complexity table",
        "",
        "Time per sequence ~ n^a at fixed d (all lengths / upper half of the "
        "lengths) and ~ d^b at fixed n (mean over n). Layers: a fixed batch of "
        f"{config['layer_batch_size']} sequences. Training steps: a fixed "
        f"{config['tokens_per_batch']} target tokens per batch, so the batch "
        "shrinks as n grows and the RNNs' n sequential steps each get fewer "
        "rows to work on.",
        "",
        "| what | table | a (all n) | a (upper n) | b |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows = (
        ("layer/self_attention", "self-attention layer", "O(n^2 d): a -> 2, b = 1"),
        ("layer/recurrent", "recurrent layer (GRU)", "O(n d^2): a = 1, b = 2"),
        ("train/transformer", "Transformer training step", ""),
        ("train/rnn-bahdanau", "RNN + Bahdanau training step", ""),
        ("train/rnn", "RNN training step", ""),
    )
    for prefix, label, table in rows:
        lengths = config["layer_lengths" if prefix.startswith("layer") else "lengths"]
        b_values = [
            exponents.get(f"{prefix}/d/n{length}")
            for length in lengths
            if exponents.get(f"{prefix}/d/n{length}") is not None
        ]
        all_n = ", ".join(
            f"{_fmt(exponents.get(f'{prefix}/n/d{w}'))} (d={w})"
            for w in config["widths"]
        )
        upper_n = ", ".join(
            _fmt(exponents.get(f"{prefix}/n_upper/d{w}")) for w in config["widths"]
        )
        b = _fmt(float(np.mean(b_values)) if b_values else None)
        lines.append(f"| {label} | {table} | {all_n} | {upper_n} | {b} |")
    lines += [
        "",
        "### Crossover (self-attention layer costlier per token than GRU)",
        "",
    ]
    for width in config["widths"]:
        value = results["crossover"].get(f"d{width}")
        lines.append(
            f"- d={width}: "
            + (
                f"n = {value:.0f}"
                if value
                else f"not reached up to n = {config['layer_lengths'][-1]}"
            )
        )
    return "\n".join(lines) + "\n"


def plot(results, path):
    from keras_attention.viz import pyplot, save_figure

    plt = pyplot()
    config, exponents = results["config"], results["exponents"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    colors = {
        "transformer": "C0",
        "rnn-bahdanau": "C1",
        "rnn": "C2",
        "self_attention": "C0",
        "recurrent": "C3",
    }
    styles = dict(zip(config["widths"], ("o-", "s--", "^:"), strict=False))
    panels = (
        (axes[0], "train", MODELS, config["lengths"], "training step"),
        (
            axes[1],
            "layer",
            ("self_attention", "recurrent"),
            config["layer_lengths"],
            "one layer, forward+backward",
        ),
    )
    for ax, kind, names, lengths, title in panels:
        for name in names:
            for width in config["widths"]:
                xs, ys = _series(results, f"{kind}/{name}", width, lengths)
                if xs:
                    slope = exponents.get(f"{kind}/{name}/n/d{width}")
                    ax.plot(
                        xs,
                        ys,
                        styles.get(width, "o-"),
                        color=colors[name],
                        label=f"{name} d={width} (slope {_fmt(slope)})",
                    )
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("time per sequence (s)")
    for width in config["widths"]:
        xs = [
            n
            for n in config["lengths"]
            if f"transformer_vs_rnn_bahdanau/d{width}/n{n}" in results["ratios"]
        ]
        ys = [
            results["ratios"][f"transformer_vs_rnn_bahdanau/d{width}/n{n}"] for n in xs
        ]
        if xs:
            axes[2].plot(xs, ys, styles.get(width, "o-"), label=f"d={width}")
    axes[2].axhline(1.0, color="gray", lw=0.8)
    axes[2].set_title("Transformer / RNN+Bahdanau training tokens/s", fontsize=10)
    axes[2].set_ylabel("throughput ratio")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    m = results["machine"]
    fig.suptitle(f"XLA: {describe(m)}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
