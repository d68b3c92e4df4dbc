"""Every ```python block in README.md and docs/ runs (blocks of one page share a
namespace, in order), so the documentation cannot drift from the code."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(page):
    blocks = BLOCK.findall(page.read_text())
    namespace = {"__name__": "docs"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)


def test_every_page_with_an_example_was_found():
    assert sum(bool(BLOCK.findall(p.read_text())) for p in PAGES) >= 9
