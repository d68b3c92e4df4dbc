import fcntl
import os

import pytest

from keras_attention.tasks.run_folder import LOCK_FILE, FolderInUseError, hold


def test_a_held_folder_refuses_a_second_run_naming_the_holder(tmp_path):
    # Another process's lock, as its run writes it.
    with open(tmp_path / LOCK_FILE, "w") as other:
        other.write("process 4242 on host, started 2026-11-26 14:00:00: x")
        other.flush()
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(FolderInUseError) as error, hold(tmp_path):
            pass
    assert str(error.value) == (
        f"{tmp_path} is in use by another run (process 4242 on host, started "
        "2026-11-26 14:00:00: x); wait for it to end, or choose another --out"
    )


def test_a_lock_left_by_a_killed_run_is_taken_over_with_a_line(tmp_path, capsys):
    (tmp_path / LOCK_FILE).write_text("process 4242 on host, started 14:00: x")
    with hold(tmp_path):
        held = (tmp_path / LOCK_FILE).read_text()
        assert held.startswith(f"process {os.getpid()} on ")
    out = capsys.readouterr().out
    assert "taking over" in out and "(process 4242 on host, started 14:00: x)" in out
    # Released: empty, and the next run says nothing.
    assert (tmp_path / LOCK_FILE).read_text() == ""
    with hold(tmp_path):
        pass
    assert "taking over" not in capsys.readouterr().out


def test_holding_is_reentrant_and_released_after_an_error(tmp_path):
    with pytest.raises(RuntimeError), hold(tmp_path), hold(tmp_path / "."):
        raise RuntimeError("a crash")
    with open(tmp_path / LOCK_FILE) as probe:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
