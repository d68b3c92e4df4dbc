"""The `attention` part of the `gpu` suite: attention forward + backward.

Gradients of queries, keys and values in bfloat16, T = S from 1024 to
32768, batch x T held at 32,768 tokens, 16 heads of 128, without and with a
causal mask, each variant compiled with XLA:

- `ours`: `keras_attention.ops.dot_product_attention` as users call it: the
  path its plan picks (cuDNN on a GPU in bfloat16, the standard path on a
  CPU), recorded in the result's `ours_paths`;
- `ours_chunked`: the same with `chunk_size` (its memory-efficient path,
  tiles of the size `MultiHeadAttention` picks by itself);
- `keras_flash`: `keras.ops.dot_product_attention(..., flash_attention=True)`
  (cuDNN through JAX);
- `jax_cudnn`, `jax_xla`: `jax.nn.dot_product_attention` with
  `implementation="cudnn"` and `"xla"`;
- `torch_sdpa`: `torch.nn.functional.scaled_dot_product_attention` on the
  same shapes, in the same process, where PyTorch sees a CUDA device.

One process per T; in it every variant of both masks is traced, then all
are compiled at once (`compile_steps`); per mask, each runs once (the
warm-up), then all are timed in turn (`time_alternating`), so that the
ratios share their minutes. A variant that raises, or whose `(T, S)`
scores would not fit in the device's memory, is recorded as skipped with
the reason. Each row gives ms per step and the fraction of the chip's
dense bfloat16 peak (`gpu.PEAK_FLOPS`, or `--peak-tflops`) that
`FLOPS_FORMULA` gives. Where a T's process fails, that T runs once more,
as do the next, without torch and compiling one variant at a time.
"""

import time

from keras_attention.bench.common import finish_axes
from keras_attention.bench.gpu_common import (
    attention_flops,
    case_seconds,
    cases_by_length,
    compile_steps,
    describe_error,
    device_info,
    memory_limit_bytes,
    table_cell,
    time_in_turn,
)
from keras_attention.utils.progress import phase

IMPLS = ("ours", "ours_chunked", "keras_flash", "jax_cudnn", "jax_xla", "torch_sdpa")
# The variants that hold the (T, S) scores of every head in memory (ours
# where its plan picks the standard path).
MATERIALIZING = ("ours", "jax_xla")
PEERS = ("keras_flash", "jax_cudnn", "jax_xla", "torch_sdpa")
MASKS = ("full", "causal")

FULL = {
    "lengths": (1024, 2048, 4096, 8192, 16384, 32768),
    "tokens": 32768,
    "heads": 16,
    "head_dim": 128,
    "chunk_size": 256,
    "parallel_compile": True,
    "repeats": 5,
    "long_repeats": 3,
    "long_from": 16384,
}
QUICK = {
    "lengths": (64, 128),
    "tokens": 256,
    "heads": 2,
    "head_dim": 16,
    "chunk_size": 32,
    "parallel_compile": True,
    "repeats": 2,
    "long_repeats": 2,
    "long_from": 128,
}


def _attention_loss(impl, causal, chunk_size):
    """`(q, k, v, w) -> loss` through variant `impl`: the sum of the outputs
    weighted along the head axis, so that every output has a gradient."""
    import jax
    import keras

    from keras_attention.ops import dot_product_attention

    def attend(q, k, v):
        if impl == "ours":
            return dot_product_attention(q, k, v, is_causal=causal)
        if impl == "ours_chunked":
            return dot_product_attention(
                q, k, v, is_causal=causal, chunk_size=chunk_size
            )
        if impl == "keras_flash":
            return keras.ops.dot_product_attention(
                q, k, v, is_causal=causal, flash_attention=True
            )
        implementation = {"jax_cudnn": "cudnn", "jax_xla": "xla"}[impl]
        return jax.nn.dot_product_attention(
            q, k, v, is_causal=causal, implementation=implementation
        )

    def loss(q, k, v, w):
        out = attend(q, k, v)
        return keras.ops.sum(keras.ops.cast(out * w, "float32"))

    return loss


def _torch_inputs(shape, dtype, allow_cpu):
    """`(q, k, v, w, info)` for PyTorch's SDPA: `shape` `(B, T, H, D)` laid
    out as `(B, H, T, D)`, drawn on the device; raises where torch sees no
    CUDA device (unless `allow_cpu`, the dry run)."""
    import torch

    if not torch.cuda.is_available() and not allow_cpu:
        raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch, length, heads, head_dim = shape
    torch.manual_seed(0)
    dtype = getattr(torch, dtype)
    q, k, v = (
        torch.randn(
            batch, heads, length, head_dim, device=device, dtype=dtype
        ).requires_grad_()
        for _ in range(3)
    )
    w = torch.randn(head_dim, device=device, dtype=dtype)
    info = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
    }
    return q, k, v, w, info


def _torch_step(w, causal):
    """Forward + backward of `torch.nn.functional.scaled_dot_product_attention`:
    `(q, k, v) -> their gradients`."""
    import torch

    def step(q, k, v):
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal
        )
        return torch.autograd.grad((out * w).float().sum(), (q, k, v))

    return step


def case_attention(case):
    """Every variant of `IMPLS` at one T, per mask, timed in turn: all are
    traced first, compiled together (`compile_steps`), then run once each
    (the warm-up, where a variant that runs out of memory shows) and timed
    in turn."""
    import jax
    import keras

    from keras_attention.bench.common import accelerator, block
    from keras_attention.ops import attention_path
    from keras_attention.utils.backend import value_and_grad

    start = time.monotonic()
    seconds = case_seconds()
    on_accelerator = accelerator() is not None
    dtype = "bfloat16" if on_accelerator else "float32"
    length, heads, head_dim = case["length"], case["heads"], case["head_dim"]
    batch = max(1, case["tokens"] // length)
    shape = (batch, length, heads, head_dim)
    q, k, v = (keras.random.normal(shape, seed=i, dtype=dtype) for i in range(3))
    w = keras.random.normal((head_dim,), seed=3, dtype=dtype)
    limit = memory_limit_bytes()
    # One float32 (T, S) score tensor for every head of the batch; the
    # standard paths hold about four of them (scores, weights and their
    # gradients) at the peak of a step.
    scores_bytes = 4 * batch * heads * length * length
    repeats = case["long_repeats"] if length >= case["long_from"] else case["repeats"]
    result = {
        "batch": batch,
        "length": length,
        "dtype": dtype,
        "device": device_info(),
        "memory_limit_bytes": limit,
        "scores_bytes": scores_bytes,
        "repeats": repeats,
    }
    paths = {mask: attention_path(q, v, is_causal=mask == "causal") for mask in MASKS}
    result["ours_paths"] = paths
    rows = {mask: {} for mask in MASKS}
    lowered = {}
    for mask in MASKS:
        for impl in IMPLS:
            if impl == "torch_sdpa":
                continue
            holds_scores = impl in MATERIALIZING and (
                impl != "ours" or paths[mask] == "standard"
            )
            if holds_scores and 4 * scores_bytes > 0.9 * limit:
                rows[mask][impl] = {
                    "skipped": f"the (T, S) scores would need about "
                    f"{4 * scores_bytes / 2**30:.0f} GiB (4 float32 tensors "
                    f"of B·H·T·S), over the device's "
                    f"{limit / 2**30:.0f} GiB"
                }
                continue
            loss = _attention_loss(impl, mask == "causal", case["chunk_size"])
            try:
                item = jax.jit(value_and_grad(loss)).lower(q, k, v, w)
            except Exception as error:  # recorded, the others still run
                rows[mask][impl] = {"skipped": describe_error(error)}
                continue
            lowered[(mask, impl)] = (item, impl in MATERIALIZING)
    compiled = compile_steps(lowered, case.get("parallel_compile", True))
    result["compile_s"] = time.monotonic() - start
    torch_inputs = None
    for mask in MASKS:
        causal = mask == "causal"
        if seconds is not None and time.monotonic() - start > seconds:
            result[mask] = {
                impl: rows[mask].get(impl, {"skipped": "the time budget was spent"})
                for impl in IMPLS
            }
            continue
        calls = {}
        for impl in IMPLS:
            if impl in rows[mask]:
                continue
            if impl == "torch_sdpa":
                if not case.get("torch"):
                    rows[mask][impl] = {"skipped": "torch is not installed"}
                    continue
                try:
                    # Imported after JAX has loaded its CUDA libraries (and
                    # run cuDNN), so that JAX's are the ones in the process.
                    if torch_inputs is None:
                        torch_inputs = _torch_inputs(
                            shape, dtype, allow_cpu=case.get("quick", False)
                        )
                        result.update(torch_inputs[4])
                    *args, torch_weights, _ = torch_inputs
                    step = _torch_step(torch_weights, causal)
                    block(step(*args))  # the warm-up
                except Exception as error:
                    rows[mask][impl] = {"skipped": describe_error(error)}
                    continue
                calls[impl] = (step, args)
                continue
            step = compiled[(mask, impl)]
            try:
                if isinstance(step, Exception):
                    raise step
                block(step(q, k, v, w))  # the warm-up
            except Exception as error:
                rows[mask][impl] = {"skipped": describe_error(error)}
                continue
            calls[impl] = (step, (q, k, v, w))
        timings = time_in_turn(calls, repeats, rows[mask])
        flops = attention_flops(batch, heads, length, head_dim, causal)
        for impl, timing in timings.items():
            rows[mask][impl] = {
                **timing,
                "ms": 1e3 * timing["median_s"],
                "flops": flops,
                "tflops": flops / timing["median_s"] / 1e12,
            }
        if "keras_flash" in timings and "jax_cudnn" not in timings:
            rows[mask]["keras_flash"]["note"] = (
                "jax's cudnn implementation failed here: Keras fell back to xla"
            )
        result[mask] = {impl: rows[mask][impl] for impl in IMPLS}
    return result


def attention_part(measure, config, quick, has_torch):
    """One process per T. Where one fails (not for time), that T runs once
    more in the most cautious form, as do the next: without torch (the CUDA
    libraries of torch and JAX in one process are the likeliest cause) and
    compiling one variant at a time."""
    cautious = False
    for length in config["lengths"]:
        phase(f"attention fwd+bwd T={length}: ours and the peers in turn")
        case = {
            "kind": "attention",
            "quick": quick,
            **{k: v for k, v in config.items() if k != "lengths"},
            "length": length,
        }
        if cautious:
            case.update(torch=False, parallel_compile=False)
        else:
            case.update(torch=has_torch)
        result = measure(f"attention/T{length}", case)
        if not cautious and result.get("skipped", "").startswith("exit"):
            cautious = True
            phase(f"attention T={length} again, without torch, compiling in turn")
            retried = measure(
                f"attention/T{length}",
                {**case, "torch": False, "parallel_compile": False},
            )
            retried["first_try"] = result["skipped"]


def summarize(results, fractions, ratios):
    """Adds `device` to `results`, each row's `peak_fraction`, and the
    fractions of the peak (per mask, impl and T) and the ratios (time of
    ours over each peer) to `fractions` and `ratios`."""
    peak = results["peak_flops"]
    for length, case in cases_by_length(results, "attention"):
        if "device" in case and "device" not in results:
            results["device"] = case["device"]
        for mask in MASKS:
            rows = case.get(mask, {})
            for impl in IMPLS:
                row = rows.get(impl, {})
                if "tflops" in row:
                    row["peak_fraction"] = row["tflops"] * 1e12 / peak
                    fractions[f"{mask}/{impl}/T{length}"] = row["peak_fraction"]
            for ours in ("ours", "ours_chunked"):
                for peer in PEERS:
                    a, b = rows.get(ours, {}), rows.get(peer, {})
                    if "median_s" in a and "median_s" in b:
                        ratios[f"{mask}/{ours}_vs_{peer}/T{length}"] = (
                            a["median_s"] / b["median_s"]
                        )


def markdown_lines(results, reasons, assumed):
    """The part's section of the suite's report (`reasons`: the report's
    footnotes of skipped cells, appended to; `assumed`: what the text says
    of a peak that is not this device's)."""
    config = results["config"]["attention"]
    peak = results["peak_flops"]
    lines = [
        "",
        "### Attention forward + backward",
        "",
        f"ms per step (median of the repeats after a warm-up) and, in brackets, "
        f"the fraction of a dense bfloat16 peak of {peak / 1e12:.0f} "
        f"TFLOP/s{assumed}. FLOPs: {results['flops_formula']}. "
        f"{config['tokens']} tokens per step (B = {config['tokens']} / T), "
        f"{config['heads']} heads of {config['head_dim']}; ours chunked with "
        f"tiles of {config['chunk_size']}. The variants of a row were timed in "
        "turn in one process.",
        "",
        "| mask | T | B | dtype | " + " | ".join(IMPLS) + " |",
        "| --- | ---: | ---: | --- |" + " ---: |" * len(IMPLS),
    ]
    cases = cases_by_length(results, "attention")
    if "attention" in results["cases"]:  # the part failed in this process
        lines.append(f"| {table_cell(results['cases']['attention'], reasons)} |")
    for mask in MASKS:
        for length, case in cases:
            if "skipped" in case:
                cells = [table_cell(case, reasons)] * len(IMPLS)
                lines.append(f"| {mask} | {length} | | | " + " | ".join(cells) + " |")
                continue
            cells = [table_cell(case[mask].get(impl, {}), reasons) for impl in IMPLS]
            lines.append(
                f"| {mask} | {length} | {case['batch']} | {case['dtype']} | "
                + " | ".join(cells)
                + " |"
            )
    for _, case in cases:
        if case.get("torch"):
            lines += ["", f"PyTorch {case['torch']} (CUDA {case['torch_cuda']})."]
            break
    return lines


def plot_panels(fraction_ax, time_ax, results):
    """Each variant's fraction of the peak and ms per step against T."""
    cases = cases_by_length(results, "attention")
    for i, impl in enumerate(IMPLS):
        for mask, style in (("full", "o-"), ("causal", "s--")):
            xs, fractions, times = [], [], []
            for length, case in cases:
                row = case.get(mask, {}).get(impl, {})
                if "ms" in row:
                    xs.append(length)
                    fractions.append(100 * row.get("peak_fraction", 0))
                    times.append(row["ms"])
            if xs:
                label = f"{impl} {mask}"
                fraction_ax.plot(xs, fractions, style, color=f"C{i}", label=label)
                time_ax.plot(xs, times, style, color=f"C{i}", label=label)
    for ax, label in (
        (fraction_ax, f"% of {results['peak_flops'] / 1e12:.0f} TFLOP/s"),
        (time_ax, "ms per forward+backward step"),
    ):
        finish_axes(
            ax,
            "sequence length T = S (B·T constant)",
            label,
            log_y=ax is time_ax,
            legend_size=6,
        )
    fraction_ax.set_title("attention, fraction of peak", fontsize=10)
    time_ax.set_title("attention, time per step", fontsize=10)
