"""Entry point of the `keras-attention` command.

It lives outside the `keras_attention` package because importing the package
imports Keras (its layers register themselves, so that `.keras` files load),
and Keras imports TensorFlow: seconds before `--help` could answer or a bad
argument be refused. The command line (`keras_attention/cli/`) and the names
it checks arguments against (`keras_attention/names.py`) need only the
standard library until a subcommand starts its work, so they are loaded from
their files here, and the package is imported by the subcommand that uses it.
"""

import importlib.util
import os
import sys


def _load(name, path, package=False):
    """Loads the module `name` from `path` without importing its parent
    package, and registers it under its name."""
    locations = [os.path.dirname(path)] if package else None
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=locations
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main():
    root = importlib.util.find_spec("keras_attention").submodule_search_locations[0]
    _load("keras_attention.names", os.path.join(root, "names.py"))
    cli = _load(
        "keras_attention.cli", os.path.join(root, "cli", "__init__.py"), package=True
    )
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
