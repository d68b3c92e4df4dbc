"""The `decode` part of the `gpu` suite: generation with the `decode` suite's
compiled searches: greedy with the Transformer's KV cache and without a
cache, and with the RNN's state; beam search of width `BEAM_WIDTH` for both
models; ms per decoding step (one token for each sequence of the batch) and
beam / greedy.
"""

import numpy as np

from keras_attention.bench.gpu_common import (
    SEQ2SEQ_FULL,
    SEQ2SEQ_QUICK,
    bars,
    build_seq2seq,
    describe_error,
    device_info,
    section_lines,
    set_case_policy,
    table_cell,
    time_in_turn,
)

FULL = {
    "batch_size": 32,
    "source_length": 64,
    "max_length": 256,
    **SEQ2SEQ_FULL,
}
QUICK = {
    "batch_size": 2,
    "source_length": 8,
    "max_length": 6,
    **SEQ2SEQ_QUICK,
}
# (model, search, cached): greedy with and without the Transformer's cache,
# and beam search of width `BEAM_WIDTH` (the ancestry search for the
# Transformer), each over the same sources.
BEAM_WIDTH = 4
DECODE_RUNS = (
    ("transformer", "greedy", True),
    ("transformer", "greedy", False),
    ("rnn-bahdanau", "greedy", True),
    ("transformer", "beam", True),
    ("rnn-bahdanau", "beam", True),
)


def decode_label(name, search, cached):
    """The key of one run (`DECODE_RUNS`) in the case's `runs`."""
    return f"{name}/{search}/{'cache' if cached else 'no_cache'}"


def case_decode(case):
    """Greedy and beam generation, each search compiled whole, timed in turn."""
    from keras_attention.bench.common import block
    from keras_attention.bench.decode import generate_function

    policy = set_case_policy(case)
    max_length, batch_size = case["max_length"], case["batch_size"]
    source = np.random.default_rng(0).integers(
        4, case["vocabulary_size"], (batch_size, case["source_length"])
    )
    source = source.astype("int32")
    rows, calls, models = {}, {}, {}
    for name, search, cached in DECODE_RUNS:
        label = decode_label(name, search, cached)
        try:
            if name not in models:
                models[name] = build_seq2seq(
                    name, case, case["source_length"], target_length=max_length
                )
            beam_width = BEAM_WIDTH if search == "beam" else 1
            generate = generate_function(
                models[name], search, cached, max_length, beam_width
            )
            block(generate(source))  # compiles; the warm-up
        except Exception as error:
            rows[label] = {"skipped": describe_error(error)}
            continue
        calls[label] = (generate, (source,))
    timings = time_in_turn(calls, case["repeats"], rows)
    for label, timing in timings.items():
        rows[label] = {
            **timing,
            "ms_per_step": 1e3 * timing["median_s"] / max_length,
            "tokens_per_s": batch_size * max_length / timing["median_s"],
        }
    return {
        "device": device_info(),
        "policy": policy,
        "rnn_units": case["rnn_units"],
        "runs": {decode_label(*run): rows[decode_label(*run)] for run in DECODE_RUNS},
    }


def summarize(results, ratios):
    """Adds the case's `device` to `results` (where no earlier part did) and
    the cache's speed-up, the Transformer against the RNN and beam search
    against greedy to `ratios`."""
    decode = results["cases"].get("decode", {})
    if "device" in decode and "device" not in results:
        results["device"] = decode["device"]
    runs = decode.get("runs", {})

    def ms(name, search="greedy", cached=True):
        return runs.get(decode_label(name, search, cached), {}).get("ms_per_step")

    cached, uncached, rnn = (
        ms("transformer"),
        ms("transformer", cached=False),
        ms("rnn-bahdanau"),
    )
    if cached and uncached:
        ratios["decode/transformer_cache_speedup"] = uncached / cached
    if cached and rnn:
        ratios["decode/transformer_vs_rnn_bahdanau_ms_per_step"] = cached / rnn
    for name, greedy in (("transformer", cached), ("rnn-bahdanau", rnn)):
        beam = ms(name, "beam")
        if greedy and beam:
            ratios[f"decode/{name}_beam{BEAM_WIDTH}_vs_greedy"] = beam / greedy


def markdown_lines(results, reasons):
    """The part's section of the suite's report (`reasons`: the report's
    footnotes of skipped cells, appended to)."""
    decode = results["cases"].get("decode", {})
    d = results["config"]["decode"]
    lines = section_lines(
        "Decoding",
        f"Width {d['width']}, batch {d['batch_size']}, source length "
        f"{d['source_length']}, {d['max_length']} steps, policy "
        f"{decode.get('policy', d['policy'])}; each search one compiled loop. "
        "A step generates one token for each sequence of the batch (beam "
        f"search: for each of its {BEAM_WIDTH} beams).",
        "| model | search | cache | ms per step | tokens/s |",
        "| --- | --- | --- | ---: | ---: |",
        decode,
        reasons,
    )
    for label, row in decode.get("runs", {}).items():
        name, search, cached = label.split("/")
        if "ms_per_step" in row:
            lines.append(
                f"| {name} | {search} | {cached} | {row['ms_per_step']:.3f} | "
                f"{row['tokens_per_s']:.0f} |"
            )
        else:
            lines.append(
                f"| {name} | {search} | {cached} | {table_cell(row, reasons)} | |"
            )
    return lines


def plot_panel(ax, results):
    """ms per step of each run."""
    runs = results["cases"].get("decode", {}).get("runs", {})
    bars(
        ax,
        list(runs),
        {"ms per step": [row.get("ms_per_step") for row in runs.values()]},
        "decoding, ms per step",
    )
