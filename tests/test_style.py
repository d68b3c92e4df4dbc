"""The code base passes `ruff check` and `ruff format --check`."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff(command):
    # The ruff of the environment running the tests (`python -m ruff`), found
    # where that environment is not activated too.
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed; `pip install .[test]` provides it")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
