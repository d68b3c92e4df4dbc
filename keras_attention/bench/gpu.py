"""The `gpu` suite: one run of about 8 minutes on one GPU, on the JAX backend.

One module per part, each importing `gpu_common` and none of the others;
this one runs them in turn and writes the report.

- `paths`: the path table's training workloads (`gpu_paths`, its
  docstring): our layers with Keras masks, dropout, grouped-query heads, a
  soft cap and packed documents, bfloat16 and float32, against our standard
  path, Keras' layer, `jax.nn`'s cuDNN and tokamax; every fused output
  checked against the standard path's.
- `attention`: attention forward + backward (`gpu_attention`, its
  docstring) in bfloat16, T = S from 1024 to 32768, batch x T held at
  32,768 tokens, 16 heads of 128, without and with a causal mask: our
  standard and chunked paths against `keras.ops`' flash attention,
  `jax.nn`'s cuDNN and XLA implementations and PyTorch's SDPA, as ms per
  step and the fraction of the chip's dense bfloat16 peak (`PEAK_FLOPS`,
  or `--peak-tflops`).
- `seq2seq`: training tokens/s of the `Transformer` and the `RNNSeq2Seq` with
  Bahdanau attention of the `seq2seq` suite (`gpu_seq2seq`; width 512,
  parameter counts matched, mixed bfloat16, `jit_compile`), n = 128 and
  512, 16,384 target tokens per batch, timed in turn.
- `decode`: generation with the `decode` suite's compiled searches
  (`gpu_decode`): greedy with the Transformer's KV cache and without a
  cache, and with the RNN's state; beam search for both models; ms per
  decoding step (one token for each sequence of the batch) and beam / greedy.
- `flex`: flexible attention on the fused kernels (`gpu_flex`, its
  docstring): our `MultiHeadAttention` against Keras' (same weights, mixed
  bfloat16, cuDNN on both sides where it serves), and our
  `ops.dot_product_attention(..., flash_attention=True)` with a soft cap, a
  causal window, packed documents, ALiBi and T5's bias (the Pallas kernel)
  against the plain cuDNN call and against `keras.ops` with the dense mask
  or bias; T = 1024 to 32,768 and one causal case at 131,072.

Each part has a share of the time budget (`budgets_s` of `FULL`, what one
part leaves goes to the next); a case that would start past its part's share is recorded
as skipped, and a part that fails is recorded without stopping the others.
Every case runs in a process of its own on the JAX backend, with JAX's
preallocation off. Usage: `python -m keras_attention.bench --suite gpu
[--quick] [--out DIR] [--peak-tflops 989]`; `benchmarks/gpu.sh` runs it on a
GPU machine. `--quick` is a dry run on a CPU (about a minute, mostly
start-up and compiling): T = 64 and 128, seq2seq at n = 8 only,
float32 there, tiny models (the flex part: T = 64, and T = 128 as its long
case; the paths part: T = 512, float32).
"""

import importlib.util
import json
import os
import time

from keras_attention.bench import (
    gpu_attention,
    gpu_decode,
    gpu_flex,
    gpu_paths,
    gpu_seq2seq,
)
from keras_attention.bench.common import describe

# The names marked F401 were this module's before the suite was split into
# its parts: importable from here as before.
from keras_attention.bench.gpu_attention import (
    IMPLS,  # noqa: F401
    MASKS,  # noqa: F401
    MATERIALIZING,  # noqa: F401
    PEERS,  # noqa: F401
)
from keras_attention.bench.gpu_common import (
    FLOPS_FORMULA,
    SECONDS_VARIABLE,
    attention_flops,  # noqa: F401
    compile_steps,  # noqa: F401
    describe_error,
)
from keras_attention.bench.gpu_decode import (
    BEAM_WIDTH,  # noqa: F401
    DECODE_RUNS,  # noqa: F401
    decode_label,  # noqa: F401
)
from keras_attention.utils.progress import phase

# The dense bfloat16 peak of an H100 / H200 SXM (989.4 TFLOP/s without
# sparsity); other chips need `--peak-tflops`.
PEAK_FLOPS = 989e12
PEAK_DEVICES = ("H100", "H200")
# Below this many seconds left in its part's share a case is not started.
MIN_CASE_S = 10
# A case may run this long past its part's share before its process is killed.
GRACE_S = 60

FULL = {
    "attention": gpu_attention.FULL,
    "seq2seq": gpu_seq2seq.FULL,
    "decode": gpu_decode.FULL,
    "flex": gpu_flex.FULL,
    "paths": gpu_paths.FULL,
    # Seconds of each part, in order; 8 minutes in all.
    "budgets_s": {
        "paths": 180,
        "attention": 120,
        "seq2seq": 45,
        "decode": 35,
        "flex": 100,
    },
}
QUICK = {
    "attention": gpu_attention.QUICK,
    "seq2seq": gpu_seq2seq.QUICK,
    "decode": gpu_decode.QUICK,
    "flex": gpu_flex.QUICK,
    "paths": gpu_paths.QUICK,
    "budgets_s": {
        "paths": 600,
        "attention": 600,
        "seq2seq": 600,
        "decode": 600,
        "flex": 600,
    },
}
# The paths part first (its checks matter most); the flex part last: what
# the others leave of their shares goes to it.
PARTS = ("paths", "attention", "seq2seq", "decode", "flex")

CASES = {
    "attention": gpu_attention.case_attention,
    "seq2seq": gpu_seq2seq.case_seq2seq,
    "decode": gpu_decode.case_decode,
    "flex": gpu_flex.case_flex,
    "paths": gpu_paths.case_paths,
}


def case_environment(seconds):
    """The environment of a case's process: the JAX backend, JAX allocating
    as it goes (not 75% of the GPU at start, which would starve PyTorch and
    the next process), and the case's share of the time budget."""
    env = {**os.environ, "KERAS_BACKEND": "jax", SECONDS_VARIABLE: f"{seconds:.0f}"}
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def run(quick=False, out="runs/bench", timeout=None, peak_flops=None):
    """Runs the suite, prints its tables, writes `gpu.json`, `gpu.md` and
    `gpu.png` under `out`; returns the results.

    Args:
        quick: the dry run on a CPU (about a minute).
        out: the output folder.
        timeout: the most seconds one case's process may take (default: its
            part's share of the budget plus `GRACE_S`).
        peak_flops: the chip's dense bfloat16 FLOP/s that the fractions
            divide by (default `PEAK_FLOPS`, an H100 / H200 SXM's).
    """
    from keras_attention.bench.common import (
        _write_json,
        earlier_cases,
        new_results,
        run_case,
        write_report,
    )

    # Before this process asks JAX for its devices (the machine's record):
    # a parent holding 75% of the GPU would leave the cases a quarter.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    config = QUICK if quick else FULL
    results = new_results("gpu", quick, config)
    results["peak_flops"] = float(peak_flops or PEAK_FLOPS)
    results["peak_given"] = peak_flops is not None
    results["flops_formula"] = FLOPS_FORMULA
    earlier = earlier_cases(out, results)
    path = os.path.join(out, "gpu.json")
    started = time.monotonic()
    deadline = started

    def measure(key, case):
        # As the JSON holds it (lists, not tuples), to compare with a
        # case of an earlier run.
        case = json.loads(json.dumps(case))
        left = deadline - time.monotonic()
        if left < MIN_CASE_S:
            result = {"skipped": "the suite's time budget was spent", "case": case}
        else:
            limit = timeout or left + GRACE_S
            began = time.monotonic()
            result = run_case(
                "gpu",
                CASES,
                case,
                limit,
                True,
                earlier.get(key),
                case_environment(left),
            )
            # The case's process from start to end (imports, compilations).
            result.setdefault("wall_s", time.monotonic() - began)
        results["cases"][key] = result
        _write_json(results, path)
        return result

    has_torch = importlib.util.find_spec("torch") is not None
    for part in PARTS:
        deadline += config["budgets_s"][part]
        try:
            if part == "attention":
                gpu_attention.attention_part(
                    measure, config["attention"], quick, has_torch
                )
            elif part == "flex":
                gpu_flex.flex_part(measure, config["flex"], quick)
            elif part == "paths":
                gpu_paths.paths_part(measure, config["paths"], quick)
            else:
                phase(f"{part}: {PART_TITLES[part]}")
                measure(part, {"kind": part, **config[part]})
        except Exception as error:  # one part's failure leaves the others
            results["cases"][part] = {"skipped": f"error: {describe_error(error)}"}
    results["elapsed_s"] = time.monotonic() - started
    summarize(results)
    write_report(results, out, "gpu", markdown(results), plot)
    return results


PART_TITLES = {
    "seq2seq": "Transformer vs RNN + Bahdanau training tokens/s",
    "decode": "greedy and beam decoding",
}


def summarize(results):
    """Adds `device`, `fractions` (of the peak, per part, row and T) and
    `ratios` (each part's, see its module) to `results`."""
    fractions, ratios = {}, {}
    gpu_attention.summarize(results, fractions, ratios)
    gpu_seq2seq.summarize(results, ratios)
    gpu_decode.summarize(results, ratios)
    gpu_flex.summarize(results, fractions, ratios)
    gpu_paths.summarize(results, ratios)
    results["fractions"] = fractions
    results["ratios"] = ratios


def _skipped_lines(reasons):
    return [f"[{i}] {reason}" for i, reason in enumerate(reasons, 1)]


def markdown(results):
    config, m = results["config"], results["machine"]
    device = results.get("device", {})
    kind = device.get("device_kind", "no case reported its device")
    assumed = ""
    if not results.get("peak_given") and not any(d in kind for d in PEAK_DEVICES):
        assumed = " (an H100/H200 SXM's, not this device's: pass --peak-tflops)"
    lines = [
        f"Machine: {describe(m)}. Cases on the JAX backend"
        + (f" (jax {device['jax']})" if "jax" in device else "")
        + f", device: {kind}; {results.get('elapsed_s', 0):.0f} s in all.",
    ]
    reasons = []
    lines += gpu_attention.markdown_lines(results, reasons, assumed)
    lines += gpu_seq2seq.markdown_lines(results, reasons)
    lines += gpu_decode.markdown_lines(results, reasons)
    if "flex" in config:
        lines += gpu_flex.markdown_lines(results, reasons)
    if "paths" in config:
        lines += gpu_paths.markdown_lines(results, reasons)
    if reasons:
        lines += ["", "Skipped:", ""] + [
            f"- {line}" for line in _skipped_lines(reasons)
        ]
    lines += ["", "| ratio | value |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.3f} |" for k, v in results["ratios"].items()]
    walls = [
        f"{key} {case['wall_s']:.0f}"
        for key, case in results["cases"].items()
        if "wall_s" in case
    ]
    if walls:
        lines += [
            "",
            "Seconds per case's process (start-up and compiling "
            "included): " + ", ".join(walls) + ".",
        ]
    return "\n".join(lines) + "\n"


def plot(results, path):
    from keras_attention.viz import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 6, figsize=(30, 4.5))
    fraction_ax, time_ax, seq2seq_ax, decode_ax, flex_ax, paths_ax = axes
    gpu_attention.plot_panels(fraction_ax, time_ax, results)
    gpu_seq2seq.plot_panel(seq2seq_ax, results)
    gpu_decode.plot_panel(decode_ax, results)
    gpu_flex.plot_panel(flex_ax, results)
    gpu_paths.plot_panel(paths_ax, results)
    device = results.get("device", {}).get("device_kind", "")
    fig.suptitle(f"JAX, {device}: {describe(results['machine'])}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
