"""Timing, memory and machine facts shared by the benchmark suites.

Every suite reports ratios of timings taken side by side in one run, with XLA
on, warm-up (compilation) excluded, the median of several repetitions and
their spread.
"""

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import keras
import numpy as np

from keras_attention.utils.backend import compile_function, value_and_grad
from keras_attention.utils.files import write_text

# What a figure's panel says where the run measured nothing for it.
NOT_MEASURED = "not measured in this run"


def machine():
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "backend": keras.backend.backend(),
        "keras": keras.__version__,
        "python": platform.python_version(),
        "accelerator": accelerator(),
    }
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        info["tensorflow"] = tf.__version__
        info["devices"] = [d.name for d in tf.config.list_logical_devices()]
    elif backend == "jax":
        import jax

        info["jax"] = jax.__version__
        info["devices"] = [f"{d} ({d.device_kind})" for d in jax.devices()]
    return info


def new_results(suite, quick, config=None):
    """The JSON record every suite starts from: its name, the run size, the
    machine and the configuration, and an empty `cases`."""
    results = {"suite": suite, "quick": quick, "machine": machine()}
    if config is not None:
        results["config"] = dict(config)
    results["cases"] = {}
    return results


def start_suite(suite, quick, full, quick_config):
    """The configuration of a run of `suite`, `quick_config` for a CI-sized
    run and `full` otherwise, and the results record it starts
    (`new_results`)."""
    config = quick_config if quick else full
    return config, new_results(suite, quick, config)


def describe(info):
    """One line naming the machine of `machine()`, for tables and plots."""
    text = f"{info['cpu']} ({info['cores']} cores)"
    if info.get("accelerator"):
        text += f", {info['devices'][0]}"
    return f"{text}, {info['backend']} backend, keras {info['keras']}"


def accelerator():
    """The kind of accelerator the backend computes on (`"gpu"`, `"tpu"`), or
    None on a CPU."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        kind = jax.default_backend()
        return None if kind == "cpu" else kind
    if backend == "tensorflow":
        import tensorflow as tf

        return "gpu" if tf.config.list_logical_devices("GPU") else None
    return None


def jit(fn):
    """Compiles a pure function of tensors with XLA on the current backend."""
    if keras.backend.backend() not in ("tensorflow", "jax"):
        raise NotImplementedError(
            f"no XLA compile for backend {keras.backend.backend()!r}"
        )
    return compile_function(fn)


def block(result):
    """Waits for asynchronous backends (and torch on a GPU) to finish
    computing `result`."""
    for leaf in keras.tree.flatten(result):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
        elif getattr(leaf, "is_cuda", False):
            import torch

            torch.cuda.synchronize()
        elif hasattr(leaf, "numpy") and not hasattr(leaf, "is_cuda"):
            leaf.numpy()
    return result


def time_call(fn, *args, repeats=5, warmup=1):
    """Median and spread (min, max) in seconds of `fn(*args)`, after warm-up."""
    for _ in range(warmup):
        block(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn(*args))
        times.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "repeats": repeats,
    }


def time_alternating(calls, repeats=5, warmup=1):
    """`time_call` for several functions at once, taking turns: each
    repetition times every `name: (fn, args)` of `calls` once, so that a
    change in the machine's speed (another process, the clock) weighs on all
    of them alike and their ratios stay fair. Returns `{name: timing}`."""
    for fn, args in calls.values():
        for _ in range(warmup):
            block(fn(*args))
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, (fn, args) in calls.items():
            start = time.perf_counter()
            block(fn(*args))
            times[name].append(time.perf_counter() - start)
    return {
        name: {
            "median_s": statistics.median(t),
            "min_s": min(t),
            "max_s": max(t),
            "repeats": repeats,
        }
        for name, t in times.items()
    }


def peak_memory_bytes():
    """Peak memory of this process so far: on the accelerator where the JAX
    backend computes on one, else resident host memory (Linux reports KiB)."""
    if keras.backend.backend() == "jax" and accelerator():
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            return stats["peak_bytes_in_use"]
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_memory_growth(baseline):
    """How far the peak rose above `baseline` (a `peak_memory_bytes()` read
    before the case), or None where it did not rise: a case run in a process
    that had already peaked higher (a quick, in-process run) says nothing
    about its own memory."""
    growth = peak_memory_bytes() - baseline
    return growth if growth > 0 else None


def earlier_cases(out, results):
    """The cases of an earlier run of the same suite in `out` on the same
    machine and at the same size, so that a re-run measures only what is
    missing (a suite can take an hour; an interrupted one resumes)."""
    path = os.path.join(out, f"{results['suite']}.json")
    try:
        with open(path) as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        return {}
    same = (
        earlier.get("machine") == results["machine"]
        and earlier.get("quick") == results["quick"]
    )
    return earlier.get("cases", {}) if same else {}


def case_runner(suite, cases, results, out, timeout, isolated=True, env=None):
    """Returns `measure(key, case)`, which runs one case (`run_case`), stores its
    result as `results["cases"][key]` and rewrites `out/SUITE.json` at once. A
    suite killed half-way thus keeps the cases it measured, and re-running it
    with the same `out` on the same machine measures only the missing ones.
    `env`, where given, is the environment of the isolated cases' processes."""
    earlier = earlier_cases(out, results)
    path = os.path.join(out, f"{results['suite']}.json")

    def measure(key, case):
        result = run_case(suite, cases, case, timeout, isolated, earlier.get(key), env)
        results["cases"][key] = result
        _write_json(results, path)
        return result

    return measure


def _write_json(results, path):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_text(path, json.dumps(results, indent=2))


def run_case(suite, cases, case, timeout, isolated=True, earlier=None, env=None):
    """Runs one case: in a fresh process (`run_isolated`) or, for quick runs
    where start-up would dominate, in this one (a failure then propagates).
    `earlier`, the result of an earlier run, is returned instead when it ran
    the same case to the end. The result records its case."""
    if earlier and earlier.get("case") == case and "skipped" not in earlier:
        return earlier
    if isolated:
        result = run_isolated(suite, case, timeout, env)
    else:
        result = cases[case["kind"]](case)
        keras.backend.clear_session()
    return {**result, "case": case}


def run_isolated(suite, case, timeout, env=None):
    """Runs `python -m keras_attention.bench --suite SUITE --case JSON` in a
    fresh process and returns its JSON result, so that its peak memory is its
    own; a crash or a memory kill is reported, with the error, instead of
    taking the suite down. `env`: the process's environment (default: this
    one's)."""
    command = [
        sys.executable,
        *("-m", "keras_attention.bench", "--suite", suite),
        *("--case", json.dumps(case)),
    ]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"exceeded {timeout} s"}
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines() or [""]
        errors = [line for line in lines if "Error" in line]
        reason = (errors or lines)[-1]
        if done.returncode < 0 and not errors:
            reason = f"killed by signal {-done.returncode} (out of memory?)"
        return {"skipped": f"exit {done.returncode}: {reason}"[:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def layer_value_and_grad(layer, forward):
    """`(trainable values, x) -> (loss, (grads of values, grad of x))`: the
    forward and backward pass of `forward(x)` (which calls `layer`) on any
    backend, with the layer's weights as explicit inputs so that XLA compiles
    one pure function."""

    def loss(values, x):
        mapping = list(zip(layer.trainable_variables, values, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            out = forward(x)
        return keras.ops.mean(keras.ops.square(keras.ops.cast(out, "float32")))

    return value_and_grad(loss)


def fit_exponent(xs, ys):
    """The slope of `log y` against `log x` (least squares): `y ~ x^slope`."""
    if len(xs) < 2:
        return None
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def leave_empty(ax, text=NOT_MEASURED):
    """Hides `ax`'s axes and says why: a figure keeps its layout when a run
    measured nothing for one of its panels."""
    ax.text(0.5, 0.5, text, ha="center")
    ax.set_axis_off()


def finish_axes(ax, xlabel, ylabel, log_y=False, legend_size=8, empty=NOT_MEASURED):
    """Labels a panel of curves against a length that doubles (a log-2 x
    axis; `log_y`: a log y axis too), with its grid and legend; a panel with
    no curve is left empty (`leave_empty`, saying `empty`). Returns whether
    it had curves."""
    if not ax.lines:
        leave_empty(ax, empty)
        return False
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size)
    return True


def write_report(results, out, name, markdown, plot):
    """Writes `name.json`, `name.md` (and prints it) and `name.png` under `out`."""
    _write_json(results, os.path.join(out, f"{name}.json"))
    write_text(os.path.join(out, f"{name}.md"), markdown)
    plot(results, os.path.join(out, f"{name}.png"))
    print(markdown)
