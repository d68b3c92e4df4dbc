"""Output folder conventions shared by the end-to-end jobs."""

import json
import os
import platform

import keras


def prepare_output(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    return out_dir


def write_metrics(out_dir, metrics):
    """Writes the flat `metrics.json` of a run, with the machine it ran on."""
    record = dict(metrics)
    record.setdefault("backend", keras.backend.backend())
    record.setdefault("keras_version", keras.__version__)
    record.setdefault(
        "machine",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
    )
    path = os.path.join(out_dir, "metrics.json")
    # Top-level keys sorted; nested ones (such as length buckets) keep their
    # order.
    with open(path, "w") as f:
        json.dump(dict(sorted(record.items())), f, indent=2)
    return path


def phase(message):
    """One line per phase of a long job."""
    print(f"[keras-attention] {message}", flush=True)
