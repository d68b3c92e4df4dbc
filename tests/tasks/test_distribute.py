import json
import os
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_attention.tasks import distribute
from keras_attention.tasks.resumable import read_epoch_log
from keras_attention.tasks.translate import run_translate
from tests.tasks.processes import stop
from tests.tasks.test_caption import write_shapes_folder

# Every test here trains or starts processes: the slow tier.
pytestmark = pytest.mark.slow


def test_unknown_strategy_is_rejected():
    with pytest.raises(ValueError, match="'mirored'.*|mirored"):
        distribute.make_strategy("mirored")


def test_default_strategy_is_no_distribution():
    assert distribute.make_strategy("default") is None
    assert distribute.describe(None) == "one device"
    assert distribute.jit_for(None, True) == (True, "XLA")
    assert distribute.jit_for(distribute.make_strategy("mirrored"), True)[0] is False


@pytest.mark.parametrize(
    "tf_config, message",
    [
        (None, "TF_CONFIG.*not set"),
        ("{not json", "TF_CONFIG must be JSON"),
        (
            '{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}',
            "non-empty",
        ),
        ('{"cluster": {"worker": ["a:1"]}}', "task"),
    ],
)
def test_multi_worker_needs_a_valid_tf_config(monkeypatch, tf_config, message):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ValueError, match=message):
        distribute.make_strategy("multi-worker")


def test_tpu_without_a_tpu_is_a_clear_error():
    with pytest.raises(ValueError, match="found no TPU"):
        distribute.make_strategy("tpu")


def test_global_batch_must_split_evenly(tmp_path):
    class FourReplicas:
        num_replicas_in_sync = 4

    with pytest.raises(ValueError, match="received 30.*multiple of 4"):
        run_translate(tmp_path, strategy=FourReplicas(), batch_size=30)


def test_mirrored_over_two_devices_follows_the_one_device_loss_curve(tmp_path):
    """The same global batch on one device and split over two logical CPU
    devices: the captioner (Keras' train step, its model loss scaled per
    replica) and SAGAN (its own two-optimizer step, cross-replica batch norm)
    trace the same losses. (Keras' step without a model loss under a
    `tf.distribute` strategy: `translate` in the two-worker test below.)"""
    captions = write_shapes_folder(tmp_path / "shapes", 64)
    subprocess.run(
        [sys.executable, "-m", "tests.tasks.strategy_runs", "mirrored"]
        + [tmp_path, captions],
        check=True,
        timeout=1800,
    )
    curves = json.loads((tmp_path / "curves.json").read_text())
    assert curves["replicas"] == 2
    # SAGAN's own step: the same computation, to float rounding.
    for model in ("sagan-d_loss", "sagan-g_loss"):
        one, two = curves[f"{model}/default"], curves[f"{model}/mirrored"]
        np.testing.assert_allclose(two, one, rtol=1e-5, err_msg=model)
    # Keras' step clips gradients (`clipnorm=1.0`) on each replica's share
    # before summing them, where one device clips the sum: the curves differ
    # by under 1% (the translation model's, measured when it ran here too:
    # 3.649 vs 3.642 after one epoch of 640 pairs, 2.359 vs 2.347 after
    # three).
    one, two = curves["caption/default"], curves["caption/mirrored"]
    assert len(one) == len(two) == 2
    np.testing.assert_allclose(two, one, rtol=0.02)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_train_both_kinds_of_step_like_one_worker(tmp_path):
    """translate (Keras' own train step, batches of (inputs, targets)) and the
    class-conditional SAGAN (its own two-optimizer step on (images, labels))
    under MultiWorkerMirroredStrategy over two worker processes on this
    machine, against one process at the same global batch: both workers end
    with the same weights, and the loss curves of Keras' step agree. The
    other subcommands share the runner that sets the strategy up."""
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    runs = {
        "worker-0": tmp_path / "two",
        "worker-1": tmp_path / "two",
        "single": tmp_path / "one",
    }
    processes = {}
    for name, out in runs.items():
        env = {}
        if name.startswith("worker"):
            task = {"type": "worker", "index": int(name[-1])}
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
        processes[name] = subprocess.Popen(
            [sys.executable, "-m", "tests.tasks.strategy_runs", "tasks", out],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
            start_new_session=True,
        )
    try:
        outputs = {
            name: process.communicate(timeout=900)[0].decode()
            for name, process in processes.items()
        }
    finally:
        for process in processes.values():
            stop(process)
    for name, process in processes.items():
        assert process.returncode == 0, f"{name}:\n{outputs[name][-3000:]}"
    assert "CollectiveAllReduceStrategy over 2 replicas" in outputs["worker-0"]
    # Worker 0 writes OUT, worker 1 OUT/worker-1.
    chief = keras.saving.load_model(runs["worker-0"] / "translate" / "model.keras")
    other = keras.saving.load_model(
        runs["worker-1"] / "translate" / "worker-1" / "model.keras"
    )
    for a, b in zip(chief.weights, other.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    curves = {
        name: [
            row["loss"]
            for row in read_epoch_log(
                folder / "translate" / "checkpoints" / "epochs.csv"
            )
        ]
        for name, folder in (("one", runs["single"]), ("two", runs["worker-0"]))
    }
    assert len(curves["one"]) == len(curves["two"]) == 2, curves
    # Each worker clips its share of the gradient at norm 1 where one process
    # clips the whole (`clipnorm=1.0`): measured after the first epoch, within
    # 0.01% for translate (2.2% for classify, which ran here before; equal to
    # the last printed digit with clipping off).
    np.testing.assert_allclose(curves["two"], curves["one"], rtol=0.03)
    # The GAN: each worker writes its generator and both networks.
    chief = keras.saving.load_model(runs["worker-0"] / "gan" / "gan.keras")
    other = keras.saving.load_model(runs["worker-1"] / "gan" / "worker-1" / "gan.keras")
    for a, b in zip(chief.weights, other.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for folder in (runs["worker-0"] / "gan", runs["worker-1"] / "gan" / "worker-1"):
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["epochs"] == 2 and metrics["nan_free"]
