"""keras-hub's Llama trained at long context: its own attention against ours
(`keras_attention.integrations.keras_hub.swap_attention`), on this CPU.

A tiny `keras_hub.models.LlamaCausalLM` (vocabulary 100, hidden 64, 2 layers,
4 query heads, 2 key/value heads, intermediate 128, float32) takes training
steps (forward, loss, gradient, Adam update; `train_on_batch`, compiled as
keras-hub compiles it) on one row of `T` tokens:

- `keras_hub`: the model as keras-hub builds it. Its blocks build a dense
  `(B, T, S)` mask and its attention the `(B, N, T, S)` scores, so its memory
  grows as `T^2`;
- `ours`: the same model after `swap_attention(causal_lm)` (by default no
  option: our layer takes the chunked path by length) or with
  `--chunk-size`.

Each (case, length) runs in a process of its own whose address space is
limited (`resource.setrlimit(RLIMIT_AS)`, `--limit-gib`, 8 by default: the
framework's own mappings take about 2.5 GiB of it), so a case that needs more
fails with an allocation error instead of taking the machine down; the
process reports its peak resident memory (`VmHWM`, reset after the model is
built, so the peak covers the compiling step and the timed ones) and the
median seconds of `--steps` steps after a first, compiling one. Memory is
reliable on a shared machine; times are not (other processes share the
CPU), they are recorded anyway.

`--model gemma2`: a tiny Gemma 2 (`GemmaCausalLM` with both soft caps and a
sliding window of 4,096 keys in every other layer) in place of the Llama,
written to `OUT/keras-hub-long-context-gemma2.json`. `--model gpt_oss`: a
tiny GPT-OSS (learned sinks, a window of 128 keys in every other layer, 4
experts), written to `OUT/keras-hub-long-context-gpt_oss.json`. `--model
qwen3_5`: a tiny Qwen 3.5 of two full-attention layers (ours after the
swap, with the packed gate and keras-hub's window of 32,768 keys); its Gated
DeltaNet layers are keras-hub's either way, and one alone takes 4.2 GB at
8,192 tokens here, so none is in the benchmark. Written to
`OUT/keras-hub-long-context-qwen3_5.json`. `--model
gemma4`: a tiny Gemma 4 (a window of 512 keys in layer 0, a global layer
with keys as values), written to `OUT/keras-hub-long-context-gemma4.json`.

Usage: `python benchmarks/keras_hub_long_context.py --backend tensorflow
[--model llama] [--lengths 4096 8192 16384 32768] [--limit-gib 8] [--steps 2] [--out
docs/data] [--plot docs/images/keras-hub-long-context.png]` (writes
`OUT/keras-hub-long-context.json`; with several backends in one file, each
run adds or replaces its backend's rows of the cases and lengths it
measures).
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

CONFIG = dict(
    vocabulary_size=100,
    num_layers=2,
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=64,
    intermediate_dim=128,
)
# `--model`: keras-hub's classes and the configuration. Gemma 2's: both soft
# caps and its sliding window of 4,096 keys in every other layer.
MODELS = {
    "llama": ("LlamaBackbone", "LlamaCausalLM", CONFIG),
    "gemma2": (
        "GemmaBackbone",
        "GemmaCausalLM",
        dict(
            CONFIG,
            head_dim=16,
            query_head_dim_normalize=False,
            use_post_ffw_norm=True,
            use_post_attention_norm=True,
            attention_logit_soft_cap=50.0,
            final_logit_soft_cap=30.0,
            use_sliding_window_attention=True,
            sliding_window_size=4096,
        ),
    ),
    # GPT-OSS: learned sinks (keras-hub adds them as a logit column of its
    # dense scores), biases, a window of 128 keys in every other layer, a
    # mixture of 4 experts.
    "gpt_oss": (
        "GptOssBackbone",
        "GptOssCausalLM",
        dict(CONFIG, num_experts=4, top_k=2, sliding_window=128),
    ),
    # Qwen 3.5: a DeltaNet layer (keras-hub's, swapped or not), then a
    # full-attention one (gate packed in the query kernel, rotary on a
    # quarter of each head, keras-hub's default window of 32,768 keys).
    # Qwen 3.5: two full-attention layers (gate packed in the query kernel,
    # rotary on a quarter of each head, keras-hub's default window of 32,768
    # keys). Its DeltaNet layers, keras-hub's in both cases, are left out:
    # one alone peaks at 4.2 GB at 8,192 tokens on this CPU (TensorFlow).
    "qwen3_5": (
        "Qwen3_5Backbone",
        "Qwen3_5CausalLM",
        dict(CONFIG, head_dim=16, layer_types=["full_attention"] * 2),
    ),
    # Gemma 4: a window of 512 keys in layer 0, a global layer 1 of head
    # size 32 with one key/value head taking the keys as values and a
    # partial rotary embedding; scores scaled by 1, query/key/value norms.
    "gemma4": (
        "Gemma4Backbone",
        "Gemma4CausalLM",
        dict(
            CONFIG,
            image_size=16,
            head_dim=16,
            sliding_window_size=512,
            sliding_window_pattern=2,
            global_head_dim=32,
            num_global_key_value_heads=1,
            global_rope_partial_rotary_factor=0.25,
        ),
    ),
}
CASES = ("keras_hub", "ours")


def _status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return None


def run_case(case, length, steps, chunk_size, model="llama"):
    """Trains `case` at `length` in this process; returns the result dict."""
    import keras
    import keras_hub
    import numpy as np

    keras.utils.set_random_seed(0)
    backbone_name, task_name, config = MODELS[model]
    backbone = getattr(keras_hub.models, backbone_name)(**config)
    causal_lm = getattr(keras_hub.models, task_name)(
        backbone=backbone, preprocessor=None
    )
    if case == "ours":
        from keras_attention.integrations.keras_hub import swap_attention

        options = {} if chunk_size is None else {"chunk_size": chunk_size}
        causal_lm = swap_attention(causal_lm, **options)
    causal_lm.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, CONFIG["vocabulary_size"], size=(1, length + 1))
    x = {
        "token_ids": tokens[:, :-1].astype("int32"),
        "padding_mask": np.ones((1, length), "int32"),
    }
    if "position_ids" in backbone.input:  # Gemma 4's backbone takes them
        x["position_ids"] = np.arange(length, dtype="int32")[None]
    y = tokens[:, 1:].astype("int32")
    before = _status_mb("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM: the peak from here on
    started = time.perf_counter()
    losses = [float(causal_lm.train_on_batch(x, y, return_dict=True)["loss"])]
    first = time.perf_counter() - started
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        losses.append(float(causal_lm.train_on_batch(x, y, return_dict=True)["loss"]))
        times.append(time.perf_counter() - started)
    return {
        "case": case,
        "length": length,
        "ok": True,
        "before_mb": before,
        "peak_mb": _status_mb("VmHWM:"),
        "first_step_s": first,
        "step_s": float(np.median(times)) if times else None,
        "losses": losses,
    }


def run_in_process(backend, case, length, steps, chunk_size, limit_gib, model):
    """`run_case` in a child process limited to `limit_gib` of address space;
    a failure (out of memory) is a result too."""
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        case,
        str(length),
        "--steps",
        str(steps),
        "--limit-gib",
        str(limit_gib),
        "--model",
        model,
    ]
    if chunk_size is not None:
        command += ["--chunk-size", str(chunk_size)]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    error = (done.stderr or done.stdout).strip().splitlines()
    errors = [
        line
        for line in error
        if re.search(r"(?i)memory|alloc|resource|killed|error", line)
    ]
    if done.returncode < 0:
        errors.append(f"killed by signal {-done.returncode}")
    return {
        "case": case,
        "length": length,
        "ok": False,
        "returncode": done.returncode,
        "seconds_until_failure": time.perf_counter() - started,
        "error": (errors or error or ["(no output)"])[-1][:300],
    }


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (memory, speed) = plt.subplots(1, 2, figsize=(10, 4))
    for backend, rows in results["backends"].items():
        for case in CASES:
            done = [r for r in rows if r["case"] == case and r["ok"]]
            failed = [r for r in rows if r["case"] == case and not r["ok"]]
            label = f"{case} ({backend})"
            style = "o-" if case == "ours" else "s--"
            line = memory.plot(
                [r["length"] for r in done],
                [r["peak_mb"] / 1024 for r in done],
                style,
                label=label,
            )[0]
            if failed:
                memory.plot(
                    [r["length"] for r in failed],
                    [results["limit_gib"]] * len(failed),
                    "x",
                    color=line.get_color(),
                    markersize=10,
                    label=f"{label}: out of memory",
                )
            speed.plot(
                [r["length"] for r in done],
                [r["step_s"] for r in done],
                style,
                label=label,
            )
    memory.axhline(results["limit_gib"], color="grey", lw=0.8, ls=":")
    for axis, title in (
        (memory, "peak resident memory (GiB) of a training step"),
        (speed, "seconds per training step (shared CPU)"),
    ):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("sequence length T")
        axis.set_title(title, fontsize=10)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def plot_models(out, models, path):
    """One memory panel per model of `models` (their JSON files in `out`):
    the peak of keras-hub's training step and ours against T, an x where a
    case ran out of memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.6))
    axes = [axes] if len(models) == 1 else list(axes)
    for axis, model in zip(axes, models, strict=True):
        with open(os.path.join(out, f"keras-hub-long-context-{model}.json")) as f:
            results = json.load(f)
        for backend, rows in results["backends"].items():
            for case in CASES:
                done = [r for r in rows if r["case"] == case and r["ok"]]
                failed = [r for r in rows if r["case"] == case and not r["ok"]]
                style = "o-" if case == "ours" else "s--"
                line = axis.plot(
                    [r["length"] for r in done],
                    [r["peak_mb"] / 1024 for r in done],
                    style,
                    label=f"{case} ({backend})",
                )[0]
                axis.plot(
                    [r["length"] for r in failed],
                    [results["limit_gib"]] * len(failed),
                    "x",
                    color=line.get_color(),
                    markersize=10,
                    label=f"{case}: out of memory" if failed else None,
                )
        axis.axhline(results["limit_gib"], color="grey", lw=0.8, ls=":")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("sequence length T")
        axis.set_title(f"{results['model']['class'].split('.')[-1]}: peak GiB")
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tensorflow")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768]
    )
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--limit-gib", type=float, default=8.0)
    parser.add_argument("--out", default="docs/data")
    parser.add_argument("--plot", default=None)
    parser.add_argument("--model", choices=sorted(MODELS), default="llama")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "LENGTH"))
    parser.add_argument(
        "--plot-models",
        nargs="+",
        help="runs nothing: plots these models' memory from their files in --out",
    )
    args = parser.parse_args(argv)
    if args.plot_models:
        plot_models(args.out, args.plot_models, args.plot)
        return
    if args.child:
        import resource

        limit = int(args.limit_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        case, length = args.child
        result = run_case(case, int(length), args.steps, args.chunk_size, args.model)
        print(json.dumps(result), flush=True)
        return
    suffix = "" if args.model == "llama" else f"-{args.model}"
    path = os.path.join(args.out, f"keras-hub-long-context{suffix}.json")
    results = {"backends": {}}
    if os.path.exists(path):
        with open(path) as f:
            results = json.load(f)
    from importlib.metadata import version

    results.update(
        model={
            "class": f"keras_hub.models.{MODELS[args.model][1]}",
            **MODELS[args.model][2],
        },
        batch_size=1,
        limit_gib=args.limit_gib,
        chunk_size=args.chunk_size,
        steps_timed=args.steps,
        machine={
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "keras_hub": version("keras-hub"),
            "backend": args.backend,
            "note": "shared machine: memory reliable, times not",
        },
    )
    # A run replaces the rows of the (case, length) pairs it measures.
    rows = results["backends"].get(args.backend, [])
    for length in args.lengths:
        for case in args.cases:
            row = run_in_process(
                args.backend,
                case,
                length,
                args.steps,
                args.chunk_size,
                args.limit_gib,
                args.model,
            )
            print(args.backend, json.dumps(row), flush=True)
            rows = [r for r in rows if (r["case"], r["length"]) != (case, length)] + [
                row
            ]
            rows.sort(key=lambda r: (r["length"], CASES.index(r["case"])))
            results["backends"][args.backend] = rows
            os.makedirs(args.out, exist_ok=True)
            with open(path, "w") as f:
                json.dump(results, f, indent=2)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
