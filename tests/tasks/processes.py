"""Runs the `keras-attention` command in child processes, to kill them at a
chosen moment of training or to run several workers at once."""

import os
import re
import select
import signal
import subprocess
import sys
import time

PROGRESS = re.compile(r"(\d+)/(\d+) ")
COLOR = re.compile(r"\x1b\[[0-9;]*m")


def cli_process(args, env=None):
    """`python -m keras_attention.cli ARGS` with its output piped, unbuffered."""
    environment = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "keras_attention.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=environment,
        start_new_session=True,
    )


def run_cli(args, env=None, timeout=900):
    """Runs the command to its end; returns its output, failing on an error."""
    process = cli_process(args, env)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        stop(process)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text[-3000:]
    return text


def kill_during_epoch(args, epoch, fraction=0.4, timeout=900, signal_number=None):
    """Starts the command and, when the Keras progress bar of epoch `epoch`
    (0-based) has passed `fraction` of its steps and has not finished, sends
    its process group `signal_number` (default SIGKILL). Returns `(exit
    status, output)` once it has ended."""

    def mid_epoch(shown):
        marker = f"Epoch {epoch + 1}/"
        if marker not in shown:
            return False
        bar = shown[shown.rindex(marker) :].partition("\n")[2]
        steps = PROGRESS.findall(bar)
        if not steps:
            return False
        done, total = map(int, steps[-1])
        return fraction * total <= done < total

    return signal_when(args, mid_epoch, signal_number or signal.SIGKILL, timeout)


def signal_when(args, ready, signal_number, timeout=900, env=None):
    """Starts the command, sends `signal_number` to its process group once
    `ready(output so far)` holds, and returns `(exit status, output)` once it
    has ended (the status is negative for a signal that killed it)."""
    process = cli_process(args, env)
    text = ""
    deadline = time.monotonic() + timeout
    sent = False
    try:
        while time.monotonic() < deadline:
            ready_to_read, _, _ = select.select([process.stdout], [], [], 0.2)
            if ready_to_read:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    process.wait()
                    break
                text += chunk.decode(errors="replace")
            if not sent and ready(COLOR.sub("", text)):
                os.killpg(process.pid, signal_number)
                sent = True
        if not sent:
            raise AssertionError(
                f"the moment to signal was not reached in {timeout} s (exit "
                f"{process.poll()}):\n{text[-3000:]}"
            )
        return process.wait(), COLOR.sub("", text)
    finally:
        stop(process)


def stop(process):
    """Kills the process and its children if still running."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def jax_env(devices, **extra):
    """The environment of a process on the JAX backend with `devices` virtual
    CPU devices (added to the XLA flags it inherits), and `extra`."""
    return {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": (
            f"{os.environ.get('XLA_FLAGS', '')} "
            f"--xla_force_host_platform_device_count={devices}"
        ).strip(),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
