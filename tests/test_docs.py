"""The documentation cannot drift from the code.

- Every ```python block in README.md and docs/ runs (blocks of one page share a
  namespace, in order). Code for libraries the project does not install (the
  tensorflow-addons side of the migration guide) is fenced as ```py: shown, not run.
- A python block followed by a ```text title="Output" block prints exactly that
  output.
- The concept figures are rebuilt by docs/build_figures.py, and the site builds
  with `mkdocs build --strict` (broken links, missing pages and bad docstrings
  fail it).
- The built site renders offline: MathJax and its fonts are served from the
  site itself and no page loads a script, stylesheet or font from the web.
"""

import contextlib
import html.parser
import io
import itertools
import os
import pathlib
import re
import subprocess
import sys
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*\n?", re.S | re.M)
OUTPUT_INFO = 'text title="Output"'


def code_blocks(text):
    """(python source, expected output or None) for each python block."""
    fences = list(FENCE.finditer(text))
    blocks = []
    for fence, following in itertools.zip_longest(fences, fences[1:]):
        if fence.group(1).strip() != "python":
            continue
        expected = None
        if (
            following is not None
            and following.group(1).strip() == OUTPUT_INFO
            and not text[fence.end() : following.start()].strip()
        ):
            expected = following.group(2)
        blocks.append((fence.group(2), expected))
    return blocks


def _lines(text):
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(page):
    namespace = {"__name__": "docs"}
    for number, (source, expected) in enumerate(code_blocks(page.read_text()), 1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(source, f"{page} (block {number})", "exec"), namespace)
        if expected is not None:
            assert _lines(printed.getvalue()) == _lines(expected), (
                f"{page.relative_to(ROOT)} block {number} printed something "
                "other than its Output block"
            )


def test_output_blocks_follow_code():
    """An Output block that follows no python block would go unchecked."""
    for page in PAGES:
        text = page.read_text()
        fences = list(FENCE.finditer(text))
        for previous, fence in itertools.pairwise([None, *fences]):
            if fence.group(1).strip() != OUTPUT_INFO:
                continue
            assert (
                previous is not None
                and previous.group(1).strip() == "python"
                and not text[previous.end() : fence.start()].strip()
            ), f"{page.relative_to(ROOT)}: an Output block follows no python block"


def test_code_block_parser():
    text = (
        "```python\nprint(1)\n```\n\n"
        '```text title="Output"\n1\n```\n'
        "```bash\nls\n```\n"
        "```python\nx = 2\n```\n"
    )
    assert code_blocks(text) == [("print(1)\n", "1\n"), ("x = 2\n", None)]


def test_every_page_with_an_example_was_found():
    assert sum(bool(code_blocks(p.read_text())) for p in PAGES) >= 9


def _concept_images():
    referenced = set()
    for page in (DOCS / "concepts").glob("*.md"):
        referenced |= set(
            re.findall(r"images/concepts/([\w.-]+\.png)", page.read_text())
        )
    return referenced


@pytest.mark.slow
def test_concept_figures_come_from_the_build_script(tmp_path):
    subprocess.run(
        [sys.executable, str(DOCS / "build_figures.py"), "--out", str(tmp_path)],
        check=True,
        cwd=ROOT,
    )
    built = {path.name for path in tmp_path.glob("*.png")}
    committed = {path.name for path in (DOCS / "images" / "concepts").glob("*.png")}
    assert _concept_images() <= built, "a concept page shows a figure nobody builds"
    assert committed == built, (
        "docs/images/concepts differs from what the script builds"
    )


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The site as `mkdocs build --strict` writes it: (return code, log, folder)."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    return result.returncode, result.stdout + result.stderr, out


@pytest.mark.slow
@pytest.mark.xdist_group("built_site")
def test_site_builds_strictly(built_site):
    returncode, log, out = built_site
    assert returncode == 0, log
    assert (out / "index.html").exists()
    assert (out / "api" / "layers" / "index.html").exists()


class _Loads(html.parser.HTMLParser):
    """The scripts, stylesheets and fonts a page loads (src and href values)."""

    LOADING_RELS = {"stylesheet", "preload", "modulepreload", "preconnect", "icon"}

    def __init__(self):
        super().__init__()
        self.scripts, self.links = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.scripts.append(attrs["src"])
        rels = set((attrs.get("rel") or "").lower().split())
        if tag == "link" and attrs.get("href") and rels & self.LOADING_RELS:
            self.links.append(attrs["href"])


def _loads(page):
    parser = _Loads()
    parser.feed(page.read_text())
    return parser


def _external(url):
    return bool(urllib.parse.urlsplit(url).netloc) or url.startswith("//")


@pytest.mark.slow
@pytest.mark.xdist_group("built_site")
def test_site_loads_nothing_from_the_web(built_site):
    """Built or served offline, the site still has its formulas and its fonts:
    no page loads a script, stylesheet or font from another host (MathJax is
    copied into the site by docs/hooks/mathjax.py, Google Fonts are off)."""
    returncode, log, out = built_site
    assert returncode == 0, log
    pages = sorted(out.rglob("*.html"))
    assert len(pages) > 30
    for page in pages:
        loads = _loads(page)
        external = [url for url in loads.scripts + loads.links if _external(url)]
        assert not external, f"{page.relative_to(out)} loads {external}"
        assert "fonts.googleapis.com" not in page.read_text()


@pytest.mark.slow
@pytest.mark.xdist_group("built_site")
def test_mathjax_is_in_the_site(built_site):
    returncode, log, out = built_site
    assert returncode == 0, log
    page = out / "concepts" / "masking" / "index.html"
    assert 'class="arithmatex"' in page.read_text(), "the page has no formula"
    mathjax = [
        (page.parent / src).resolve()
        for src in _loads(page).scripts
        if src.endswith("tex-mml-chtml.js")
    ]
    assert len(mathjax) == 1, "the page does not load MathJax once"
    script = mathjax[0]
    assert script.is_relative_to(out.resolve()) and script.stat().st_size > 100_000
    # What MathJax loads next, relative to its own script: the CHTML fonts
    # and the TeX extensions it autoloads.
    fonts = script.parent / "output" / "chtml" / "fonts" / "woff-v2"
    assert (fonts / "MathJax_Main-Regular.woff").is_file()
    assert (fonts / "MathJax_Math-Italic.woff").is_file()
    extensions = script.parent / "input" / "tex" / "extensions"
    assert (extensions / "boldsymbol.js").is_file()
