"""The `decode` suite: generation speed, Transformer against RNN.

Generated tokens per second of greedy and beam search (the package's
compiled `decoding.greedy_search` / `decoding.model_beam_search`, as
`generate` runs them: `ancestry_beam_search` for the Transformer, which
gathers no cache, the generic `beam_search` for the RNN; XLA on) for the
`Transformer` and the `RNNSeq2Seq` with Bahdanau attention of the `seq2seq`
suite (same width, matched parameter counts), each:

- with its cache: the Transformer's per-block keys and values, the RNN's
  state, so each step costs one position;
- without a cache (greedy search only): every step runs the whole model over
  the source and the (padded) prefix and keeps the logits at the current
  position, which is what calling the model in a loop does.

Every search runs the full `max_length` steps (no end token can stop it), so
the work is the same for every model. Usage:
`python -m keras_attention.bench --suite decode [--quick] [--out DIR]`.
"""

import numpy as np

from keras_attention.bench.common import (
    case_runner,
    describe,
    start_suite,
    write_report,
)
from keras_attention.utils.progress import phase

MODELS = ("transformer", "rnn-bahdanau")
SEARCHES = ("greedy", "beam")
FULL = {
    "width": 256,
    "source_length": 32,
    "max_length": 128,
    "batch_size": 16,
    "beam_width": 4,
    "vocabulary_size": 1000,
    "repeats": 3,
}
QUICK = {
    "width": 32,
    "source_length": 8,
    "max_length": 6,
    "batch_size": 2,
    "beam_width": 2,
    "vocabulary_size": 50,
    "repeats": 2,
}
NO_END_TOKEN = -1
# Beam search without a cache costs beam_width x greedy's uncached minutes and
# shows nothing greedy's does not: only greedy runs both ways.
CACHED = {"greedy": (True, False), "beam": (True,)}


def uncached_step(model, encoder_token_ids, max_length):
    """`(step_fn, cache)` that decode without a cache: the cache only carries
    the source and the tokens so far, and every step runs the whole model."""
    from keras import ops

    batch_size = ops.shape(encoder_token_ids)[0]
    cache = {
        "encoder_token_ids": encoder_token_ids,
        "prefix": ops.zeros((batch_size, max_length), "int32"),
    }

    def step_fn(token_ids, cache, index):
        prefix = ops.slice_update(
            cache["prefix"], [0, index], ops.cast(token_ids, "int32")[:, None]
        )
        logits = model(
            {
                "encoder_token_ids": cache["encoder_token_ids"],
                "decoder_token_ids": prefix,
            },
            training=False,
        )
        rows, _, vocabulary = ops.shape(logits)
        logits = ops.slice(logits, [0, index, 0], [rows, 1, vocabulary])[:, 0]
        return logits, {**cache, "prefix": prefix}

    return step_fn, cache


def generate_function(model, search, cached, max_length, beam_width):
    """The compiled `encoder_token_ids -> tokens` search that the case times."""
    from keras import ops

    from keras_attention.decoding import (
        beam_search,
        greedy_search,
        model_beam_search,
    )
    from keras_attention.utils.backend import compile_function

    def generate(encoder_token_ids):
        if cached and search == "beam":  # as `generate` searches
            return model_beam_search(
                model, encoder_token_ids, max_length, beam_width, end_id=NO_END_TOKEN
            )
        if cached:
            step_fn = model.decode_step
            cache = model.initial_cache(encoder_token_ids, max_length)
        else:
            step_fn, cache = uncached_step(model, encoder_token_ids, max_length)
        args = (
            step_fn,
            cache,
            ops.shape(encoder_token_ids)[0],
            max_length,
            model.start_token_id,
            NO_END_TOKEN,
        )
        if search == "greedy":
            return greedy_search(*args, model=model)
        return beam_search(*args, beam_width=beam_width)

    return compile_function(
        generate, [*model.trainable_variables, *model.non_trainable_variables]
    )


def _case_generate(case):
    from keras_attention.bench.common import time_call
    from keras_attention.bench.seq2seq import build_model

    model = build_model(
        case["model"],
        case["width"],
        case["source_length"],
        case["vocabulary_size"],
        case.get("units"),
        target_length=case["max_length"],
    )
    source = np.random.default_rng(0).integers(
        4, case["vocabulary_size"], (case["batch_size"], case["source_length"])
    )
    source = source.astype("int32")
    generate = generate_function(
        model, case["search"], case["cached"], case["max_length"], case["beam_width"]
    )
    timing = time_call(generate, source, repeats=case["repeats"])
    tokens = case["batch_size"] * case["max_length"]
    return {**timing, "tokens_per_s": tokens / timing["median_s"]}


CASES = {"generate": _case_generate}


def run(quick=False, out="runs/bench", timeout=1800):
    """Runs the suite, prints its table, writes `decode.json`, `decode.md` and
    `decode.png` under `out`; returns the results."""
    from keras_attention.bench.seq2seq import build_model, matched_units

    config, results = start_suite("decode", quick, FULL, QUICK)
    measure = case_runner("decode", CASES, results, out, timeout, isolated=not quick)
    width, vocabulary_size = config["width"], config["vocabulary_size"]
    phase(f"matching parameter counts at d={width}")
    target = build_model("transformer", width, 8, vocabulary_size).count_params()
    units = {
        "transformer": None,
        "rnn-bahdanau": matched_units("rnn-bahdanau", width, vocabulary_size, target),
    }
    results["config"]["rnn_units"] = units["rnn-bahdanau"]
    for name in MODELS:
        for search in SEARCHES:
            for cached in CACHED[search]:
                label = f"{name}/{search}/{'cache' if cached else 'no_cache'}"
                phase(f"generate {label}")
                measure(
                    label,
                    {
                        "kind": "generate",
                        "model": name,
                        "units": units[name],
                        "search": search,
                        "cached": cached,
                        **config,
                    },
                )
    summarize(results)
    write_report(results, out, "decode", markdown(results), plot)
    return results


def _speed(results, label):
    return results["cases"].get(label, {}).get("tokens_per_s")


def summarize(results):
    """Adds `ratios` to `results`: the cache's speed-up, Transformer over RNN,
    and the cost of beam search over greedy."""
    ratios = {}
    for search in SEARCHES:
        for name in MODELS:
            cache = _speed(results, f"{name}/{search}/cache")
            no_cache = _speed(results, f"{name}/{search}/no_cache")
            if cache and no_cache:
                ratios[f"cache_speedup/{name}/{search}"] = cache / no_cache
        for cached in ("cache", "no_cache"):
            ours = _speed(results, f"transformer/{search}/{cached}")
            rnn = _speed(results, f"rnn-bahdanau/{search}/{cached}")
            if ours and rnn:
                ratios[f"transformer_vs_rnn/{search}/{cached}"] = ours / rnn
    for name in MODELS:
        greedy = _speed(results, f"{name}/greedy/cache")
        beam = _speed(results, f"{name}/beam/cache")
        if greedy and beam:
            ratios[f"greedy_vs_beam/{name}"] = greedy / beam
    results["ratios"] = ratios


def markdown(results):
    config, m = results["config"], results["machine"]
    lines = [
        f"Machine: {describe(m)}. XLA on; d={config['width']} (RNN units "
        f"{config['rnn_units']}), batch {config['batch_size']}, source length "
        f"{config['source_length']}, {config['max_length']} tokens generated, "
        f"beam width {config['beam_width']}; median of {config['repeats']}.",
        "",
        "| model | search | cache | tokens/s | median ms (min-max) |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for label, case in results["cases"].items():
        name, search, cached = label.split("/")
        if "skipped" in case:
            lines.append(
                f"| {name} | {search} | {cached} | skipped: {case['skipped']} | |"
            )
            continue
        lines.append(
            f"| {name} | {search} | {cached} | {case['tokens_per_s']:.0f} | "
            f"{1e3 * case['median_s']:.1f} ({1e3 * case['min_s']:.1f}-"
            f"{1e3 * case['max_s']:.1f}) |"
        )
    lines += ["", "| ratio | value |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.2f} |" for k, v in results["ratios"].items()]
    return "\n".join(lines) + "\n"


def plot(results, path):
    from keras_attention.viz import plot_grouped_bars

    groups = [(name, search) for name in MODELS for search in SEARCHES]
    plot_grouped_bars(
        [f"{name} {search}" for name, search in groups],
        {
            cached: [
                _speed(results, f"{name}/{search}/{cached}") for name, search in groups
            ]
            for cached in ("cache", "no_cache")
        },
        path,
        ylabel="generated tokens/s",
        title=f"XLA: {describe(results['machine'])}",
    )
