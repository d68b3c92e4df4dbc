"""The code base passes `ruff check` and `ruff format --check`."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff(command):
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed; `pip install .[test]` provides it")
    result = subprocess.run(
        [ruff, *command, str(ROOT)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
