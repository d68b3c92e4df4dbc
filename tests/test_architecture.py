"""The import graph that docs/architecture.md describes: ops below layers below
models, and the library (ops, layers, models, decoding, evaluation, utils)
never importing the applications (names, data, tasks, bench, viz, cli); and
every repository path that page names exists."""

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_attention"
LIBRARY = (
    "ops",
    "layers",
    "models",
    "decoding",
    "speculative",
    "evaluation",
    "integrations",
    "utils",
)
APPLICATIONS = ("names", "data", "tasks", "bench", "viz", "cli")
# What each part of the library may import from the package (besides itself).
ALLOWED = {
    "utils": {"_checks"},
    "ops": {"_checks", "utils"},
    "layers": {"_checks", "utils", "ops"},
    "models": {"_checks", "utils", "ops", "layers", "decoding"},
    "decoding": {"_checks", "utils", "ops"},
    # An alias of `decoding.speculative`, for the imports written before it
    # moved there.
    "speculative": {"decoding"},
    "evaluation": {"_checks", "utils", "ops", "layers", "models"},
    "integrations": {"_checks", "utils", "ops", "layers", "decoding"},
}


def package_imports(path):
    """The top-level `keras_attention` subpackages that a file imports, lazy
    imports inside functions included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "keras_attention":
                names = [f"keras_attention.{alias.name}" for alias in node.names]
        found |= {
            name.split(".")[1]
            for name in names
            if name.startswith("keras_attention.") and name.count(".") >= 1
        }
    return found


def files_of(part):
    module = PACKAGE / f"{part}.py"
    return [module] if module.exists() else sorted((PACKAGE / part).rglob("*.py"))


@pytest.mark.parametrize("part", LIBRARY)
def test_the_library_imports_only_what_lies_below_it(part):
    for path in files_of(part):
        imported = package_imports(path) - {part}
        assert imported <= ALLOWED[part], (
            f"{path.relative_to(PACKAGE.parent)} imports "
            f"{sorted(imported - ALLOWED[part])}; {part} may import only "
            f"{sorted(ALLOWED[part])}"
        )


def test_every_part_of_the_package_is_library_or_application():
    parts = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix == ".py")
    }
    assert parts == set(LIBRARY) | set(APPLICATIONS)


# A backticked repository path on docs/architecture.md: under one of these
# folders, or a root file; placeholders such as `<name>` are not paths.
NAMED_PATH = re.compile(
    r"`((?:keras_attention|tests|benchmarks|docs|examples|\.ci)/[\w./-]*"
    r"|[\w-]+\.(?:py|cfg|toml|yml))`"
)


def test_the_paths_of_the_architecture_page_exist():
    root = PACKAGE.parent
    named = set(NAMED_PATH.findall((root / "docs" / "architecture.md").read_text()))
    assert len(named) > 20, named  # the pattern still finds the page's paths
    missing = sorted(path for path in named if not (root / path).exists())
    assert not missing, f"docs/architecture.md names missing paths: {missing}"


def module_name(path):
    """`keras_attention.x.y` of a file (a package by its `__init__.py`)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path, modules):
    """The package's modules that a file imports, lazy imports included: for
    `from a import b`, the module `a.b` where it is one, else `a`."""
    package = module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *([node.module] if node.module else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names}
            found |= submodules & modules or {base}
    return (found & modules) - {module_name(path)}


def test_no_module_imports_itself_through_others():
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): module_imports(path, modules) for path in paths}
    # Peel off the modules that import no module left; a cycle never goes.
    while graph:
        leaves = {
            name for name, imported in graph.items() if not imported & graph.keys()
        }
        assert leaves, f"an import cycle among {sorted(graph)}"
        graph = {name: graph[name] for name in graph.keys() - leaves}
