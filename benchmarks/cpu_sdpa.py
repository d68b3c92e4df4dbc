"""Our attention against PyTorch's `scaled_dot_product_attention` on this
machine's CPU, side by side in one process: causal attention, forward and
backward (gradients of the inputs), B = 1, 8 heads of 64, float32.

On the PyTorch backend (`--backend torch`), where our dispatch hands the call
to SDPA (`keras_attention.ops.plan`):

- `ours`, `ours_chunked`, `ours_standard`: `dot_product_attention(...,
  is_causal=True)` by default, with `chunk_size=256` and with
  `flash_attention=False`, against `torch_sdpa` called directly;
- `layer_ours`: `keras_attention.layers.MultiHeadAttention(8, 64)` called as a
  user calls it (`use_causal_mask=True`, width 512), against `layer_sdpa`: the
  same weights' projections in PyTorch around SDPA called directly.

On TensorFlow or JAX (`--backend tensorflow|jax`), where no fused CPU kernel
exists: `ours_flash`, `dot_product_attention(..., flash_attention=True)` (the
chunked path), its forward and backward compiled with XLA, against
`torch_sdpa` (eager PyTorch in the same process).

Each length times every implementation in turn after a warm-up (median of
`--repeats`); `speed_vs_sdpa` is SDPA's time over the implementation's. With
`--memory`, every (implementation, length) also runs once in a process of its
own, which reports its peak resident memory and the resident memory before
the call (the framework's own), so the difference is the call's.

Usage: `python benchmarks/cpu_sdpa.py --backend tensorflow [--lengths 4096
16384] [--repeats 3] [--memory] [--out DIR]` (writes
`DIR/cpu_sdpa_<backend>.json`).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HEADS, HEAD_DIM, WIDTH = 8, 64, 512


def _inputs(length, shape=None):
    import numpy as np

    rng = np.random.default_rng(0)
    shape = shape or (1, length, HEADS, HEAD_DIM)
    return [rng.normal(size=shape).astype("float32") for _ in range(3)]


def _torch_sdpa_step(length):
    import torch

    tensors = [torch.tensor(x).transpose(1, 2).contiguous() for x in _inputs(length)]

    def step():
        q, k, v = (x.detach().requires_grad_() for x in tensors)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()

    return step


def _torch_op_step(length, **options):
    import torch

    from keras_attention.ops import dot_product_attention

    tensors = [torch.tensor(x) for x in _inputs(length)]

    def step():
        q, k, v = (x.detach().requires_grad_() for x in tensors)
        dot_product_attention(q, k, v, is_causal=True, **options).sum().backward()

    return step


def _torch_layers(length):
    """`(ours, sdpa)`: our layer as called, and its weights around SDPA."""
    import torch

    from keras_attention.layers import MultiHeadAttention

    layer = MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM)
    x = torch.tensor(_inputs(length, (1, length, WIDTH))[0])
    layer(x, x, use_causal_mask=True)
    named = {w.path: w.value for w in layer.weights}
    weights = {p.split("/")[-2]: w for p, w in named.items() if "kernel" in p}
    biases = {p.split("/")[-2]: w for p, w in named.items() if "bias" in p}

    def ours():
        inputs = x.detach().requires_grad_()
        layer(inputs, inputs, use_causal_mask=True).sum().backward()

    def project(inputs, name):
        return (
            torch.einsum("btd,dnh->bnth", inputs, weights[name])
            + biases[name][None, :, None, :]
        )

    def sdpa():
        inputs = x.detach().requires_grad_()
        q, k, v = (project(inputs, name) for name in ("query", "key", "value"))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = torch.einsum("bnth,nhd->btd", out, weights["attention_output"])
        (out + biases["attention_output"]).sum().backward()

    return ours, sdpa


def _xla_step(length):
    import keras

    from keras_attention.ops import dot_product_attention

    def loss(q, k, v):
        out = dot_product_attention(q, k, v, is_causal=True, flash_attention=True)
        return keras.ops.sum(out)

    inputs = _inputs(length)
    if keras.backend.backend() == "jax":
        import jax

        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
        arrays = [jax.numpy.asarray(x) for x in inputs]
        return lambda: [g.block_until_ready() for g in grads(*arrays)]
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def grads(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            value = loss(q, k, v)
        return tape.gradient(value, [q, k, v])

    tensors = [tf.constant(x) for x in inputs]
    return lambda: [g.numpy() for g in grads(*tensors)]


def steps(backend, length, only=None):
    """`{name: step}` of the implementations on `backend` at `length`."""
    makers = {"torch_sdpa": lambda: _torch_sdpa_step(length)}
    if backend == "torch":
        makers["ours"] = lambda: _torch_op_step(length)
        makers["ours_chunked"] = lambda: _torch_op_step(length, chunk_size=256)
        makers["ours_standard"] = lambda: _torch_op_step(length, flash_attention=False)
        layers = {}

        def layer(index):
            if not layers:
                layers["pair"] = _torch_layers(length)
            return layers["pair"][index]

        makers["layer_ours"] = lambda: layer(0)
        makers["layer_sdpa"] = lambda: layer(1)
    else:
        makers["ours_flash"] = lambda: _xla_step(length)
    return {name: make() for name, make in makers.items() if only in (None, name)}


def time_in_turn(backend, length, repeats, only=None):
    import numpy as np

    from keras_attention.ops import attention_path

    calls = steps(backend, length)
    if only:
        calls = {name: step for name, step in calls.items() if name in only}
    for step in calls.values():
        step()  # compiles (XLA) and warms up
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, step in calls.items():
            started = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - started)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    q = _inputs(8)[0]
    pairs = {"layer_ours": "layer_sdpa", "layer_sdpa": "layer_sdpa"}
    return {
        "path": attention_path(q, q, is_causal=True, flash_attention=True),
        "median_s": medians,
        "speed_vs_sdpa": {
            name: medians[pairs.get(name, "torch_sdpa")] / medians[name]
            for name in medians
            if pairs.get(name, "torch_sdpa") in medians
        },
    }


def peak_memory(backend, length, name):
    """Resident memory before one call of `name` (in a process of its own,
    after a first call that compiles) and its peak during the call, in MB:
    Linux's peak (`VmHWM`) is reset first, so that neither the framework's
    import nor the compilation counts."""
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); import cpu_sdpa;"
        f"step = cpu_sdpa.steps({backend!r}, {length}, only={name!r})[{name!r}];"
        "step();"  # compiles (XLA) and warms up
        "before = cpu_sdpa.resident_mb();"
        "open('/proc/self/clear_refs', 'w').write('5');"
        "step();"
        "print(json.dumps({'before_mb': before, 'peak_mb': cpu_sdpa.peak_mb()}))"
    )
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    if done.returncode:
        return {"skipped": done.stderr.strip().splitlines()[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _status_mb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def resident_mb():
    return _status_mb("VmRSS:")


def peak_mb():
    """The peak resident memory since the last reset (`clear_refs`)."""
    return _status_mb("VmHWM:")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("torch", "tensorflow", "jax"))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument(
        "--only", nargs="+", help="these implementations (and their references)"
    )
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = args.backend
    import keras
    import torch

    results = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "backend": args.backend,
            "keras": keras.__version__,
            "torch": torch.__version__,
        },
        "lengths": {},
    }
    for length in args.lengths:
        only = None
        if args.only:
            only = {*args.only, "torch_sdpa"}
            only |= {"layer_sdpa"} if "layer_ours" in only else set()
        row = time_in_turn(args.backend, length, args.repeats, only)
        if args.memory:
            row["memory"] = {
                name: peak_memory(args.backend, length, name)
                for name in row["median_s"]
            }
        results["lengths"][str(length)] = row
        print(length, json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"cpu_sdpa_{args.backend}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"peak resident memory of this process: {peak_mb():.0f} MB")


if __name__ == "__main__":
    main()
