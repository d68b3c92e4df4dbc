"""The `attention` suite: our attention against Keras', XLA on, forward+backward.

- `ops`, `ops_causal`: `keras_attention.ops.dot_product_attention` (standard
  and chunked) against `keras.ops.dot_product_attention`, B=1, 8 heads of 64,
  T = S up to 65,536 (the chunked path alone past 8192 on a CPU), without and
  with a causal mask (GFLOP/s count the full square either way).
- `mha`: `keras_attention.layers.MultiHeadAttention` against
  `keras.layers.MultiHeadAttention`, width 512, 8 heads, 4096 tokens per batch
  (weights and input gradients).
- `grid`: `MultiHeadAttention` against Keras' on the cases users train,
  causal and not, widths 256 and 512 (8 heads), T from 128 to 8192 (4096
  tokens per batch, at least one sequence), float32 and mixed bfloat16. Each
  case is one process that times ours, Keras' and a 2048^3 matmul in turn
  (`time_alternating`), so that its ratios come from the same minutes.
- `matmul`: a 2048^3 float32 matmul in the same run, the yardstick for the
  fraction of this machine's GFLOP/s that attention reaches.
- `decode`: 128 tokens through 4 decoder blocks of width 256 for 16
  sequences, the whole loop compiled: ours with its KV cache against keras-hub's
  `TransformerDecoder` with its cache (in turn, in one process), ours without
  a cache (the whole padded prefix re-run at every step), the per-token
  time that the step's multiply-adds would take at the matmul yardstick's
  rate, and the step's dense layers alone in the same loop (the floor that
  small matmuls set); with 4 heads (`decode`) and 8 (`decode_heads8`).

Each case runs in its own process so that its peak memory is its own; the
cases are `attention_cases`' functions, this module runs them and reports.
Usage: `python -m keras_attention.bench --suite attention [--quick] [--out DIR]`.
"""

# The names marked F401 were this module's before its cases moved to
# attention_cases: importable from here as before.
from keras_attention.bench.attention_cases import (
    CASES,
    CHUNK,  # noqa: F401
    GRID_TOKENS,
    HEAD_DIM,  # noqa: F401
    HEADS,
    MATMUL_SIZE,  # noqa: F401
    WIDTH,  # noqa: F401
    decode_flops,  # noqa: F401
    grid_key,
    mha_flops,  # noqa: F401
)
from keras_attention.bench.common import describe, finish_axes, fit_exponent

FULL_LENGTHS = (128, 512, 2048, 4096, 8192, 16384, 32768, 65536)
QUICK_LENGTHS = (128, 256)
GRID = {
    "lengths": (128, 256, 512, 1024, 2048, 4096, 8192),
    "widths": (256, 512),
    "causal": (False, True),
    "dtypes": ("float32", "bfloat16"),
}
QUICK_GRID = {
    "lengths": (128,),
    "widths": (256,),
    "causal": (False, True),
    "dtypes": ("float32",),
}
DECODE = {
    "kind": "decode",
    "batch": 16,
    "width": 256,
    "heads": 4,
    "blocks": 4,
    "steps": 128,
    "repeats": 5,
}
QUICK_DECODE = {**DECODE, "batch": 2, "width": 32, "blocks": 2, "steps": 8}
# The decode case at both head counts of issue 37's side-by-side.
DECODE_CASES = {"decode": 4, "decode_heads8": 8}
# The sliding window of the `ops_window` cases (causal, chunked): its time
# should grow as T * WINDOW, against T^2 for the full causal chunked path.
WINDOW, QUICK_WINDOW = 256, 32
# The standard path keeps B*N*T*S float32 scores (and their gradient) alive:
# above this length that alone exceeds half of a 24 GiB machine.
STANDARD_MAX_LENGTH = 8192


def run(quick=False, out="runs/bench", timeout=3600):
    """Runs the suite, prints the ratios, writes `attention.json`,
    `attention.md` and `attention.png` under `out`; returns the results."""
    import importlib.util

    from keras_attention.bench.common import (
        accelerator,
        case_runner,
        new_results,
        write_report,
    )
    from keras_attention.utils.progress import phase

    lengths = QUICK_LENGTHS if quick else FULL_LENGTHS
    repeats = 2 if quick else 5
    # An accelerator computes attention in bfloat16, the dtype it is built for;
    # the yardstick is then its bfloat16 matmul rate.
    on_accelerator = accelerator() is not None
    dtype = "bfloat16" if on_accelerator else "float32"
    results = new_results("attention", quick)
    results["dtype"] = dtype
    results["window"] = QUICK_WINDOW if quick else WINDOW
    # Every case of a full run in its own process, so that each reports its
    # own peak memory; a quick run (CI's) measures in this one, where the
    # start-ups would dominate, and reports a case's memory only where its
    # peak rose above the process's.
    measure = case_runner("attention", CASES, results, out, timeout, isolated=not quick)

    phase(f"matmul yardstick ({dtype})")
    size = 2048 if quick or not on_accelerator else 8192
    matmul = measure(
        "matmul", {"kind": "matmul", "size": size, "dtype": dtype, "repeats": repeats}
    )
    results["matmul_gflops"] = matmul.get("gflops")

    ops_impls = ("keras", "ours", "ours_chunked")
    if importlib.util.find_spec("torch") is not None:
        ops_impls += ("torch_sdpa",)
    rows = []
    for length in lengths:
        for kind, impls in (
            ("ops", ops_impls),
            ("ops_causal", ("keras", "ours", "ours_chunked")),
            ("ops_window", ("ours_chunked",)),
            ("mha", ("keras", "ours")),
        ):
            if kind == "mha" and length > 4096:
                continue
            # A quick run measures every kind at its first length and, at
            # the next, only the window cases that its exponent fit needs
            # (the quick run is a smoke test: each case costs a compile).
            if quick and length != lengths[0] and kind != "ops_window":
                continue
            for impl in impls:
                if (
                    not on_accelerator
                    and impl != "ours_chunked"
                    and kind in ("ops", "ops_causal")
                    and length > STANDARD_MAX_LENGTH
                ):
                    result = {
                        "skipped": "the (T, S) scores alone need "
                        f"{length * length * HEADS * 4 / 2**30:.0f} GiB; "
                        "not run on this machine"
                    }
                    results["cases"][f"{kind}/{impl}/{length}"] = result
                else:
                    phase(f"{kind} {impl} T={length}")
                    case = {
                        "kind": "ops" if kind.startswith("ops") else kind,
                        "impl": impl,
                        "length": length,
                        "dtype": dtype,
                        "causal": kind in ("ops_causal", "ops_window"),
                        "repeats": _repeats(length, repeats),
                    }
                    if impl == "torch_sdpa":
                        case["kind"] = "torch_sdpa"
                    if kind == "ops_window":
                        case["window"] = results["window"]
                    result = measure(f"{kind}/{impl}/{length}", case)
                rows.append((kind, impl, length, result))

    grid = QUICK_GRID if quick else GRID
    for dtype_ in grid["dtypes"]:
        for width in grid["widths"]:
            for causal in grid["causal"]:
                for length in grid["lengths"]:
                    label = "causal" if causal else "not causal"
                    phase(
                        f"MultiHeadAttention ours vs keras, {label}, width {width}, "
                        f"{dtype_}, T={length}"
                    )
                    measure(
                        grid_key(causal, width, dtype_, length),
                        {
                            "kind": "grid",
                            "length": length,
                            "width": width,
                            "causal": causal,
                            "dtype": dtype_,
                            "repeats": 3 if length >= 4096 else repeats,
                        },
                    )

    phase("incremental decoding: ours vs keras-hub, cache vs no cache")
    for key, heads in DECODE_CASES.items():
        measure(key, {**(QUICK_DECODE if quick else DECODE), "heads": heads})
    _summarize(results, lengths)
    write_report(
        results,
        out,
        "attention",
        _markdown(results, rows) + _grid_markdown(results, grid),
        lambda results, path: _plot(results, lengths, grid, path),
    )
    return results


def _repeats(length, repeats):
    # Forward + backward at T = 65,536 takes minutes: one timed call after
    # the warm-up.
    if length >= 32768:
        return 1
    return 2 if length >= 8192 else repeats


def _get(results, key, field="median_s"):
    return results["cases"].get(key, {}).get(field)


def _summarize(results, lengths):
    ratios = {}
    matmul = results.get("matmul_gflops")
    for length in lengths:
        ours, keras_ = (
            _get(results, f"mha/ours/{length}"),
            _get(results, f"mha/keras/{length}"),
        )
        if ours and keras_:
            ratios[f"mha_time_ratio_T{length}"] = ours / keras_
            if matmul:
                gflops = _get(results, f"mha/ours/{length}", "gflops")
                ratios[f"mha_matmul_fraction_T{length}"] = gflops / matmul
                ratios[f"keras_mha_matmul_fraction_T{length}"] = (
                    _get(results, f"mha/keras/{length}", "gflops") / matmul
                )
        for impl in ("keras", "ours", "ours_chunked", "torch_sdpa"):
            gflops = _get(results, f"ops/{impl}/{length}", "gflops")
            if gflops and matmul:
                ratios[f"ops_{impl}_matmul_fraction_T{length}"] = gflops / matmul
        torch_sdpa = _get(results, f"ops/torch_sdpa/{length}")
        standard = _get(results, f"ops/ours/{length}")
        if standard and torch_sdpa:
            ratios[f"ops_time_ratio_vs_torch_sdpa_T{length}"] = standard / torch_sdpa
        chunked = _get(results, f"ops/ours_chunked/{length}")
        keras_ops = _get(results, f"ops/keras/{length}")
        if standard and keras_ops:
            ratios[f"ops_time_ratio_vs_keras_T{length}"] = standard / keras_ops
        if standard and chunked:
            ratios[f"chunked_time_ratio_vs_standard_T{length}"] = chunked / standard
        memory = _get(results, f"ops/ours_chunked/{length}", "peak_memory_bytes")
        if memory is not None:
            ratios[f"chunked_peak_memory_GiB_T{length}"] = memory / 2**30
        causal = _get(results, f"ops_causal/ours_chunked/{length}")
        if causal:
            ratios[f"chunked_causal_seconds_T{length}"] = causal
            if chunked:
                ratios[f"chunked_causal_time_ratio_vs_not_T{length}"] = causal / chunked
            standard_causal = _get(results, f"ops_causal/ours/{length}")
            if standard_causal:
                ratios[f"chunked_causal_time_ratio_vs_standard_T{length}"] = (
                    causal / standard_causal
                )
    # From 4 windows on, where the window's edges no longer dominate.
    fitted = {}
    for kind, name in (("ops_window", "window"), ("ops_causal", "causal")):
        times = {
            length: _get(results, f"{kind}/ours_chunked/{length}")
            for length in lengths
            if length >= 4 * results["window"]
        }
        fitted[name] = times = {length: t for length, t in times.items() if t}
        # The slope of log time against log T: 1 for T * w work, 2 for T^2.
        exponent = fit_exponent(list(times), list(times.values()))
        if exponent is not None:
            ratios[f"chunked_{name}_time_exponent"] = exponent
    for length, t in fitted["window"].items():
        ratios[f"chunked_window_seconds_T{length}"] = t
        if length in fitted["causal"]:
            ratios[f"chunked_window_time_ratio_vs_causal_T{length}"] = (
                t / fitted["causal"][length]
            )
    for key, case in results["cases"].items():
        if key.startswith("grid/") and "time_ratio" in case:
            name = key[len("grid/") :].replace("/", "_")
            ratios[f"mha_grid_time_ratio_{name}"] = case["time_ratio"]
            ratios[f"mha_grid_matmul_fraction_{name}"] = case["ours"]["matmul_fraction"]
    for key in DECODE_CASES:
        decode = results["cases"].get(key, {})
        if "speedup" in decode:
            ratios[f"{key}_cache_speedup"] = decode["speedup"]
            for name in (
                "time_ratio_vs_keras_hub",
                "times_matmul_bound",
                "times_dense_floor",
                "dense_floor_times_matmul_bound",
            ):
                ratios[f"{key}_{name}"] = decode[name]
    results["ratios"] = ratios


def _markdown(results, rows):
    m = results["machine"]
    lines = [
        f"Machine: {describe(m)}; "
        f"{results['dtype']}; matmul yardstick "
        f"{results.get('matmul_gflops') or float('nan'):.1f} GFLOP/s.",
        "",
        "| case | impl | T | median ms | GFLOP/s | peak memory MiB |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, impl, length, r in rows:
        if "skipped" in r:
            lines.append(
                f"| {kind} | {impl} | {length} | skipped: {r['skipped']} | | |"
            )
            continue
        lines.append(
            f"| {kind} | {impl} | {length} | {1e3 * r['median_s']:.2f} "
            f"({1e3 * r['min_s']:.2f}-{1e3 * r['max_s']:.2f}) | {r['gflops']:.1f} | "
            + (
                "n/a |"
                if r["peak_memory_bytes"] is None
                else f"{r['peak_memory_bytes'] / 2**20:.0f} |"
            )
        )
    lines += ["", "| ratio | value |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.3f} |" for k, v in results["ratios"].items()]
    for key in DECODE_CASES:
        decode = results["cases"].get(key, {})
        if "skipped" in decode:
            lines.append(f"| {key} | skipped: {decode['skipped']} |")
    return "\n".join(lines) + "\n"


def _grid_markdown(results, grid):
    lines = [
        "",
        "`MultiHeadAttention`, ours and Keras' timed in turn in one process, "
        f"forward + backward, {HEADS} heads, {GRID_TOKENS} tokens per batch:",
        "",
        "| mask | width | dtype | T | ours ms | keras ms | ours / keras "
        "| ours % of matmul | keras % of matmul |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for dtype in grid["dtypes"]:
        for width in grid["widths"]:
            for causal in grid["causal"]:
                for length in grid["lengths"]:
                    r = results["cases"].get(grid_key(causal, width, dtype, length))
                    mask = "causal" if causal else "none"
                    if not r or "skipped" in r:
                        reason = (r or {}).get("skipped", "not run")
                        lines.append(
                            f"| {mask} | {width} | {dtype} | {length} | "
                            f"{reason} | | | | |"
                        )
                        continue
                    ours, peer = r["ours"], r["keras"]
                    lines.append(
                        f"| {mask} | {width} | {dtype} | {length} | "
                        f"{1e3 * ours['median_s']:.1f} | "
                        f"{1e3 * peer['median_s']:.1f} | {r['time_ratio']:.2f} | "
                        f"{100 * ours['matmul_fraction']:.0f}% | "
                        f"{100 * peer['matmul_fraction']:.0f}% |"
                    )
    return "\n".join(lines) + "\n"


def _plot(results, lengths, grid, path):
    from keras_attention.viz import pyplot, save_figure

    plt = pyplot()
    fig, (time_ax, mem_ax, grid_ax) = plt.subplots(1, 3, figsize=(16, 4))
    for dtype in grid["dtypes"]:
        for width in grid["widths"]:
            for causal in grid["causal"]:
                xs, ys = [], []
                for length in grid["lengths"]:
                    r = results["cases"].get(grid_key(causal, width, dtype, length))
                    if r and "time_ratio" in r:
                        xs.append(length)
                        ys.append(r["time_ratio"])
                if xs:
                    mask = "causal" if causal else "no mask"
                    grid_ax.plot(xs, ys, "o-", label=f"{mask}, w{width}, {dtype}")
    if grid_ax.lines:
        grid_ax.axhline(1.0, color="gray", lw=0.8)
    finish_axes(
        grid_ax,
        "sequence length T",
        "MultiHeadAttention time, ours / keras",
        legend_size=7,
        empty="grid not measured in this run",
    )
    for kind, impl, style in (
        ("ops", "keras", "o-"),
        ("ops", "ours", "s-"),
        ("ops", "ours_chunked", "^-"),
        ("ops", "torch_sdpa", "d-"),
        ("mha", "keras", "o--"),
        ("mha", "ours", "s--"),
    ):
        xs, ts, ms = [], [], []
        for length in lengths:
            r = results["cases"].get(f"{kind}/{impl}/{length}", {})
            if "median_s" in r:
                xs.append(length)
                ts.append(r["median_s"])
                if r.get("peak_memory_bytes"):
                    ms.append((length, r["peak_memory_bytes"] / 2**20))
        if xs:
            time_ax.plot(xs, ts, style, label=f"{kind} {impl}")
        if ms and (
            kind == "ops"
            and impl != "torch_sdpa"
            or results["machine"].get("accelerator")
        ):
            mem_ax.plot(*zip(*ms, strict=True), style, label=f"{kind} {impl}")
    for ax, label in (
        (time_ax, "forward+backward time (s)"),
        (mem_ax, "peak memory (MiB)"),
    ):
        finish_axes(ax, "sequence length T = S", label, log_y=True)
    m = results["machine"]
    fig.suptitle(f"XLA, {results['dtype']}: {describe(m)}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
