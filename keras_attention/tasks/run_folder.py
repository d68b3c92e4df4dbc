"""One run per output folder.

A run holds an exclusive lock on `<out>/run.lock` (`fcntl.flock`) while it
works there. The operating system releases the lock when the process ends,
however it ends, so a crashed or killed run never leaves the folder locked;
the file holds the holder's process id, host, command and start time, which
a second run names in its one-line refusal. A run that ends normally empties
the file: a file found with content belonged to a run that was killed, and
the next run says that it takes over from it.
"""

import contextlib
import datetime
import os
import socket
import sys

from keras_attention.tasks.common import phase

LOCK_FILE = "run.lock"

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are not guarded there.
    fcntl = None


class FolderInUseError(RuntimeError):
    """Another process holds the run folder."""

    exit_status = 1


@contextlib.contextmanager
def hold(out_dir):
    """Holds `out_dir` for this process for the duration of the block.

    Raises `FolderInUseError` (naming the other process) when another
    process holds it. Re-entrant within a process: a run inside a
    comparison's folder, or the same folder again, holds it once.

    Example:

    ```python
    with hold("runs/translate"):
        ...  # train and write there
    ```
    """
    path = os.path.join(os.path.abspath(out_dir), LOCK_FILE)
    if path in _held:
        yield
        return
    if fcntl is None:
        yield
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 (held open until the block ends)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderInUseError(
                f"{out_dir} is in use by another run ({_holder(handle)}); wait "
                "for it to end, or choose another --out"
            ) from None
        previous = _holder(handle)
        if previous:
            phase(
                f"taking over {out_dir} from an earlier run that did not end "
                f"normally ({previous})"
            )
        handle.seek(0)
        handle.truncate()
        handle.write(_description())
        handle.flush()
        _held.add(path)
        try:
            yield
        finally:
            _held.discard(path)
            handle.seek(0)
            handle.truncate()
            handle.flush()
    finally:
        handle.close()


_held = set()


def _description():
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    program = os.path.basename(sys.argv[0] if sys.argv else "") or "python"
    if program in ("__main__.py", "keras-attention"):
        program = "keras-attention"
    command = " ".join([program, *sys.argv[1:]])
    return (
        f"process {os.getpid()} on {socket.gethostname()}, started {started}: {command}"
    )


def _holder(handle):
    handle.seek(0)
    return handle.read().strip()
