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


def kill_during_epoch(args, epoch, fraction=0.4, timeout=900):
    """Starts the command and SIGKILLs it when the Keras progress bar of
    epoch `epoch` (0-based) has passed `fraction` of its steps and has not
    finished. Returns the output up to the kill."""
    process = cli_process(args)
    text = ""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                text += chunk.decode(errors="replace")
            shown = COLOR.sub("", text)
            marker = f"Epoch {epoch + 1}/"
            if marker in shown:
                bar = shown[shown.rindex(marker) :].partition("\n")[2]
                steps = PROGRESS.findall(bar)
                if steps:
                    done, total = map(int, steps[-1])
                    if fraction * total <= done < total:
                        os.killpg(process.pid, signal.SIGKILL)
                        process.wait()
                        return text
        raise AssertionError(
            f"epoch {epoch} was not reached in {timeout} s (exit "
            f"{process.poll()}):\n{text[-3000:]}"
        )
    finally:
        stop(process)


def stop(process):
    """Kills the process and its children if still running."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
