"""The `seq2seq` part of the `gpu` suite: training tokens/s of the
`Transformer` and the `RNNSeq2Seq` with Bahdanau attention of the `seq2seq`
suite (width 512, parameter counts matched, mixed bfloat16, `jit_compile`),
n = 128 and 512, 16,384 target tokens per batch, timed in turn.
"""

import time

from keras_attention.bench.gpu_common import (
    SEQ2SEQ_FULL,
    SEQ2SEQ_QUICK,
    bars,
    build_seq2seq,
    case_seconds,
    describe_error,
    device_info,
    section_lines,
    set_case_policy,
    table_cell,
    time_in_turn,
)

FULL = {
    "lengths": (128, 512),
    "tokens_per_batch": 16384,
    **SEQ2SEQ_FULL,
}
QUICK = {
    # One n: each compiles both models' train steps (most of the part).
    "lengths": (8,),
    "tokens_per_batch": 64,
    **SEQ2SEQ_QUICK,
}


def case_seq2seq(case):
    """Transformer against RNN + Bahdanau, training steps timed in turn."""
    from keras_attention.bench.seq2seq import compile_for_training, training_batch

    start, seconds = time.monotonic(), case_seconds()
    result = {
        "device": device_info(),
        "policy": set_case_policy(case),
        "parameters": {},
        "rnn_units": case["rnn_units"],
        "lengths": {},
    }
    for length in case["lengths"]:
        if seconds is not None and time.monotonic() - start > seconds:
            result["lengths"][str(length)] = {
                "skipped": "the suite's time budget was spent"
            }
            continue
        batch_size = max(1, case["tokens_per_batch"] // length)
        inputs, labels = training_batch(batch_size, length, case["vocabulary_size"])
        rows, calls = {}, {}
        for name in ("transformer", "rnn-bahdanau"):
            try:
                model = build_seq2seq(name, case, length)
                compile_for_training(model, jit_compile=True)
                model.train_on_batch(inputs, labels)  # compiles; the warm-up
            except Exception as error:
                rows[name] = {"skipped": describe_error(error)}
                continue
            result["parameters"].setdefault(name, model.count_params())
            calls[name] = (model.train_on_batch, (inputs, labels))
        timings = time_in_turn(calls, case["repeats"], rows)
        for name, timing in timings.items():
            rows[name] = {
                **timing,
                "tokens_per_s": batch_size * length / timing["median_s"],
            }
        result["lengths"][str(length)] = {"batch_size": batch_size, **rows}
    return result


def summarize(results, ratios):
    """Adds the case's `device` to `results` (where no earlier part did) and
    the Transformer's tokens/s over the RNN's, per n, to `ratios`."""
    seq2seq = results["cases"].get("seq2seq", {})
    if "device" in seq2seq and "device" not in results:
        results["device"] = seq2seq["device"]
    for length, rows in seq2seq.get("lengths", {}).items():
        a = rows.get("transformer", {}).get("tokens_per_s")
        b = rows.get("rnn-bahdanau", {}).get("tokens_per_s")
        if a and b:
            ratios[f"seq2seq/transformer_vs_rnn_bahdanau_tokens_per_s/n{length}"] = (
                a / b
            )


def markdown_lines(results, reasons):
    """The part's section of the suite's report (`reasons`: the report's
    footnotes of skipped cells, appended to)."""
    seq2seq = results["cases"].get("seq2seq", {})
    s = results["config"]["seq2seq"]
    lines = section_lines(
        "Seq2seq training, target tokens/s",
        f"Width {s['width']}, vocabulary {s['vocabulary_size']}, "
        f"{s['tokens_per_batch']} target tokens per batch, policy "
        f"{seq2seq.get('policy', s['policy'])}, `jit_compile`; parameters "
        + ", ".join(f"{k} {v:,}" for k, v in seq2seq.get("parameters", {}).items())
        + (f" (RNN units {seq2seq['rnn_units']})" if "rnn_units" in seq2seq else "")
        + ".",
        "| n | batch | transformer | rnn-bahdanau | transformer / rnn-bahdanau |",
        "| ---: | ---: | ---: | ---: | ---: |",
        seq2seq,
        reasons,
    )
    for length, rows in seq2seq.get("lengths", {}).items():
        cells = []
        for name in ("transformer", "rnn-bahdanau"):
            row = rows.get(name, {"skipped": rows.get("skipped", "not run")})
            cells.append(
                f"{row['tokens_per_s']:.0f}"
                if "tokens_per_s" in row
                else table_cell(row, reasons)
            )
        ratio = results["ratios"].get(
            f"seq2seq/transformer_vs_rnn_bahdanau_tokens_per_s/n{length}"
        )
        lines.append(
            f"| {length} | {rows.get('batch_size', '')} | "
            + " | ".join(cells)
            + f" | {'n/a' if ratio is None else f'{ratio:.2f}'} |"
        )
    return lines


def plot_panel(ax, results):
    """Each model's training tokens/s, per n."""
    seq2seq = results["cases"].get("seq2seq", {}).get("lengths", {})
    bars(
        ax,
        [f"n={n}" for n in seq2seq],
        {
            name: [rows.get(name, {}).get("tokens_per_s") for rows in seq2seq.values()]
            for name in ("transformer", "rnn-bahdanau")
        },
        "training target tokens/s",
    )
