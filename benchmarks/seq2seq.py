"""The `seq2seq` suite; see `keras_attention/bench/seq2seq.py` for what it measures.

    python benchmarks/seq2seq.py [--quick] [--out DIR]

Same as `keras-attention bench --suite seq2seq`.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "seq2seq", *sys.argv[1:]]))
