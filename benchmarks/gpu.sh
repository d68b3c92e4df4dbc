#!/usr/bin/env bash
# The gpu suite on a GPU machine that has JAX (and PyTorch) but neither Keras
# nor TensorFlow nor a network: run from the repository root, with the wheels
# of docs/benchmarks.md ("The GPU suite") in .whl/ carried along.
#
#   bash benchmarks/gpu.sh [--quick] [--peak-tflops N]
#
# Writes gpu.json, gpu.md, gpu.png and log.txt to $OUT (the device tool's
# folder that comes back), else to runs/gpu. About 8 minutes on one H100 or
# H200: the parts' shares add up to 480 s, and a case may run 60 s past its
# share. The suite is stopped at $GPU_SUITE_TIMEOUT seconds (default 570),
# inside the device tool's 600 s per command: gpu.json, rewritten after each
# case, then holds every case measured. The first lent GPU, in one command:
#
#   run(command="bash benchmarks/gpu.sh", carry=[".whl"], timeout_s=600)
set -euo pipefail

out="${OUT:-runs/gpu}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD"
export KERAS_BACKEND=jax
# JAX allocates as it goes instead of taking 75% of the GPU at start: every
# case runs in a process of its own, next to this one (and to PyTorch).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export TF_CPP_MIN_LOG_LEVEL=3
export PYTHONUNBUFFERED=1

{
  nvidia-smi -L || true
  python3 -c "import jax, keras; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__)"
  timeout "${GPU_SUITE_TIMEOUT:-570}" \
    python3 -m keras_attention.bench --suite gpu --out "$out" "$@"
} 2>&1 | tee "$out/log.txt"
