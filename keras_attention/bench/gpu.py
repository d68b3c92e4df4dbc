"""The `gpu` suite: one run of about 8 minutes on one GPU, on the JAX backend.

- `paths`: the path table's training workloads (`gpu_paths`, its
  docstring): our layers with Keras masks, dropout, grouped-query heads, a
  soft cap and packed documents, bfloat16 and float32, against our standard
  path, Keras' layer, `jax.nn`'s cuDNN and tokamax; every fused output
  checked against the standard path's.
- `attention`: attention forward + backward (gradients of queries, keys and
  values) in bfloat16, T = S from 1024 to 32768, batch x T held at 32,768
  tokens, 16 heads of 128, without and with a causal mask, each variant
  compiled with XLA:
  - `ours`: `keras_attention.ops.dot_product_attention`, its standard path;
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
  dense bfloat16 peak (`PEAK_FLOPS`, or `--peak-tflops`) that
  `FLOPS_FORMULA` gives. Where a T's process fails, that T runs once more,
  as do the next, without torch and compiling one variant at a time.
- `seq2seq`: training tokens/s of the `Transformer` and the `RNNSeq2Seq` with
  Bahdanau attention of the `seq2seq` suite (width 512, parameter counts
  matched, mixed bfloat16, `jit_compile`), n = 128 and 512, 16,384 target
  tokens per batch, timed in turn.
- `decode`: generation with the `decode` suite's compiled searches: greedy
  with the Transformer's KV cache and without a cache, and with the RNN's
  state; beam search of width `BEAM_WIDTH` for both models; ms per decoding
  step (one token for each sequence of the batch) and beam / greedy.
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

import numpy as np

from keras_attention.bench import gpu_flex, gpu_paths
from keras_attention.bench.common import describe
from keras_attention.utils.progress import phase

# The dense bfloat16 peak of an H100 / H200 SXM (989.4 TFLOP/s without
# sparsity); other chips need `--peak-tflops`.
PEAK_FLOPS = 989e12
PEAK_DEVICES = ("H100", "H200")
FLOPS_FORMULA = (
    "forward 4·B·H·T·S·D (the two matmuls), backward 2.5x the forward, so "
    "fwd+bwd = 3.5 x 4·B·H·T·S·D; halved when causal"
)
IMPLS = ("ours", "ours_chunked", "keras_flash", "jax_cudnn", "jax_xla", "torch_sdpa")
# The variants that hold the (T, S) scores of every head in memory.
MATERIALIZING = ("ours", "jax_xla")
PEERS = ("keras_flash", "jax_cudnn", "jax_xla", "torch_sdpa")
MASKS = ("full", "causal")
# Below this many seconds left in its part's share a case is not started.
MIN_CASE_S = 10
# A case may run this long past its part's share before its process is killed.
GRACE_S = 60
SECONDS_VARIABLE = "KERAS_ATTENTION_BENCH_SECONDS"

# `rnn_units`: the units that give the RNN + Bahdanau the Transformer's
# parameter count at that width and vocabulary (`seq2seq.matched_units`, which
# builds five models: 18 s on a CPU, so solved once here; the JSON records
# both counts).
FULL = {
    "attention": {
        "lengths": (1024, 2048, 4096, 8192, 16384, 32768),
        "tokens": 32768,
        "heads": 16,
        "head_dim": 128,
        "chunk_size": 256,
        "parallel_compile": True,
        "repeats": 5,
        "long_repeats": 3,
        "long_from": 16384,
    },
    "seq2seq": {
        "lengths": (128, 512),
        "width": 512,
        "tokens_per_batch": 16384,
        "vocabulary_size": 1000,
        "rnn_units": 736,
        "policy": "mixed_bfloat16",
        "repeats": 5,
    },
    "decode": {
        "width": 512,
        "batch_size": 32,
        "source_length": 64,
        "max_length": 256,
        "vocabulary_size": 1000,
        "rnn_units": 736,
        "policy": "mixed_bfloat16",
        "repeats": 5,
    },
    "flex": gpu_flex.FULL,
    "paths": gpu_paths.FULL,
    # Seconds of each part, in order; 8 minutes in all.
    "budgets_s": {
        "paths": 150,
        "attention": 130,
        "seq2seq": 50,
        "decode": 50,
        "flex": 100,
    },
}
QUICK = {
    "attention": {
        "lengths": (64, 128),
        "tokens": 256,
        "heads": 2,
        "head_dim": 16,
        "chunk_size": 32,
        "parallel_compile": True,
        "repeats": 2,
        "long_repeats": 2,
        "long_from": 128,
    },
    "seq2seq": {
        # One n: each compiles both models' train steps (most of the part).
        "lengths": (8,),
        "width": 32,
        "tokens_per_batch": 64,
        "vocabulary_size": 50,
        "rnn_units": 48,
        "policy": "mixed_bfloat16",
        "repeats": 2,
    },
    "decode": {
        "width": 32,
        "batch_size": 2,
        "source_length": 8,
        "max_length": 6,
        "vocabulary_size": 50,
        "rnn_units": 48,
        "policy": "mixed_bfloat16",
        "repeats": 2,
    },
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


def attention_flops(batch, heads, length, head_dim, causal, key_length=None):
    """FLOPs of one attention forward + backward step (`FLOPS_FORMULA`)."""
    key_length = key_length or length
    forward = 4 * batch * heads * length * key_length * head_dim
    return 3.5 * forward * (0.5 if causal else 1.0)


def _time_in_turn(calls, repeats, rows):
    """`time_alternating(calls)` (compiled and warmed up already); where
    timing fails, every call's row records why and nothing is returned."""
    from keras_attention.bench.common import time_alternating

    try:
        return time_alternating(calls, repeats=repeats, warmup=0)
    except Exception as error:
        for name in calls:
            rows[name] = {"skipped": f"while timing: {_reason(error)}"}
        return {}


def _reason(error):
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0]}"[:300]


def _case_seconds():
    """This case's share of the time budget (the parent's environment), or
    None where none was given."""
    value = os.environ.get(SECONDS_VARIABLE)
    return float(value) if value else None


def _device():
    import jax

    device = jax.devices()[0]
    return {
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": len(jax.devices()),
        "jax": jax.__version__,
    }


def _memory_limit_bytes():
    """What the first device may allocate: JAX's allocator limit on an
    accelerator, the host's memory on a CPU."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


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


def _case_attention(case):
    """Every variant of `IMPLS` at one T, per mask, timed in turn: all are
    traced first, compiled together (`compile_steps`), then run once each
    (the warm-up, where a variant that runs out of memory shows) and timed
    in turn."""
    import jax
    import keras

    from keras_attention.bench.common import accelerator, block
    from keras_attention.utils.backend import value_and_grad

    start = time.monotonic()
    seconds = _case_seconds()
    on_accelerator = accelerator() is not None
    dtype = "bfloat16" if on_accelerator else "float32"
    length, heads, head_dim = case["length"], case["heads"], case["head_dim"]
    batch = max(1, case["tokens"] // length)
    shape = (batch, length, heads, head_dim)
    q, k, v = (keras.random.normal(shape, seed=i, dtype=dtype) for i in range(3))
    w = keras.random.normal((head_dim,), seed=3, dtype=dtype)
    limit = _memory_limit_bytes()
    # One float32 (T, S) score tensor for every head of the batch; the
    # standard paths hold about four of them (scores, weights and their
    # gradients) at the peak of a step.
    scores_bytes = 4 * batch * heads * length * length
    repeats = case["long_repeats"] if length >= case["long_from"] else case["repeats"]
    result = {
        "batch": batch,
        "length": length,
        "dtype": dtype,
        "device": _device(),
        "memory_limit_bytes": limit,
        "scores_bytes": scores_bytes,
        "repeats": repeats,
    }
    rows = {mask: {} for mask in MASKS}
    lowered = {}
    for mask in MASKS:
        for impl in IMPLS:
            if impl == "torch_sdpa":
                continue
            if impl in MATERIALIZING and 4 * scores_bytes > 0.9 * limit:
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
                rows[mask][impl] = {"skipped": _reason(error)}
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
                    rows[mask][impl] = {"skipped": _reason(error)}
                    continue
                calls[impl] = (step, args)
                continue
            step = compiled[(mask, impl)]
            try:
                if isinstance(step, Exception):
                    raise step
                block(step(q, k, v, w))  # the warm-up
            except Exception as error:
                rows[mask][impl] = {"skipped": _reason(error)}
                continue
            calls[impl] = (step, (q, k, v, w))
        timings = _time_in_turn(calls, repeats, rows[mask])
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


def _case_seq2seq(case):
    """Transformer against RNN + Bahdanau, training steps timed in turn."""
    import keras

    from keras_attention.bench.common import accelerator
    from keras_attention.bench.seq2seq import (
        build_model,
        compile_for_training,
        training_batch,
    )

    start, seconds = time.monotonic(), _case_seconds()
    policy = case["policy"] if accelerator() is not None else "float32"
    keras.config.set_dtype_policy(policy)
    width, vocabulary_size = case["width"], case["vocabulary_size"]
    units = case["rnn_units"]
    result = {
        "device": _device(),
        "policy": policy,
        "parameters": {},
        "rnn_units": units,
        "lengths": {},
    }
    for length in case["lengths"]:
        if seconds is not None and time.monotonic() - start > seconds:
            result["lengths"][str(length)] = {
                "skipped": "the suite's time budget was spent"
            }
            continue
        batch_size = max(1, case["tokens_per_batch"] // length)
        inputs, labels = training_batch(batch_size, length, vocabulary_size)
        rows, calls = {}, {}
        for name in ("transformer", "rnn-bahdanau"):
            try:
                model = build_model(
                    name,
                    width,
                    length,
                    vocabulary_size,
                    units if name != "transformer" else None,
                )
                compile_for_training(model, jit_compile=True)
                model.train_on_batch(inputs, labels)  # compiles; the warm-up
            except Exception as error:
                rows[name] = {"skipped": _reason(error)}
                continue
            result["parameters"].setdefault(name, model.count_params())
            calls[name] = (model.train_on_batch, (inputs, labels))
        timings = _time_in_turn(calls, case["repeats"], rows)
        for name, timing in timings.items():
            rows[name] = {
                **timing,
                "tokens_per_s": batch_size * length / timing["median_s"],
            }
        result["lengths"][str(length)] = {"batch_size": batch_size, **rows}
    return result


def decode_label(name, search, cached):
    return f"{name}/{search}/{'cache' if cached else 'no_cache'}"


def _case_decode(case):
    """Greedy and beam generation, each search compiled whole, timed in turn."""
    import keras

    from keras_attention.bench.common import accelerator, block
    from keras_attention.bench.decode import generate_function
    from keras_attention.bench.seq2seq import build_model

    policy = case["policy"] if accelerator() is not None else "float32"
    keras.config.set_dtype_policy(policy)
    width, vocabulary_size = case["width"], case["vocabulary_size"]
    max_length, batch_size = case["max_length"], case["batch_size"]
    units = case["rnn_units"]
    source = np.random.default_rng(0).integers(
        4, vocabulary_size, (batch_size, case["source_length"])
    )
    source = source.astype("int32")
    rows, calls, models = {}, {}, {}
    for name, search, cached in DECODE_RUNS:
        label = decode_label(name, search, cached)
        try:
            if name not in models:
                models[name] = build_model(
                    name,
                    width,
                    case["source_length"],
                    vocabulary_size,
                    units if name != "transformer" else None,
                    target_length=max_length,
                )
            beam_width = BEAM_WIDTH if search == "beam" else 1
            generate = generate_function(
                models[name], search, cached, max_length, beam_width
            )
            block(generate(source))  # compiles; the warm-up
        except Exception as error:
            rows[label] = {"skipped": _reason(error)}
            continue
        calls[label] = (generate, (source,))
    timings = _time_in_turn(calls, case["repeats"], rows)
    for label, timing in timings.items():
        rows[label] = {
            **timing,
            "ms_per_step": 1e3 * timing["median_s"] / max_length,
            "tokens_per_s": batch_size * max_length / timing["median_s"],
        }
    return {
        "device": _device(),
        "policy": policy,
        "rnn_units": units,
        "runs": {decode_label(*run): rows[decode_label(*run)] for run in DECODE_RUNS},
    }


CASES = {
    "attention": _case_attention,
    "seq2seq": _case_seq2seq,
    "decode": _case_decode,
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
                _attention_part(measure, config["attention"], quick, has_torch)
            elif part == "flex":
                gpu_flex.flex_part(measure, config["flex"], quick)
            elif part == "paths":
                gpu_paths.paths_part(measure, config["paths"], quick)
            else:
                phase(f"{part}: {PART_TITLES[part]}")
                measure(part, {"kind": part, **config[part]})
        except Exception as error:  # one part's failure leaves the others
            results["cases"][part] = {"skipped": f"error: {_reason(error)}"}
    results["elapsed_s"] = time.monotonic() - started
    summarize(results)
    write_report(results, out, "gpu", markdown(results), plot)
    return results


def _attention_part(measure, config, quick, has_torch):
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


PART_TITLES = {
    "seq2seq": "Transformer vs RNN + Bahdanau training tokens/s",
    "decode": "greedy and beam decoding",
}


def _attention_cases(results):
    """`[(length, case)]` of the attention cases, by T."""
    cases = [
        (int(key.split("/T")[1]), case)
        for key, case in results["cases"].items()
        if key.startswith("attention/T")
    ]
    return sorted(cases, key=lambda item: item[0])


def summarize(results):
    """Adds `device`, `fractions` (of the peak, per mask, impl and T) and
    `ratios` (time of ours over each peer) to `results`."""
    peak = results["peak_flops"]
    fractions, ratios = {}, {}
    for length, case in _attention_cases(results):
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
    for part in ("seq2seq", "decode"):
        case = results["cases"].get(part, {})
        if "device" in case and "device" not in results:
            results["device"] = case["device"]
    seq2seq = results["cases"].get("seq2seq", {})
    for length, rows in seq2seq.get("lengths", {}).items():
        a = rows.get("transformer", {}).get("tokens_per_s")
        b = rows.get("rnn-bahdanau", {}).get("tokens_per_s")
        if a and b:
            ratios[f"seq2seq/transformer_vs_rnn_bahdanau_tokens_per_s/n{length}"] = (
                a / b
            )
    runs = results["cases"].get("decode", {}).get("runs", {})

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
    gpu_flex.summarize(results, fractions, ratios)
    gpu_paths.summarize(results, ratios)
    results["fractions"] = fractions
    results["ratios"] = ratios


def _cell(row, reasons):
    if "ms" in row:
        return f"{row['ms']:.3g} ({100 * row.get('peak_fraction', 0):.3g}%)"
    reason = row.get("skipped", "not run")
    if reason not in reasons:
        reasons.append(reason)
    return f"skipped [{reasons.index(reason) + 1}]"


def _skipped_lines(reasons):
    return [f"[{i}] {reason}" for i, reason in enumerate(reasons, 1)]


def markdown(results):
    config, m = results["config"], results["machine"]
    device = results.get("device", {})
    peak = results["peak_flops"]
    kind = device.get("device_kind", "no case reported its device")
    assumed = ""
    if not results.get("peak_given") and not any(d in kind for d in PEAK_DEVICES):
        assumed = " (an H100/H200 SXM's, not this device's: pass --peak-tflops)"
    lines = [
        f"Machine: {describe(m)}. Cases on the JAX backend"
        + (f" (jax {device['jax']})" if "jax" in device else "")
        + f", device: {kind}; {results.get('elapsed_s', 0):.0f} s in all.",
        "",
        "### Attention forward + backward",
        "",
        f"ms per step (median of the repeats after a warm-up) and, in brackets, "
        f"the fraction of a dense bfloat16 peak of {peak / 1e12:.0f} "
        f"TFLOP/s{assumed}. FLOPs: {results['flops_formula']}. "
        f"{config['attention']['tokens']} tokens per step (B = "
        f"{config['attention']['tokens']} / T), {config['attention']['heads']} "
        f"heads of {config['attention']['head_dim']}; ours chunked with tiles of "
        f"{config['attention']['chunk_size']}. The variants of a row were timed "
        "in turn in one process.",
        "",
        "| mask | T | B | dtype | " + " | ".join(IMPLS) + " |",
        "| --- | ---: | ---: | --- |" + " ---: |" * len(IMPLS),
    ]
    reasons = []
    cases = _attention_cases(results)
    if "attention" in results["cases"]:  # the part failed in this process
        lines.append(f"| {_cell(results['cases']['attention'], reasons)} |")
    for mask in MASKS:
        for length, case in cases:
            if "skipped" in case:
                cells = [_cell(case, reasons)] * len(IMPLS)
                lines.append(f"| {mask} | {length} | | | " + " | ".join(cells) + " |")
                continue
            cells = [_cell(case[mask].get(impl, {}), reasons) for impl in IMPLS]
            lines.append(
                f"| {mask} | {length} | {case['batch']} | {case['dtype']} | "
                + " | ".join(cells)
                + " |"
            )
    for _, case in cases:
        if case.get("torch"):
            lines += ["", f"PyTorch {case['torch']} (CUDA {case['torch_cuda']})."]
            break
    seq2seq = results["cases"].get("seq2seq", {})
    s = config["seq2seq"]
    lines += [
        "",
        "### Seq2seq training, target tokens/s",
        "",
        f"Width {s['width']}, vocabulary {s['vocabulary_size']}, "
        f"{s['tokens_per_batch']} target tokens per batch, policy "
        f"{seq2seq.get('policy', s['policy'])}, `jit_compile`; parameters "
        + ", ".join(f"{k} {v:,}" for k, v in seq2seq.get("parameters", {}).items())
        + (f" (RNN units {seq2seq['rnn_units']})" if "rnn_units" in seq2seq else "")
        + ".",
        "",
        "| n | batch | transformer | rnn-bahdanau | transformer / rnn-bahdanau |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    if "skipped" in seq2seq or not seq2seq:
        lines.append(f"| {_cell(seq2seq, reasons)} | | | | |")
    for length, rows in seq2seq.get("lengths", {}).items():
        cells = []
        for name in ("transformer", "rnn-bahdanau"):
            row = rows.get(name, {"skipped": rows.get("skipped", "not run")})
            cells.append(
                f"{row['tokens_per_s']:.0f}"
                if "tokens_per_s" in row
                else _cell(row, reasons)
            )
        ratio = results["ratios"].get(
            f"seq2seq/transformer_vs_rnn_bahdanau_tokens_per_s/n{length}"
        )
        lines.append(
            f"| {length} | {rows.get('batch_size', '')} | "
            + " | ".join(cells)
            + f" | {'n/a' if ratio is None else f'{ratio:.2f}'} |"
        )
    decode = results["cases"].get("decode", {})
    d = config["decode"]
    lines += [
        "",
        "### Decoding",
        "",
        f"Width {d['width']}, batch {d['batch_size']}, source length "
        f"{d['source_length']}, {d['max_length']} steps, policy "
        f"{decode.get('policy', d['policy'])}; each search one compiled loop. "
        "A step generates one token for each sequence of the batch (beam "
        f"search: for each of its {BEAM_WIDTH} beams).",
        "",
        "| model | search | cache | ms per step | tokens/s |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    if "skipped" in decode or not decode:
        lines.append(f"| {_cell(decode, reasons)} | | | | |")
    for label, row in decode.get("runs", {}).items():
        name, search, cached = label.split("/")
        if "ms_per_step" in row:
            lines.append(
                f"| {name} | {search} | {cached} | {row['ms_per_step']:.3f} | "
                f"{row['tokens_per_s']:.0f} |"
            )
        else:
            lines.append(f"| {name} | {search} | {cached} | {_cell(row, reasons)} | |")
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
    cases = _attention_cases(results)
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
        if not ax.lines:
            ax.text(0.5, 0.5, "not measured in this run", ha="center")
            ax.set_axis_off()
            continue
        ax.set_xscale("log", base=2)
        if ax is time_ax:
            ax.set_yscale("log")
        ax.set_xlabel("sequence length T = S (B·T constant)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fraction_ax.set_title("attention, fraction of peak", fontsize=10)
    time_ax.set_title("attention, time per step", fontsize=10)
    seq2seq = results["cases"].get("seq2seq", {}).get("lengths", {})
    _bars(
        seq2seq_ax,
        [f"n={n}" for n in seq2seq],
        {
            name: [rows.get(name, {}).get("tokens_per_s") for rows in seq2seq.values()]
            for name in ("transformer", "rnn-bahdanau")
        },
        "training target tokens/s",
    )
    runs = results["cases"].get("decode", {}).get("runs", {})
    _bars(
        decode_ax,
        list(runs),
        {"ms per step": [row.get("ms_per_step") for row in runs.values()]},
        "decoding, ms per step",
    )
    gpu_flex.plot_panel(flex_ax, results)
    gpu_paths.plot_panel(paths_ax, results)
    device = results.get("device", {}).get("device_kind", "")
    fig.suptitle(f"JAX, {device}: {describe(results['machine'])}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


def _bars(ax, groups, series, title):
    if not groups or not any(v for values in series.values() for v in values):
        ax.text(0.5, 0.5, "not measured in this run", ha="center")
        ax.set_axis_off()
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
