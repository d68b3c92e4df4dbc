"""`keras.distribution` on the JAX backend: data- and model-parallel
training over virtual CPU devices and over two processes on this machine,
against one device."""

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
from tests.tasks.processes import stop
from tests.tasks.test_caption import write_shapes_folder
from tests.tasks.test_classify import keyword_reviews, write_csv
from tests.tasks.test_lm import write_corpus


def jax_env(devices, **extra):
    return {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **extra,
    }


def start(env, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "tests.tasks.distribution_runs", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def finish(processes, timeout=600):
    """The outputs of `processes` once all exited with status 0. Processes
    still running after `timeout` seconds are killed, and the failure shows
    what each had printed (a hung collective says where it hung)."""
    try:
        outputs = [p.communicate(timeout=timeout)[0].decode() for p in processes]
    except subprocess.TimeoutExpired:
        for process in processes:
            stop(process)
        printed = [p.communicate()[0].decode()[-1500:] for p in processes]
        pytest.fail(
            f"a run took more than {timeout} s; their outputs:\n"
            + "\n---\n".join(printed)
        )
    finally:
        for process in processes:
            stop(process)
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    return outputs


def losses(folder):
    return [
        row["loss"] for row in read_epoch_log(folder / "checkpoints" / "epochs.csv")
    ]


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_data_and_model_parallel_follow_one_device_and_shard_the_kernels(tmp_path):
    """Four virtual CPU devices: data-parallel (batch 4) and model-parallel
    (batch 2 x model 2) trace the one-device loss curve to float rounding; the
    attention kernels are split by heads and the feed-forward kernels by
    hidden units along `model`; a model without Transformer blocks is refused
    model parallelism."""
    finish(
        [
            start(jax_env(4), "train", "default", tmp_path / "one"),
            start(jax_env(4), "train", "data-parallel", tmp_path / "data"),
            start(jax_env(4), "train", "model-parallel", tmp_path / "model", 2),
            start(jax_env(4), "shardings", tmp_path),
        ]
    )
    one = losses(tmp_path / "one")
    assert len(one) == 2
    for name in ("data", "model"):
        np.testing.assert_allclose(
            losses(tmp_path / name), one, rtol=1e-5, err_msg=name
        )
    results = json.loads((tmp_path / "shardings.json").read_text())
    assert results["replicas"] == 2
    shardings = results["shardings"]
    block = "encoder_block_0/self_attention"
    assert shardings[f"{block}/query/kernel"] == [None, "model", None]
    assert shardings[f"{block}/attention_output/kernel"] == ["model", None, None]
    feedforward = "decoder_block_0/feedforward"
    assert shardings[f"{feedforward}/intermediate_dense/kernel"] == [None, "model"]
    assert shardings[f"{feedforward}/output_dense/kernel"] == ["model", None]
    assert shardings["source_embedding/token_embedding/embeddings"] == [None, None]
    assert "RNNSeq2Seq has none" in results["rnn_refused"]


@pytest.mark.slow
def test_two_processes_train_like_one_device(tmp_path):
    """Two processes of two virtual devices each, joined by
    `keras.distribution.initialize` (gloo collectives on a CPU): data-parallel
    over the four devices and model-parallel with each process's two devices
    splitting the weights; both processes end with the same weights, and the
    loss curve is that of one device."""
    single = start(jax_env(4), "train", "default", tmp_path / "one")
    for strategy, mesh in (
        ("data-parallel", "batch 4"),
        ("model-parallel", "batch 2 x model 2"),
    ):
        address = f"localhost:{free_port()}"
        folder = tmp_path / strategy
        processes = [
            start(
                jax_env(
                    2,
                    KERAS_DISTRIBUTION_JOB_ADDRESSES=address,
                    KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                    KERAS_DISTRIBUTION_PROCESS_ID=str(index),
                ),
                "processes",
                strategy,
                folder,
            )
            for index in range(2)
        ]
        outputs = finish(processes)
        described = f"over 4 devices ({mesh}; 2 process(es))"
        assert described in outputs[0], outputs[0][-2000:]
        first = keras.saving.load_model(folder / "model.keras")
        second = keras.saving.load_model(folder / "process-1" / "model.keras")
        for a, b in zip(first.weights, second.weights, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    finish([single])
    one = losses(tmp_path / "one")
    for strategy in ("data-parallel", "model-parallel"):
        np.testing.assert_allclose(
            losses(tmp_path / strategy), one, rtol=1e-5, err_msg=strategy
        )


@pytest.mark.slow
def test_every_subcommand_on_pairs_trains_data_parallel(tmp_path):
    """classify, caption, lm and pretrain (translate: above) train over two
    virtual devices on JAX and write their metrics (lm on a file of 600
    sayings: its perplexity then reads 30 test documents, not the 757 of
    the fortunes)."""
    reviews = write_csv(tmp_path / "reviews.csv", keyword_reviews(120))
    captions = write_shapes_folder(tmp_path / "shapes", 48)
    corpus = write_corpus(tmp_path / "sayings.txt")
    finish([start(jax_env(2), "subcommands", tmp_path, reviews, captions, corpus)])
    figures = {
        "classify": "accuracy",
        "caption": "final_valid_token_accuracy",
        "lm": "final_valid_loss",
        "pretrain": "mlm_loss",
    }
    for task, figure in figures.items():
        metrics = json.loads((tmp_path / task / "metrics.json").read_text())
        assert metrics["epochs"] == 1 and np.isfinite(metrics[figure]), task


def test_keras_distributions_need_the_jax_backend():
    if keras.backend.backend() == "jax":
        pytest.skip("the TensorFlow and torch backends refuse keras.distribution")
    with pytest.raises(ValueError, match="JAX backend.*KERAS_BACKEND=jax"):
        distribute.make_strategy("data-parallel")


def test_model_shards_belong_to_model_parallel():
    with pytest.raises(ValueError, match="model_shards.*model-parallel"):
        distribute.make_strategy("data-parallel", model_shards=2)
