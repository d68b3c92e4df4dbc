"""Attention suite: ours vs Keras, standard vs chunked, cache vs no cache.

    python benchmarks/attention.py [--quick] [--out DIR]

Same as `keras-attention bench --suite attention`; see
`keras_attention/bench/attention.py` for what is measured.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "attention", *sys.argv[1:]]))
