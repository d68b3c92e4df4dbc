"""Build the figures of the concept pages with the package's own code.

Each module in docs/figures/ has a `build(out_dir)` that writes its PNGs and
returns their paths. The test suite runs this script and checks that every figure
the concept pages show is built here.

    python docs/build_figures.py                   # all, into docs/images/concepts
    python docs/build_figures.py masking scores    # some modules
    python docs/build_figures.py --out /tmp/figs
"""

import argparse
import importlib.util
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
MODULES = HERE / "figures"


def _load(name):
    spec = importlib.util.spec_from_file_location(
        f"figures.{name}", MODULES / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    available = sorted(
        p.stem for p in MODULES.glob("*.py") if not p.stem.startswith("_")
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "modules", nargs="*", help=f"default: all of {', '.join(available)}"
    )
    parser.add_argument(
        "--out", type=pathlib.Path, default=HERE / "images" / "concepts"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modules) - set(available))
    if unknown:
        parser.error(f"unknown figure modules {unknown}; expected some of {available}")
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    for name in args.modules or available:
        start = time.perf_counter()
        paths = _load(name).build(args.out)
        took = time.perf_counter() - start
        print(f"[figures] {name}: {', '.join(p.name for p in paths)} ({took:.1f} s)")


if __name__ == "__main__":
    main()
