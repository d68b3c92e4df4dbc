"""What a training run survives, end to end through the command line: a
second run on its folder, SIGTERM, damaged checkpoints and a full disk (the
"What a run survives" section of docs/tutorials/cli.md). Each test starts
`keras-attention` processes: slow tier."""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from keras_attention.tasks.resumable import read_epoch_log
from tests.tasks.processes import cli_process, kill_during_epoch, run_cli, signal_when
from tests.tasks.processes import stop as stop_process

pytestmark = pytest.mark.slow
# The runs below train on the Debian fortunes.
needs_fortunes = pytest.mark.needs_package("fortunes")

# A bag-of-embeddings classifier: a few seconds per epoch of 249 batches here.
CLASSIFY = [
    "classify",
    "--model",
    "bag",
    "--data",
    "fortunes",
    "--num-train",
    "2000",
    "--batch-size",
    "8",
    "--epochs",
    "3",
]


def last_line(output):
    return output.strip().splitlines()[-1]


def finished_run(args):
    """Runs `keras-attention ARGS` to its end; its `CompletedProcess`."""
    return subprocess.run(
        [sys.executable, "-m", "keras_attention.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def with_epochs(epochs):
    return [*CLASSIFY[:-1], str(epochs)]


@needs_fortunes
def test_a_second_run_is_refused_and_the_next_takes_over_the_lock(tmp_path):
    out = tmp_path / "run"
    # Long enough to be training still when the second run starts (after
    # its first epoch's line).
    first = cli_process([*with_epochs(100), "--out", out])
    try:
        text = b""
        while b"epoch 1/100:" not in text:
            chunk = os.read(first.stdout.fileno(), 65536)
            assert chunk, text.decode(errors="replace")[-2000:]
            text += chunk
        second = finished_run([*CLASSIFY, "--out", out])
        assert second.returncode == 1
        assert re.fullmatch(
            rf"keras-attention classify: error: {re.escape(str(out))} is in use by "
            rf"another run \(process {first.pid} on \S+, started [0-9: -]+: "
            r"keras-attention classify .*\); wait for it to end, or choose "
            r"another --out",
            last_line(second.stderr),
        ), second.stderr
        assert "epoch 1/" not in second.stdout
    finally:
        stop_process(first)
    # The killed first run left its lock file; the next run takes it over
    # and trains one more epoch. (SIGTERM in the middle of an epoch, and the
    # resume from the batch it saved: tests/tasks/test_translate.py.)
    finished = len(read_epoch_log(out / "checkpoints" / "epochs.csv"))
    output = run_cli([*with_epochs(finished + 1), "--out", out])
    assert "taking over" in output and f"process {first.pid}" in output
    logged = read_epoch_log(out / "checkpoints" / "epochs.csv")
    assert [row["epoch"] for row in logged] == list(range(finished + 1))
    assert (out / "metrics.json").exists()


@needs_fortunes
def test_sigterm_before_training_ends_with_143_in_one_line(tmp_path):
    status, output = signal_when(
        [*CLASSIFY, "--out", tmp_path / "run"],
        lambda shown: "loading fortunes" in shown,
        signal.SIGTERM,
    )
    assert status == 143
    assert last_line(output) == (
        "keras-attention classify: stopped by SIGTERM; the same command resumes "
        "the training"
    )


@needs_fortunes
def test_damaged_checkpoints_name_restart_which_starts_afresh(tmp_path):
    out = tmp_path / "run"
    status, _ = kill_during_epoch([*CLASSIFY, "--out", out], epoch=2)
    assert status == -signal.SIGKILL
    folder = out / "checkpoints"
    states = sorted(folder.glob("state-*.weights.h5"))
    assert [p.name for p in states] == [
        "state-e0001-b000000.weights.h5",
        "state-e0002-b000000.weights.h5",
    ]
    # A copy of the killed run, resumed: only the epoch the kill cut short
    # is trained again.
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    output = run_cli([*CLASSIFY, "--out", resumed])
    assert "resuming after epoch 2" in output
    assert "epoch 3/3:" in output and "epoch 2/3:" not in output
    logged = read_epoch_log(resumed / "checkpoints" / "epochs.csv")
    assert [row["epoch"] for row in logged] == [0, 1, 2]
    for state in states:  # a power cut while both were written
        state.write_bytes(state.read_bytes()[:1000])
    process = finished_run([*CLASSIFY, "--out", out])
    assert process.returncode == 1
    assert re.fullmatch(
        rf"keras-attention classify: error: {re.escape(str(states[1]))} is damaged "
        r"\(truncated file: eof = 1000, [^)]*stored_eof = \d+\) and no earlier "
        "checkpoint is left; run the same command with --restart to train afresh "
        "in this folder",
        last_line(process.stderr),
    ), process.stderr
    # One epoch shows the fresh start (the killed run had logged two).
    output = run_cli([*CLASSIFY, "--epochs", "1", "--out", out, "--restart"])
    assert "--restart: deleted checkpoints/ from" in output
    assert "resuming" not in output
    logged = read_epoch_log(folder / "epochs.csv")
    assert [row["epoch"] for row in logged] == [0]


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB file system (tmpfs; needs the right to mount)."""
    path = tmp_path / "small"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a small file system: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", str(path)], check=False)


@needs_fortunes
def test_a_full_disk_is_one_line_before_training(small_disk):
    out = small_disk / "run"
    process = finished_run([*CLASSIFY, "--out", out])
    assert process.returncode == 1, process.stderr
    assert re.fullmatch(
        rf"keras-attention classify: error: not enough space in "
        rf"{re.escape(str(out / 'checkpoints'))} for training \(checkpoints of "
        r"[0-9.]+ MB\): it needs about [0-9.]+ MB and [0-9.]+ [kM]B are free; free "
        "some space or choose another output folder",
        last_line(process.stderr),
    ), process.stderr
    assert "epoch 1/" not in process.stdout


def test_a_write_that_fills_the_disk_raises_disk_full_not_a_crash(small_disk):
    """h5py meeting a full disk (the space checked before the write was not
    enough): one error, the partial file gone, no crash at exit."""
    script = f"""
import keras
from keras_attention.utils.files import DiskFullError, written_whole

model = keras.Sequential([keras.Input((1000,)), keras.layers.Dense(1000)])
try:
    with written_whole({str(small_disk / "model.weights.h5")!r}) as partial:
        model.save_weights(partial)  # 4 MB into 2 MB
except DiskFullError as error:
    print("DiskFullError:", error)
"""
    process = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert process.returncode == 0, process.stderr[-2000:]
    assert process.stdout.startswith(
        f"DiskFullError: not enough space in {small_disk} for writing model.weights.h5"
    )
    assert os.listdir(small_disk) == []
