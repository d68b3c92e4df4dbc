"""The committed table of attention paths (docs/attention_paths.md,
docs/data/attention-paths.json) is the plan's: each workload of
`tests/path_table.py` is traced again with the GPU faked, and its paths and
reasons must equal its committed JAX rows.

A change of the plan that moves a workload to another kernel fails here:
run `KERAS_BACKEND=jax python -m tests.path_table --write` and commit the
table.

The 38 workloads take 100 s here (2 cores; SAGAN 24 s), so they are slow;
the checks of the committed files take under a second."""

import keras
import pytest

if keras.backend.backend() != "jax":
    pytest.skip(
        "the committed table's rows checked here are JAX's (the GPU faked); "
        f"the Keras backend is {keras.backend.backend()}",
        allow_module_level=True,
    )

from tests import path_table  # noqa: E402

REGENERATE = (
    "The attention path table is stale: run "
    "`KERAS_BACKEND=jax python -m tests.path_table --write` after a change "
    "of the plan, and commit docs/attention_paths.md and "
    "docs/data/attention-paths.json."
)
NAMES = [name for group in path_table.workloads().values() for name in group]


def committed(name):
    return [row for row in path_table.committed_rows("jax") if row["workload"] == name]


def test_the_committed_table_has_every_workload_once_per_dtype():
    rows = path_table.committed_rows("jax")
    keys = [(row["workload"], row["dtype"]) for row in rows]
    expected = [(name, dtype) for name in NAMES for dtype in path_table.DTYPES]
    assert keys == expected, REGENERATE


def test_the_committed_page_shows_the_committed_rows():
    rows = path_table.committed_rows("jax") + path_table.committed_rows("torch")
    page = path_table.MARKDOWN_PATH.read_text()
    assert path_table.markdown(rows) in page, REGENERATE


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_workloads_paths_are_the_committed_ones(name):
    rows = path_table.rows(names=[name])
    assert rows == committed(name), REGENERATE
