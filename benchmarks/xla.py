"""The `xla` suite; see `keras_attention/bench/xla.py` for what it measures.

    python benchmarks/xla.py [--quick] [--out DIR]

Same as `keras-attention bench --suite xla`.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "xla", *sys.argv[1:]]))
