"""The `layers` suite; see `keras_attention/bench/layers.py` for what it measures.

    python benchmarks/layers.py [--quick] [--out DIR]

Same as `keras-attention bench --suite layers`.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "layers", *sys.argv[1:]]))
