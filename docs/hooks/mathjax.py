"""Serve MathJax from the built site, so the formulas render offline.

MathJax comes from the `django-static-mathjax` package (a plain copy of
MathJax's es5 build, installed by the `docs` extra; Django itself is not
needed). This hook adds the files the browser loads to the site under
`javascripts/mathjax/`: the `tex-mml-chtml.js` component that
`extra_javascript` names, the CHTML fonts it loads, and the TeX extensions,
menu and accessibility components it loads on demand. MathJax finds them
relative to its own script, so no page refers to a CDN. Nothing is copied into
the repository: `mkdocs build` and `mkdocs serve` read them from the installed
package.
"""

import importlib.util
import pathlib

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

SITE_DIR = "javascripts/mathjax"
ENTRY = "tex-mml-chtml.js"
# es5 folders the entry component loads files from at run time. output/svg,
# adaptors/ (for Node) and the other combined components are left out.
FOLDERS = ("a11y", "input", "output/chtml", "sre", "ui")


def mathjax_dir():
    """The installed MathJax es5 build."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise PluginError(
            "MathJax is not installed: the docs need `pip install '.[docs]'` "
            "(the django-static-mathjax package)"
        )
    for location in spec.submodule_search_locations:
        es5 = pathlib.Path(location) / "static" / "mathjax" / "es5"
        if (es5 / ENTRY).is_file():
            return es5
    raise PluginError(f"the installed mathjax package has no es5/{ENTRY}")


def on_files(files, config):
    es5 = mathjax_dir()
    sources = [es5 / ENTRY]
    for folder in FOLDERS:
        sources += sorted(p for p in (es5 / folder).rglob("*") if p.is_file())
    for source in sources:
        uri = f"{SITE_DIR}/{source.relative_to(es5).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files
