"""The `scaling` suite: the Transformer's training step under
`keras.distribution` on JAX, on 1, 2 and 4 devices, data- and model-parallel.

For `Transformer.from_preset("transformer_base")` (Vaswani et al.'s base
model, d=512, 8 heads, 6+6 blocks) and one global batch of sentence pairs,
in one process over the first 1, 2 or 4 devices (GPUs, or virtual CPU
devices where JAX sees no accelerator:
`--xla_force_host_platform_device_count=4`):

- `step_s`: the median time of one `train_on_batch` (forward, backward, Adam
  update), every configuration timed in turn (`time_alternating`), so that a
  change in the machine's speed weighs on all alike;
- `state_bytes_per_device`: the bytes of the weights and the optimizer state
  held by the fullest device, read from the arrays' shards: what data
  parallelism copies onto every device and model parallelism
  (`models.transformer_layout_map`, Megatron-style) splits. Activations are
  not included: only accelerators report a device's memory (`peak_bytes` on
  them, the peak of each device in use after all steps).

The global batch stays the same for every device count (strong scaling).
Virtual CPU devices share the CPU's cores: there the step time shows what
splitting costs (the collectives, the partitioned programs), never a
speed-up; the state per device is real on any device. Usage:
`python -m keras_attention.bench --suite scaling [--quick] [--out DIR]`
(the case runs on the JAX backend in a process of its own).
"""

import os

import numpy as np

from keras_attention.bench.common import (
    case_runner,
    describe,
    start_suite,
    write_report,
)
from keras_attention.utils.files import written_whole
from keras_attention.utils.progress import phase

FULL = {
    "preset": "transformer_base",
    "vocabulary_size": 8000,
    "length": 32,
    "batch_size": 16,
    "devices": (1, 2, 4),
    "repeats": 5,
}
QUICK = {
    "preset": None,
    "vocabulary_size": 64,
    "length": 8,
    "batch_size": 8,
    "devices": (1, 2),
    "repeats": 1,
}
TINY = {
    "hidden_dim": 16,
    "num_heads": 2,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "intermediate_dim": 32,
}


def configurations(device_counts):
    """`{name: (strategy, devices)}`: one device, then data- and
    model-parallel over each larger count."""
    names = {"1 device": (None, 1)}
    for count in device_counts:
        if count > 1:
            names[f"data-parallel {count}"] = ("data-parallel", count)
            names[f"model-parallel {count}"] = ("model-parallel", count)
    return names


def _distribution(strategy, count):
    import keras

    from keras_attention.models import transformer_layout_map

    devices = keras.distribution.list_devices()[:count]
    if strategy == "data-parallel":
        return keras.distribution.DataParallel(devices=devices)
    mesh = keras.distribution.DeviceMesh((1, count), ("batch", "model"), devices)
    return keras.distribution.ModelParallel(
        layout_map=transformer_layout_map(mesh), batch_dim_name="batch"
    )


def _scope(distribution):
    import contextlib

    return distribution.scope() if distribution else contextlib.nullcontext()


def _build(case):
    import keras

    from keras_attention.models import Transformer

    sizes = {
        "source_vocabulary_size": case["vocabulary_size"],
        "target_vocabulary_size": case["vocabulary_size"],
        "max_source_length": case["length"],
        "max_target_length": case["length"],
    }
    keras.utils.set_random_seed(0)
    if case["preset"]:
        model = Transformer.from_preset(case["preset"], dropout=0.0, **sizes)
    else:
        model = Transformer(dropout=0.0, **TINY, **sizes)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def state_bytes_per_device(model):
    """Bytes of weights and optimizer state on the fullest device."""
    per_device = {}
    for variable in [*model.variables, *model.optimizer.variables]:
        for shard in variable.value.addressable_shards:
            key = shard.device.id
            per_device[key] = per_device.get(key, 0) + shard.data.nbytes
    return max(per_device.values())


def _case_steps(case):
    import jax
    import keras

    from keras_attention.bench.common import time_alternating

    rng = np.random.default_rng(0)
    shape = (case["batch_size"], case["length"])
    x = {
        "encoder_token_ids": rng.integers(4, case["vocabulary_size"], shape),
        "decoder_token_ids": rng.integers(4, case["vocabulary_size"], shape),
    }
    x = {key: value.astype("int32") for key, value in x.items()}
    y = rng.integers(4, case["vocabulary_size"], shape).astype("int32")
    calls, models, results = {}, {}, {}
    for name, (strategy, count) in configurations(case["devices"]).items():
        distribution = None if strategy is None else _distribution(strategy, count)
        with _scope(distribution):
            model = _build(case)

        def step(model=model, distribution=distribution):
            with _scope(distribution):
                return model.train_on_batch(x, y)

        first_loss = float(step())
        results[name] = {
            "devices": count,
            "strategy": strategy or "none",
            "first_loss": first_loss,
            "parameters": model.count_params(),
        }
        calls[name] = (step, ())
        models[name] = model
    timings = time_alternating(calls, repeats=case["repeats"], warmup=1)
    for name in calls:
        results[name].update(timings[name])
        results[name]["step_s"] = timings[name]["median_s"]
    # Read after training, when the optimizer state exists.
    for name, model in models.items():
        results[name]["state_bytes_per_device"] = state_bytes_per_device(model)
    peaks = [
        (device.memory_stats() or {}).get("peak_bytes_in_use")
        for device in jax.devices()
    ]
    if any(peak is not None for peak in peaks):
        results["peak_bytes_per_device"] = peaks
    results["device_kind"] = jax.devices()[0].device_kind
    results["num_devices"] = len(jax.devices())
    results["keras"] = keras.__version__
    results["jax"] = jax.__version__
    return results


CASES = {"steps": _case_steps}


def case_environment(num_devices):
    """The environment of the case's process: the JAX backend and, on a CPU,
    `num_devices` virtual devices (the flag changes nothing on a GPU)."""
    flags = os.environ.get("XLA_FLAGS", "")
    flag = f"--xla_force_host_platform_device_count={num_devices}"
    return {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": f"{flags} {flag}".strip(),
    }


def run(quick=False, out="runs/bench", timeout=3600):
    """Runs the suite, prints its table, writes `scaling.json`, `scaling.md`
    and `scaling.png` under `out`; returns the results."""
    config, results = start_suite("scaling", quick, FULL, QUICK)
    measure = case_runner(
        "scaling",
        CASES,
        results,
        out,
        timeout,
        env=case_environment(max(config["devices"])),
    )
    phase(
        f"timing {config['preset'] or 'a tiny Transformer'}'s train step on "
        f"{', '.join(map(str, config['devices']))} device(s), each in turn"
    )
    case = {"kind": "steps", **config, "devices": list(config["devices"])}
    measured = measure("steps", case)
    if "skipped" not in measured:
        one = measured["1 device"]
        results["ratios"] = {
            f"{name}/step_time_vs_one_device": measured[name]["step_s"] / one["step_s"]
            for name in configurations(config["devices"])
        }
        results["ratios"].update(
            {
                f"{name}/state_per_device_vs_one_device": measured[name][
                    "state_bytes_per_device"
                ]
                / one["state_bytes_per_device"]
                for name in configurations(config["devices"])
            }
        )
    write_report(results, out, "scaling", markdown(results), plot)
    return results


def markdown(results):
    lines = [f"Machine: {describe(results['machine'])}", ""]
    measured = results["cases"].get("steps", {})
    if "skipped" in measured or not measured:
        return "\n".join([*lines, f"Not measured: {measured.get('skipped')}", ""])
    lines += [
        f"The case ran on the JAX backend (jax {measured['jax']}) over "
        f"{measured['num_devices']} {measured['device_kind']} device(s); "
        f"batch {results['config']['batch_size']} x "
        f"{results['config']['length']} tokens (global).",
        "",
        "| configuration | step (ms) | vs 1 device | weights + Adam state per "
        "device (MB) | vs 1 device | first loss |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    one = measured["1 device"]
    for name in configurations(results["config"]["devices"]):
        row = measured[name]
        lines.append(
            f"| {name} | {row['step_s'] * 1e3:.1f} | "
            f"{row['step_s'] / one['step_s']:.2f} | "
            f"{row['state_bytes_per_device'] / 1e6:.1f} | "
            f"{row['state_bytes_per_device'] / one['state_bytes_per_device']:.2f} | "
            f"{row['first_loss']:.4f} |"
        )
    return "\n".join([*lines, ""])


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    measured = results["cases"].get("steps", {})
    if measured and "skipped" not in measured:
        for strategy, marker in (("data-parallel", "o"), ("model-parallel", "s")):
            names = ["1 device"] + [
                name
                for name in configurations(results["config"]["devices"])
                if name.startswith(strategy)
            ]
            counts = [measured[name]["devices"] for name in names]
            axes[0].plot(
                counts,
                [measured[name]["step_s"] * 1e3 for name in names],
                marker=marker,
                label=strategy,
            )
            axes[1].plot(
                counts,
                [measured[name]["state_bytes_per_device"] / 1e6 for name in names],
                marker=marker,
                label=strategy,
            )
    axes[0].set(xlabel="devices", ylabel="train step (ms)", title="Step time")
    axes[1].set(
        xlabel="devices",
        ylabel="MB per device",
        title="Weights + Adam state per device",
    )
    for axis in axes:
        axis.legend()
        axis.set_xticks(list(results["config"]["devices"]))
    title = describe(results["machine"])
    if measured and "skipped" not in measured:
        title += (
            f"; the case on JAX over {measured['num_devices']} "
            f"{measured['device_kind']} device(s)"
        )
    figure.suptitle(title, fontsize=8)
    figure.tight_layout()
    with written_whole(path) as partial:
        figure.savefig(partial, dpi=110, format="png")
    plt.close(figure)
