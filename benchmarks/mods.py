"""The `mods` suite; see `keras_attention/bench/mods.py` for what it measures.

    python benchmarks/mods.py [--quick] [--out DIR]

Same as `keras-attention bench --suite mods`.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "mods", *sys.argv[1:]]))
