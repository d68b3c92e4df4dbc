"""Files that exist only whole, and a full disk reported in one line.

Every file a run leaves (checkpoints, logs, metrics, plots, models) is
written under another name in the same folder, flushed to the disk, then
renamed over its final name: a reader, a kill or a power cut sees the old
file or the new one, never half of one. A write that runs out of space
removes its partial file and raises `DiskFullError`, which names the folder
and the space the write needed; the file it would have replaced is intact.
"""

import contextlib
import errno
import gc
import os
import shutil

# The errors a write gets when the file system, a quota or the process's
# file size limit has no room for it.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# Room kept free besides a write's own size: metadata, the log lines
# written meanwhile.
_MARGIN_BYTES = 1 << 20


class DiskFullError(OSError):
    """Too little space in a folder for what must be written there.

    Args:
        folder: the folder.
        needed_bytes: about what the write needs.
        free_bytes: what is free.
        what: what was to be written, for the message.
        written_bytes: where a write ran out of space, what it had written.
    """

    exit_status = 1

    def __init__(
        self, folder, needed_bytes, free_bytes, what="the write", written_bytes=None
    ):
        self.folder, self.needed_bytes = folder, needed_bytes
        self.free_bytes, self.written_bytes = free_bytes, written_bytes
        if written_bytes is None:
            need = f"it needs about {format_bytes(needed_bytes)}"
        else:
            need = f"the disk filled up after {format_bytes(written_bytes)}"
        super().__init__(
            errno.ENOSPC,
            f"not enough space in {folder} for {what}: {need} and "
            f"{format_bytes(free_bytes)} are free; free some space or choose "
            "another output folder",
        )

    def __str__(self):
        return self.strerror


def format_bytes(count):
    """`count` bytes for people: `'512 B'`, `'3.4 MB'`, `'1.2 GB'`."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def free_bytes(folder):
    """The bytes a process may still write in `folder`'s file system."""
    return shutil.disk_usage(folder).free


def check_free_space(folder, needed_bytes, what="the write"):
    """Raises `DiskFullError` unless `folder` has `needed_bytes` free, with
    a margin of 1 MB."""
    free = free_bytes(folder)
    if free < needed_bytes + _MARGIN_BYTES:
        raise DiskFullError(folder, needed_bytes + _MARGIN_BYTES, free, what)


def partial_path(path):
    """Where `path` is written before it is renamed: `model.partial.keras`
    for `model.keras`, `best.partial.weights.h5` for `best.weights.h5` (Keras
    reads a file's kind from its ending, which stays)."""
    folder, name = os.path.split(os.fspath(path))
    stem, dot, ending = name.partition(".")
    return os.path.join(folder, f"{stem}.partial{dot}{ending}")


@contextlib.contextmanager
def written_whole(path, expected_bytes=0):
    """Yields the path to write `path`'s content to; once the block ends,
    the content is flushed to the disk and renamed to `path`.

    The space the write needs (`expected_bytes`, or the size of the file it
    replaces where larger) is checked first; a write that fails removes its
    partial file and leaves `path` as it was, and one that runs out of space
    raises `DiskFullError`.

    Example:

    ```python
    with written_whole("runs/x/model.keras") as partial:
        model.save(partial)
    ```
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    with contextlib.suppress(OSError):
        expected_bytes = max(expected_bytes, os.path.getsize(path))
    what = f"writing {os.path.basename(path)}"
    check_free_space(folder, expected_bytes, what)
    partial = partial_path(path)
    try:
        yield partial
        _flush_to_disk(partial)
        os.replace(partial, path)
    except BaseException as error:
        written = None
        with contextlib.suppress(OSError):
            written = os.path.getsize(partial)
            os.remove(partial)
        if not _is_no_space(error):
            raise
        _release_failed_writer(partial)
        raise DiskFullError(
            folder,
            expected_bytes + _MARGIN_BYTES,
            free_bytes(folder),
            what,
            written_bytes=written or 0,
        ) from None
    _flush_folder(folder)


def _release_failed_writer(partial):
    """Lets go of a file whose write ran out of space and that a library
    still holds open (deleted, it keeps its space until closed).

    HDF5 keeps a file whose flush failed open, tries the flush again when
    h5py closes it at the latest at exit, and crashes the interpreter there
    (a segmentation fault, h5py 3.x). Pointing the descriptors of the deleted
    file at /dev/null lets those flushes succeed, frees the space at once, and
    the process ends normally. Needs /proc (Linux); elsewhere nothing is done.
    """
    target = os.path.abspath(partial)
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for name in descriptors:
            with contextlib.suppress(OSError, ValueError):
                link = os.readlink(f"/proc/self/fd/{name}")
                if link in (target, f"{target} (deleted)"):
                    os.dup2(null, int(name))
    finally:
        os.close(null)
    gc.collect()


def _is_no_space(error):
    """Whether `error` (or one it was raised from) is a write that found no
    room; h5py reports it as an OSError or RuntimeError naming errno 28."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return True
        if "errno = 28" in str(error) or "No space left" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def write_text(path, text):
    """Writes `text` (UTF-8) to `path` through `written_whole`."""
    data = text.encode("utf-8")
    with written_whole(path, len(data)) as partial, open(partial, "wb") as f:
        f.write(data)
    return path


def _flush_to_disk(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _flush_folder(folder):
    """Makes the rename itself durable (a power cut after it keeps it)."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
