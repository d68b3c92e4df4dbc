"""The `scaling` suite; see `keras_attention/bench/scaling.py` for what it measures.

    python benchmarks/scaling.py [--quick] [--out DIR]

Same as `keras-attention bench --suite scaling`.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "scaling", *sys.argv[1:]]))
