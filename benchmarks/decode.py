"""The `decode` suite; see `keras_attention/bench/decode.py` for what it measures.

    python benchmarks/decode.py [--quick] [--out DIR]

Same as `keras-attention bench --suite decode`.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "decode", *sys.argv[1:]]))
