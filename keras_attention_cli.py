"""Entry point of the `keras-attention` command.

It lives outside the `keras_attention` package because importing the package
imports Keras (its layers register themselves, so that `.keras` files load),
and Keras imports TensorFlow: seconds before `--help` could answer or a bad
argument be refused. `keras_attention/cli.py` needs only the standard library
until a subcommand starts its work, so it is loaded from its file here, and
the package is imported by the subcommand that uses it.
"""

import importlib.util
import os
import sys


def main():
    package = importlib.util.find_spec("keras_attention")
    path = os.path.join(package.submodule_search_locations[0], "cli.py")
    spec = importlib.util.spec_from_file_location("keras_attention.cli", path)
    cli = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cli
    spec.loader.exec_module(cli)
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
