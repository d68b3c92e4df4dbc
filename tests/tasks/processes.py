"""Runs the `keras-attention` command in child processes, to kill them at a
chosen moment of training or to run several workers at once."""

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import tty

PROGRESS = re.compile(r"(\d+)/(\d+) ")
COLOR = re.compile(r"\x1b\[[0-9;]*m")


def _command(args, env=None):
    """The command line of `python -m keras_attention.cli ARGS` and its
    environment: unbuffered, TensorFlow's C++ logs off, `env` added."""
    environment = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **(env or {}),
    }
    return [sys.executable, "-m", "keras_attention.cli", *map(str, args)], environment


def cli_process(args, env=None, terminal=False):
    """`python -m keras_attention.cli ARGS` with its output piped, unbuffered.

    Args:
        args: the command's arguments.
        env: variables to add to this process's environment.
        terminal: write to a pseudo-terminal instead of a pipe, so that the
            command shows Keras' live bar (in a pipe it prints one line per
            epoch); `process.stdout` reads it all the same.

    Returns:
        The `subprocess.Popen`.
    """
    command, environment = _command(args, env)
    if not terminal:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )
    reader, writer = pty.openpty()
    # Raw: the bar's text arrives as written ("\n" not made "\r\n").
    tty.setraw(writer)
    process = subprocess.Popen(
        command, stdout=writer, stderr=writer, env=environment, start_new_session=True
    )
    os.close(writer)
    process.stdout = os.fdopen(reader, "rb", buffering=0)
    return process


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


def run_cli_to_file(args, log, timeout=900):
    """Runs the command as a shell's `keras-attention ARGS > LOG` does, its
    standard output a file; returns its standard error, failing on an error."""
    command, environment = _command(args)
    with open(log, "w") as stdout:
        result = subprocess.run(
            command,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            timeout=timeout,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def kill_during_epoch(args, epoch, fraction=0.4, timeout=900, signal_number=None):
    """Starts the command at a terminal and, when the Keras progress bar of
    epoch `epoch` (0-based) has passed `fraction` of its steps and has not
    finished, sends its process group `signal_number` (default SIGKILL).
    Returns `(exit status, output)` once it has ended."""

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

    return signal_when(
        args, mid_epoch, signal_number or signal.SIGKILL, timeout, terminal=True
    )


def signal_when(args, ready, signal_number, timeout=900, env=None, terminal=False):
    """Starts the command (at a terminal where `terminal`), sends
    `signal_number` to its process group once `ready(output so far)` holds,
    and returns `(exit status, output)` once it has ended (the status is
    negative for a signal that killed it)."""
    process = cli_process(args, env, terminal)
    text = ""
    deadline = time.monotonic() + timeout
    sent = False
    try:
        while time.monotonic() < deadline:
            ready_to_read, _, _ = select.select([process.stdout], [], [], 0.2)
            if ready_to_read:
                chunk = b""
                # A terminal whose writer has exited raises EIO, a pipe
                # reads empty.
                with contextlib.suppress(OSError):
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
    """Kills the process and its children if still running, and closes what
    its output is read from."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


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
