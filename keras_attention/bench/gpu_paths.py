"""The `paths` part of the `gpu` suite: the path table's training workloads.

`docs/attention_paths.md` gives the kernel that serves each attention call of
real training workloads on a faked JAX GPU. This part runs those calls on a
real one: each workload (`WORKLOADS`) is one `MultiHeadAttention` (or
`GroupedQueryAttention`) call in training, made as the table makes it, at
16,384 tokens per step: T = 4096 (B = 4), 16 heads of 128 (the encoder: T =
2048, 8 heads of 64; the packed documents: T = 8192), in bfloat16
(`"mixed_bfloat16"`) and float32. Forward + backward (gradients of the
weights and the input; loss: the output's mean square), compiled whole, of:

- `ours`: our layer as users call it (`flash_attention=None`); the row
  records `layer.attention_path` and the fused kernel in its program;
- `standard`: the same layer with `flash_attention=False`;
- `keras`: `keras.layers.MultiHeadAttention` (or `GroupQueryAttention`),
  which ours is made `from_keras` of (the same weights), where Keras can
  express the call (no soft cap; documents as a dense `(B, T, S)`
  `attention_mask`); `kernel`: the fused kernel in its program, or `xla`;
- `jax_cudnn`: Keras' projections around `jax.nn.dot_product_attention(...,
  implementation="cudnn")` on the projected tensors (padding as sequence
  lengths, documents as a dense mask; no dropout, no soft cap);
- `tokamax`: the same with `tokamax.dot_product_attention`, where installed.

The sides of a workload and dtype are traced, compiled together
(`compile_steps`), run once (the warm-up), then timed in turn
(`time_alternating`). The check: our output and input gradient against the
standard path's (same input, weights and dropout seed: the dropout mask
hashes the seed and the position on every path), the largest difference
over the largest magnitude, within `TOLERANCES`; a failure is recorded.
Keys are padded at the end of each row (`padded_lengths`).

On a GPU each workload runs in a process of its own; the dry run runs them
in one, and where it dies, each again alone. A workload past the part's
share is recorded skipped.
"""

import importlib.util
import os
import time

import numpy as np

from keras_attention.bench.gpu_common import (
    bars,
    case_seconds,
    compile_steps,
    describe_error,
    device_info,
    kernels_in,
    memory_limit_bytes,
    table_cell,
    time_in_turn,
)

# The fused output's largest difference from the standard path's, over the
# standard one's largest magnitude (float32: room for TF32 matmuls).
TOLERANCES = {"bfloat16": 5e-2, "float32": 5e-3}
QUICK_XLA_FLAGS = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
    "--xla_cpu_use_fusion_emitters=false"
)
SIDES = ("ours", "standard", "keras", "jax_cudnn", "tokamax")
PEERS = ("standard", "keras", "jax_cudnn", "tokamax")
# name: (title, as in the path table where it has the row; what the call
# holds: padding as Keras masks (`masks`) or a `(B, 1, S)` `attention_mask`).
WORKLOADS = {
    "causal_padding": ("MultiHeadAttention, causal, Keras masks", "causal masks"),
    "encoder_padding": ("MultiHeadAttention, Embedding(mask_zero=True)", "masks"),
    "attention_mask": ("MultiHeadAttention, attention_mask (B, 1, S)", "mask_b1s"),
    "dropout": ("MultiHeadAttention, dropout=0.1", "causal dropout"),
    "gqa": ("GroupedQueryAttention, causal, Keras masks", "causal masks gqa"),
    "soft_cap": ("MultiHeadAttention, soft_cap (Gemma 2)", "causal soft_cap"),
    "documents": ("MultiHeadAttention, packed documents", "causal documents"),
}

FULL = {
    "workloads": tuple(WORKLOADS),
    "dtypes": ("bfloat16", "float32"),
    "tokens": 16384,
    "length": 4096,
    "heads": 16,
    "head_dim": 128,
    "key_value_heads": 4,
    "dropout": 0.1,
    "soft_cap": 50.0,
    "documents": 8,
    "sizes": {
        "encoder_padding": {"length": 2048, "heads": 8, "head_dim": 64},
        "documents": {"length": 8192},
    },
    "parallel_compile": True,
    "repeats": 5,
}
# Every workload in float32 at T = 512 (the causal ones take the chunked
# path on a CPU, so the check compares two paths there).
QUICK = {**FULL, "dtypes": ("float32",), "tokens": 512, "length": 512, "sizes": {}}
QUICK.update(heads=2, head_dim=16, key_value_heads=1, documents=4, repeats=2)


def sizes(config, workload):
    """`(batch, length, heads, head_dim)` of `workload`."""
    size = {**config, **config.get("sizes", {}).get(workload, {})}
    length = size["length"]
    return max(1, size["tokens"] // length), length, size["heads"], size["head_dim"]


def padded_lengths(batch, length):
    """The real length of each row: T, 7T/8, 3T/4, 5T/8, then again."""
    return np.array([length - (b % 4) * length // 8 for b in range(batch)], "int32")


def refusal(side, spec, has_tokamax):
    """Why `side` cannot run workload `spec`, or None."""
    if side == "keras" and "soft_cap" in spec:
        return "Keras' MultiHeadAttention has no soft cap"
    if side in ("jax_cudnn", "tokamax") and "dropout" in spec:
        return f"{side}: its dot_product_attention has no attention dropout"
    if side == "jax_cudnn" and "soft_cap" in spec:
        return "jax.nn.dot_product_attention has no soft cap"
    if side == "tokamax" and not has_tokamax:
        return "tokamax is not installed"
    return None


def _layers(spec, config, workload, dtype):
    """`(theirs, ours, standard)`: Keras' layer and ours from it."""
    import keras

    from keras_attention.layers import GroupedQueryAttention, MultiHeadAttention

    batch, length, heads, head_dim = sizes(config, workload)
    policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
    rate = config["dropout"] if "dropout" in spec else 0.0
    common = {"dropout": rate, "seed": 0, "dtype": policy}
    if "gqa" in spec:
        kv_heads = config["key_value_heads"]
        theirs = keras.layers.GroupQueryAttention(head_dim, heads, kv_heads, **common)
        ours_class = GroupedQueryAttention
    else:
        theirs = keras.layers.MultiHeadAttention(heads, head_dim, **common)
        ours_class = MultiHeadAttention
    shape = (batch, length, heads * head_dim)
    theirs.build(shape, shape)
    options = {"soft_cap": config["soft_cap"]} if "soft_cap" in spec else {}
    ours = ours_class.from_keras(theirs, **options)
    standard = ours_class.from_keras(theirs, flash_attention=False, **options)
    return theirs, ours, standard


def _inputs(spec, config, workload):
    """`(x, extras)`: the input and the tensors the calls read."""
    import keras

    batch, length, heads, head_dim = sizes(config, workload)
    x = keras.random.normal((batch, length, heads * head_dim), seed=5)
    extras = {}
    if {"masks", "mask_b1s"} & spec:
        lengths = padded_lengths(batch, length)
        extras["lengths"] = keras.ops.convert_to_tensor(lengths)
        extras["mask"] = keras.ops.convert_to_tensor(
            np.arange(length)[None, :] < lengths[:, None]
        )
    if "documents" in spec:
        size = length // config["documents"]
        segments = np.broadcast_to(np.arange(length) // size, (batch, length))
        extras["segments"] = keras.ops.convert_to_tensor(segments.astype("int32"))
        extras["dense"] = keras.ops.convert_to_tensor(
            segments[:, :, None] == segments[:, None, :]
        )
    return x, extras


def _layer_forward(layer, spec, keras_side):
    """`forward(x, extras)` of a layer as the workload calls it."""

    def forward(x, extras):
        arguments = {"training": True, "use_causal_mask": "causal" in spec}
        if "masks" in spec:
            arguments.update(query_mask=extras["mask"], value_mask=extras["mask"])
        elif "mask_b1s" in spec:
            arguments["attention_mask"] = extras["mask"][:, None, :]
        if "documents" in spec:
            if keras_side:
                arguments["attention_mask"] = extras["dense"]
            else:
                arguments["segment_ids"] = extras["segments"]
        return layer(x, x, **arguments)

    return forward


def _peer_forward(theirs, side, spec, config):
    """`forward(x, extras)`: Keras' projections around a peer's attention."""

    def forward(x, extras):
        import jax

        q = theirs._query_dense(x)
        k, v = theirs._key_dense(x), theirs._value_dense(x)
        arguments = {"is_causal": "causal" in spec}
        if {"masks", "mask_b1s"} & spec:
            arguments["key_value_seq_lengths"] = extras["lengths"]
        if "masks" in spec:
            arguments["query_seq_lengths"] = extras["lengths"]
        if "documents" in spec:
            arguments["mask"] = extras["dense"][:, None]
        if side == "jax_cudnn":
            out = jax.nn.dot_product_attention(
                q, k, v, implementation="cudnn", **arguments
            )
        else:
            import tokamax
            from absl import flags

            # tokamax parses sys.argv (`--suite gpu --case ...`) for its flags.
            if not flags.FLAGS.is_parsed():
                flags.FLAGS.mark_as_parsed()
            if "soft_cap" in spec:
                arguments["logits_soft_cap"] = config["soft_cap"]
            out = tokamax.dot_product_attention(q, k, v, **arguments)
        return theirs._output_dense(out)

    return forward


def _step(layer, forward):
    """`forward` with `layer`'s weights as inputs, forward and backward:
    `step(values, x, extras) -> ((loss, output), (weight grads, input
    grad))`, the output kept for the check."""
    import jax
    import keras

    def loss(values, x, extras):
        mapping = list(zip(layer.trainable_variables, values, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            out = forward(x, extras)
        square = keras.ops.square(keras.ops.cast(out, "float32"))
        return keras.ops.mean(square), out

    return jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)


def compare(fused, standard, tolerance):
    """The check of a fused result against the standard one."""
    fused = np.asarray(fused, "float32")
    standard = np.asarray(standard, "float32")
    difference = float(np.max(np.abs(fused - standard)))
    scale = float(np.max(np.abs(standard)))
    relative = difference / scale if scale > 0 else difference
    return {
        "max_abs_diff": difference,
        "max_abs": scale,
        "relative": relative,
        "tolerance": tolerance,
        "passed": bool(relative <= tolerance),
    }


def _workload(spec, config, workload, dtype, has_tokamax):
    """One workload in one dtype: every side traced, compiled together, run
    once, checked, timed in turn."""
    import jax

    from keras_attention.bench.common import block

    start = time.monotonic()
    batch, length, heads, head_dim = sizes(config, workload)
    theirs, ours, standard = _layers(spec, config, workload, dtype)
    x, extras = _inputs(spec, config, workload)
    scores_bytes = 4 * batch * heads * length * length
    limit = memory_limit_bytes()
    result = {"title": WORKLOADS[workload][0], "batch": batch, "length": length}
    result.update(heads=heads, head_dim=head_dim, scores_bytes=scores_bytes)
    rows, lowered, arguments = {}, {}, {}
    for side in SIDES:
        reason = refusal(side, spec, has_tokamax)
        if reason:
            rows[side] = {"skipped": reason}
            continue
        layer = {"ours": ours, "standard": standard}.get(side, theirs)
        if side in ("jax_cudnn", "tokamax"):
            forward = _peer_forward(theirs, side, spec, config)
        else:
            forward = _layer_forward(layer, spec, side == "keras")
        step = _step(layer, forward)
        values = [v.value for v in layer.trainable_variables]
        try:
            item = jax.jit(step).lower(values, x, extras)
        except Exception as error:  # recorded, the others still run
            rows[side] = {"skipped": describe_error(error)}
            continue
        kernel = kernels_in(item)
        rows[side] = {"kernel": kernel}
        if side == "ours":
            rows[side]["path"] = layer.attention_path
        heavy = side == "standard" or (side == "keras" and kernel == "xla")
        if heavy and 4 * scores_bytes > 0.9 * limit:
            rows[side]["skipped"] = (
                f"the (T, S) scores would need about {4 * scores_bytes / 2**30:.0f} "
                f"GiB, over the device's {limit / 2**30:.0f} GiB"
            )
            continue
        lowered[side] = (item, heavy)
        arguments[side] = (values, x, extras)
    result["trace_s"] = time.monotonic() - start
    compiled = compile_steps(lowered, config.get("parallel_compile", True))
    result["compile_s"] = time.monotonic() - start
    calls, warm = {}, {}
    for side in SIDES:
        if side not in lowered:
            continue
        try:
            step = compiled[side]
            if isinstance(step, Exception):
                raise step
            warm[side] = block(step(*arguments[side]))  # the warm-up
        except Exception as error:
            rows[side]["skipped"] = describe_error(error)
            continue
        calls[side] = (step, arguments[side])
    result["check"] = check(warm, dtype, rows)
    timings = time_in_turn(calls, config["repeats"], rows)
    for side, timing in timings.items():
        rows[side].update(timing, ms=1e3 * timing["median_s"])
    result["rows"] = {side: rows[side] for side in SIDES}
    result["wall_s"] = time.monotonic() - start
    return result


def check(warm, dtype, rows):
    """Ours against the standard path: the outputs and the input gradients
    of their warm-up steps (`warm[side]`: `((loss, output), (weight grads,
    input grad))`)."""
    missing = [side for side in ("ours", "standard") if side not in warm]
    if missing:
        reason = rows.get(missing[0], {}).get("skipped", "not run")
        return {"skipped": f"{' and '.join(missing)} did not run: {reason}"}
    tolerance = TOLERANCES[dtype]
    (_, ours), (_, ours_gradient) = warm["ours"]
    (_, standard), (_, standard_gradient) = warm["standard"]
    output = compare(ours, standard, tolerance)
    gradient = compare(ours_gradient, standard_gradient, tolerance)
    same_path = rows["ours"].get("path") == "standard"
    passed = output["passed"] and gradient["passed"]
    return dict(
        output=output, input_gradient=gradient, same_path=same_path, passed=passed
    )


def case_paths(case):
    """Every workload of `case["workloads"]` in every dtype of the case, in
    turn; those that would start past the case's share are skipped."""
    if case.get("quick"):
        # The dry run's numbers mean nothing: XLA compiles it in half the
        # time without its costly passes (read when JAX starts its backend).
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} {QUICK_XLA_FLAGS}".strip()
    import keras

    from keras_attention.bench.common import accelerator

    start, seconds = time.monotonic(), case_seconds()
    dtypes = case["dtypes"] if accelerator() is not None else ("float32",)
    has_tokamax = importlib.util.find_spec("tokamax") is not None
    result = {"device": device_info(), "tokamax": has_tokamax, "workloads": {}}
    for workload in case["workloads"]:
        spec = set(WORKLOADS[workload][1].split())
        rows = result["workloads"][workload] = {}
        for dtype in dtypes:
            if seconds is not None and time.monotonic() - start > seconds:
                rows[dtype] = {"skipped": "the time budget was spent"}
                continue
            try:
                rows[dtype] = _workload(spec, case, workload, dtype, has_tokamax)
            except Exception as error:  # one workload's failure leaves the rest
                rows[dtype] = {"skipped": describe_error(error)}
            keras.backend.clear_session()
    return result


def paths_part(measure, config, quick):
    """Every workload in one process where `quick` (the dry run: one
    start-up), else each in a process of its own (a GPU: a workload
    that dies or runs past the part's share loses its own rows alone, as
    one H100 run lost them all). Where the one process dies (not for time),
    each workload runs once more in a process of its own."""
    from keras_attention.utils.progress import phase

    phase("paths: the path table's training workloads, ours against the peers")
    case = {"kind": "paths", "quick": quick, **config}
    if quick:
        result = measure("paths", case)
        if not result.get("skipped", "").startswith("exit"):
            return
    for workload in config["workloads"]:
        phase(f"paths {workload}, in a process of its own")
        measure(f"paths/{workload}", {**case, "workloads": [workload]})


def workload_rows(results):
    """`{workload: {dtype: record}}` over the part's cases: a workload run
    again in a process of its own replaces the first one's record."""
    cases = results["cases"]
    first = cases.get("paths", {})
    found = {}
    for workload in results["config"].get("paths", FULL)["workloads"]:
        again = cases.get(f"paths/{workload}", {})
        for case in (again, first):
            if workload in case.get("workloads", {}):
                found[workload] = case["workloads"][workload]
                break
            if "skipped" in case:
                found[workload] = {"all": {"skipped": case["skipped"]}}
                break
    return found


def summarize(results, ratios):
    """Adds ours' speed against each peer (`peer ms / ours ms`) to `ratios`
    and the part's failed checks to `results["paths_failed_checks"]`."""
    failed = []
    for key, case in results["cases"].items():
        if key.startswith("paths") and "device" in case:
            results.setdefault("device", case["device"])
    for workload, dtypes in workload_rows(results).items():
        for dtype, record in dtypes.items():
            rows = record.get("rows", {})
            ours = rows.get("ours", {}).get("median_s")
            for peer in PEERS:
                theirs = rows.get(peer, {}).get("median_s")
                if ours and theirs:
                    ratios[f"paths/{workload}/{dtype}/ours_vs_{peer}_speed"] = (
                        theirs / ours
                    )
            if record.get("check", {}).get("passed") is False:
                failed.append(f"{workload}/{dtype}")
    results["paths_failed_checks"] = failed


def _check_cell(check):
    if not check or "skipped" in check:
        return f"not checked: {check.get('skipped', 'not run')}" if check else ""
    verdict = "ok" if check["passed"] else "**FAILED**"
    same = " (same path)" if check["same_path"] else ""
    output, gradient = check["output"], check["input_gradient"]
    return f"{verdict} {output['relative']:.1e} / {gradient['relative']:.1e}{same}"


def markdown_lines(results, reasons):
    """The part's section of the suite's report."""
    lines = [
        "",
        "### The path table's training workloads (paths)",
        "",
        "ms per forward + backward step of one layer call in training "
        "(`gpu_paths`' docstring); ours path: `attention_path` (the kernel in "
        "its program). Speed = peer ms / ours ms. Check: ours against the "
        "standard path, largest difference / largest magnitude of the output "
        f"and the input gradient (tolerance {TOLERANCES['bfloat16']:g} in "
        f"bfloat16, {TOLERANCES['float32']:g} in float32).",
        "",
        "| workload | dtype | B x T, heads | ours path | "
        + " | ".join(SIDES)
        + " | vs standard | vs keras | vs jax_cudnn | check |",
        "| --- | --- | --- | --- |" + " ---: |" * (len(SIDES) + 3) + " --- |",
    ]
    ratios = results.get("ratios", {})
    for workload, dtypes in workload_rows(results).items():
        for dtype, record in dtypes.items():
            if "rows" not in record:
                lines.append(
                    f"| {workload} | {dtype} | {table_cell(record, reasons)} |"
                )
                continue
            rows = record["rows"]
            cells = []
            for side in SIDES:
                row = rows[side]
                cell = f"{row['ms']:.3g}" if "ms" in row else table_cell(row, reasons)
                if side != "ours" and row.get("kernel") not in (None, "xla"):
                    cell += f" ({row['kernel']})"
                cells.append(cell)
            speeds = []
            for peer in ("standard", "keras", "jax_cudnn"):
                value = ratios.get(f"paths/{workload}/{dtype}/ours_vs_{peer}_speed")
                speeds.append("" if value is None else f"{value:.2f}")
            ours = rows["ours"]
            lines.append(
                f"| {workload} | {dtype} | {record['batch']} x {record['length']}, "
                f"{record['heads']} x {record['head_dim']} | {ours.get('path', '')} "
                f"({ours.get('kernel', '')}) | "
                + " | ".join(cells + speeds)
                + f" | {_check_cell(record.get('check'))} |"
            )
    failed = results.get("paths_failed_checks", [])
    if failed:
        lines += ["", "Checks FAILED (fused output off the standard path's): "]
        lines[-1] += ", ".join(failed) + "."
    return lines


def plot_panel(ax, results):
    """ms per step of each side, per workload and dtype (log scale)."""
    groups, series = [], {side: [] for side in SIDES}
    for workload, dtypes in workload_rows(results).items():
        for dtype, record in dtypes.items():
            if "rows" in record:
                groups.append(f"{workload} {dtype}")
                for side in SIDES:
                    series[side].append(record["rows"][side].get("ms"))
    bars(ax, groups, series, "paths: ms per fwd+bwd step")
    if ax.patches:
        ax.set_yscale("log")
