"""CI's slow tier runs each `xdist_group` on one worker (`--dist loadgroup`),
so that the model its tests share is trained once. pytest 9.2 with
pytest-xdist 3.8 spread the groups over the workers without a word (each
worker trained the shared models again: the translation run of
tests/tasks/test_translate.py twice, 256 s and 224 s); setup.cfg pins pytest
below 9.2 and this test notices if a release breaks the grouping again."""

import re
import subprocess
import sys

import pytest

GROUPED = """
import os, time
import pytest

@pytest.mark.parametrize("index", range(6))
@pytest.mark.xdist_group("shared")
def test_grouped(index):
    time.sleep(0.2)
    print("worker", os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("index", range(6))
def test_free(index):
    time.sleep(0.2)
"""


@pytest.mark.slow
def test_loadgroup_runs_a_group_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v"]
        + ["-p", "no:cacheprovider", "-o", "addopts=", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    workers = re.findall(r"\[(gw\d)\].* PASSED \S*::test_grouped\[", result.stdout)
    assert len(workers) == 6, result.stdout[-3000:]
    assert len(set(workers)) == 1, result.stdout[-3000:]
