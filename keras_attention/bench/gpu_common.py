"""What the parts of the `gpu` suite share: the attention FLOPs, the case's
time budget and device, the models of the `seq2seq` and `decode` parts,
compiling and timing a case's variants, and the cells and bars of the report.

Each part (`gpu_paths`, `gpu_attention`, `gpu_seq2seq`, `gpu_decode`,
`gpu_flex`) imports this module and none of the others; `gpu` runs them.
"""

import os

import keras
import numpy as np

from keras_attention.bench.common import accelerator, leave_empty, time_alternating

FLOPS_FORMULA = (
    "forward 4·B·H·T·S·D (the two matmuls), backward 2.5x the forward, so "
    "fwd+bwd = 3.5 x 4·B·H·T·S·D; halved when causal"
)
# The environment variable that hands a case's process its share of the
# time budget.
SECONDS_VARIABLE = "KERAS_ATTENTION_BENCH_SECONDS"
# The fused kernels a lowered step may call: (custom call target, name).
CUSTOM_CALLS = (
    ("__cudnn$fmha", "cudnn"),
    ("__gpu$xla.gpu.triton", "triton"),
    ("mosaic_gpu", "mosaic_gpu"),
)

# The models the `seq2seq` and `decode` parts time, and how: `rnn_units` gives
# the RNN + Bahdanau the Transformer's parameter count at that width and
# vocabulary (`seq2seq.matched_units`, which builds five models: 18 s on a
# CPU, so solved once here; the `seq2seq` part's JSON records both counts).
SEQ2SEQ_FULL = {
    "width": 512,
    "vocabulary_size": 1000,
    "rnn_units": 736,
    "policy": "mixed_bfloat16",
    "repeats": 5,
}
SEQ2SEQ_QUICK = {
    "width": 32,
    "vocabulary_size": 50,
    "rnn_units": 48,
    "policy": "mixed_bfloat16",
    "repeats": 2,
}


def attention_flops(batch, heads, length, head_dim, causal, key_length=None):
    """FLOPs of one attention forward + backward step (`FLOPS_FORMULA`)."""
    key_length = key_length or length
    forward = 4 * batch * heads * length * key_length * head_dim
    return 3.5 * forward * (0.5 if causal else 1.0)


def time_in_turn(calls, repeats, rows):
    """`time_alternating(calls)` (compiled and warmed up already); where
    timing fails, every call's row records why and nothing is returned."""
    try:
        return time_alternating(calls, repeats=repeats, warmup=0)
    except Exception as error:
        for name in calls:
            rows[name] = {"skipped": f"while timing: {describe_error(error)}"}
        return {}


def describe_error(error):
    """The error's type and first line, short enough for a report's cell."""
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0]}"[:300]


def case_seconds():
    """This case's share of the time budget (the parent's environment), or
    None where none was given."""
    value = os.environ.get(SECONDS_VARIABLE)
    return float(value) if value else None


def device_info():
    """The JAX device a case ran on, for its record."""
    import jax

    device = jax.devices()[0]
    return {
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": len(jax.devices()),
        "jax": jax.__version__,
    }


def memory_limit_bytes():
    """What the first device may allocate: JAX's allocator limit on an
    accelerator, the host's memory on a CPU."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def set_case_policy(case):
    """Sets the dtype policy of a `seq2seq` or `decode` case (float32 without
    an accelerator) and returns it."""
    policy = case["policy"] if accelerator() is not None else "float32"
    keras.config.set_dtype_policy(policy)
    return policy


def build_seq2seq(name, case, length, **kwargs):
    """`seq2seq.build_model` of `name` at the case's width and vocabulary,
    the RNN with the case's `rnn_units`."""
    from keras_attention.bench.seq2seq import build_model

    units = case["rnn_units"] if name != "transformer" else None
    return build_model(
        name, case["width"], length, case["vocabulary_size"], units, **kwargs
    )


def compile_steps(lowered, parallel):
    """`{name: executable or the exception}` of `{name: (lowered, heavy)}`
    (`jax.jit(...).lower(...)` results). XLA compiles without Python's lock,
    so with `parallel` a pool compiles the light ones while this thread
    compiles the `heavy` ones, one at a time (their autotuning allocates
    buffers of the size of the (T, S) scores)."""
    import concurrent.futures

    def compile_one(item):
        try:
            return item.compile()
        except Exception as error:  # recorded by the caller
            return error

    heavy = {name: item for name, (item, big) in lowered.items() if big}
    light = {name: item for name, (item, big) in lowered.items() if not big}
    if not parallel:
        return {name: compile_one(item) for name, (item, _) in lowered.items()}
    workers = max(1, min(len(light), (os.cpu_count() or 2) // 2, 8))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {name: pool.submit(compile_one, item) for name, item in light.items()}
        done = {name: compile_one(item) for name, item in heavy.items()}
        done.update({name: future.result() for name, future in futures.items()})
    return done


def kernels_in(lowered):
    """The fused kernels a lowered step calls (`CUSTOM_CALLS`), or `"xla"`."""
    try:
        text = lowered.as_text()
    except Exception:  # a record, not a measurement
        return "unknown"
    found = [name for call, name in CUSTOM_CALLS if call in text]
    return "+".join(found) or "xla"


def cases_by_length(results, part):
    """`[(length, case)]` of a part's cases (keys `part/T<length>`), by T."""
    cases = [
        (int(key.split("/T")[1]), case)
        for key, case in results["cases"].items()
        if key.startswith(f"{part}/T")
    ]
    return sorted(cases, key=lambda item: item[0])


def table_cell(row, reasons):
    """A report cell: ms and the fraction of the peak, or a footnote number
    of why the row was skipped (`reasons`: the report's footnotes, appended
    to)."""
    if "ms" in row:
        return f"{row['ms']:.3g} ({100 * row.get('peak_fraction', 0):.3g}%)"
    reason = row.get("skipped", "not run")
    if reason not in reasons:
        reasons.append(reason)
    return f"skipped [{reasons.index(reason) + 1}]"


def section_lines(title, text, header, rule, case, reasons):
    """The start of a part's section of the report: the heading `title`,
    the paragraph `text`, the table's `header` and `rule` rows, and where
    `case` (the part's record) was skipped or is empty, a row saying why
    (`table_cell`)."""
    lines = ["", f"### {title}", "", text, "", header, rule]
    if "skipped" in case or not case:
        blanks = " |" * (header.count("|") - 2)
        lines.append(f"| {table_cell(case, reasons)} |{blanks}")
    return lines


def bars(ax, groups, series, title):
    """Grouped bars of `series` (`{label: [value per group]}`) on `ax`."""
    if not groups or not any(v for values in series.values() for v in values):
        leave_empty(ax)
        return
    width = 0.8 / len(series)
    positions = np.arange(len(groups))
    for i, (label, values) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar(positions + offset, [v or 0.0 for v in values], width, label=label)
    ax.set_xticks(positions)
    ax.set_xticklabels(groups, fontsize=7, rotation=15)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
