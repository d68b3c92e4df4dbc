"""GPU suite: attention fwd+bwd against cuDNN, XLA and PyTorch over T = 1k-32k,
Transformer vs RNN training, KV-cache decoding, in about 6 minutes of one GPU.

    python benchmarks/gpu.py [--quick] [--out DIR] [--peak-tflops 989]

Same as `keras-attention bench --suite gpu`; see `keras_attention/bench/gpu.py`
for what is measured and `benchmarks/gpu.sh` for a GPU machine without Keras.
"""

import sys

from keras_attention.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--suite", "gpu", *sys.argv[1:]]))
