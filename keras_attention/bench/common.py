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
    }
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        info["tensorflow"] = tf.__version__
        info["devices"] = [d.name for d in tf.config.list_logical_devices()]
    elif backend == "jax":
        import jax

        info["jax"] = jax.__version__
        info["devices"] = [str(d) for d in jax.devices()]
    return info


def jit(fn):
    """Compiles `fn` with XLA on the current backend."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True, autograph=False)
    if backend == "jax":
        import jax

        return jax.jit(fn)
    raise NotImplementedError(f"no XLA compile for backend {backend!r}")


def value_and_grad(loss_fn):
    """`f(*tensors) -> (loss, grads wrt tensors)` on the current backend."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def fn(*tensors):
            with tf.GradientTape() as tape:
                tape.watch(tensors)
                loss = loss_fn(*tensors)
            return loss, tape.gradient(loss, tensors)

        return fn
    if backend == "jax":
        import jax

        return jax.value_and_grad(loss_fn, argnums=tuple(range(8)), allow_int=True)
    raise NotImplementedError(backend)


def block(result):
    """Waits for asynchronous backends to finish computing `result`."""
    for leaf in keras.tree.flatten(result):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
        elif hasattr(leaf, "numpy"):
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


def peak_rss_bytes():
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_isolated(module, case, timeout):
    """Runs `python -m module --case JSON` in a fresh process and returns its
    JSON result, so that its peak memory is its own; a crash or a memory kill
    is reported as such instead of taking the suite down."""
    command = [sys.executable, "-m", module, "--case", json.dumps(case)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"exceeded {timeout} s"}
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-1:] or [""]
        reason = "killed (out of memory?)" if done.returncode < 0 else tail[0]
        return {"skipped": f"exit {done.returncode}: {reason}"[:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])
