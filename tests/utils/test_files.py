import errno
import os

import pytest

from keras_attention.utils import files
from keras_attention.utils.files import (
    DiskFullError,
    format_bytes,
    partial_path,
    write_text,
    written_whole,
)


def test_partial_files_keep_the_ending_keras_reads():
    assert partial_path("a/model.keras") == os.path.join("a", "model.partial.keras")
    assert partial_path("best.weights.h5") == "best.partial.weights.h5"
    assert partial_path("vocabulary") == "vocabulary.partial"


def test_a_failed_write_leaves_the_old_file_and_no_partial(tmp_path):
    path = tmp_path / "metrics.json"
    write_text(path, "old")
    with pytest.raises(KeyError), written_whole(path) as partial:
        with open(partial, "w") as f:
            f.write("half")
        raise KeyError("killed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_a_write_that_finds_no_room_raises_disk_full(tmp_path):
    path = tmp_path / "state.weights.h5"
    write_text(path, "x" * 1000)
    with pytest.raises(DiskFullError) as error, written_whole(path) as partial:
        with open(partial, "w") as f:
            f.write("half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert error.value.errno == errno.ENOSPC
    assert str(error.value).startswith(
        f"not enough space in {tmp_path} for writing state.weights.h5: the disk "
        "filled up after 4 B and "
    )
    assert path.read_text() == "x" * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["state.weights.h5"]


def test_space_is_checked_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "free_bytes", lambda folder: 5_000_000)
    write_text(tmp_path / "small.txt", "fits")
    with (
        pytest.raises(DiskFullError) as error,
        written_whole(tmp_path / "model.keras", 8_000_000),
    ):
        pytest.fail("written without room")
    assert "it needs about 9.0 MB and 5.0 MB are free" in str(error.value)


@pytest.mark.parametrize(
    "count, text", [(512, "512 B"), (3_400_000, "3.4 MB"), (12e9, "12.0 GB")]
)
def test_sizes_read_as_people_write_them(count, text):
    assert format_bytes(count) == text
