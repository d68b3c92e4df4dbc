"""Our attention on PyTorch against PyTorch's own kernel, side by side in one
process: causal attention, forward and backward, B = 1, 8 heads of 64,
float32, on the CPU (or the GPU PyTorch finds). `dot_product_attention` by
default (which hands this call to `scaled_dot_product_attention`:
`keras_attention.ops.fused`), with `chunk_size=256` (the chunked path) and
with `flash_attention=False` (the standard path), against
`torch.nn.functional.scaled_dot_product_attention` called directly; each in
turn, a warm-up then the median of `--repeats`.

Usage: `python benchmarks/torch_fused.py [--lengths 1024 4096] [--repeats 3]
[--out DIR]` (writes `DIR/torch_fused.json`).
"""

import argparse
import json
import os
import platform
import time

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import torch  # noqa: E402

from keras_attention.ops import attention_path, dot_product_attention  # noqa: E402


def sdpa(q, k, v):
    heads_first = (x.transpose(1, 2) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(*heads_first, is_causal=True)
    return out.transpose(1, 2)


IMPLEMENTATIONS = {
    "torch_sdpa": sdpa,
    "ours": lambda q, k, v: dot_product_attention(q, k, v, is_causal=True),
    "ours_chunked": lambda q, k, v: dot_product_attention(
        q, k, v, is_causal=True, chunk_size=256
    ),
    "ours_standard": lambda q, k, v: dot_product_attention(
        q, k, v, is_causal=True, flash_attention=False
    ),
}


def forward_backward(fn, q, k, v):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    fn(q, k, v).sum().backward()


def measure(length, repeats, device):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, length, 8, 64, generator=generator).to(device) for _ in range(3)
    )
    times = {name: [] for name in IMPLEMENTATIONS}
    for fn in IMPLEMENTATIONS.values():
        forward_backward(fn, q, k, v)  # warm-up
    for _ in range(repeats):
        for name, fn in IMPLEMENTATIONS.items():
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            forward_backward(fn, q, k, v)
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - started)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    return {
        "path": attention_path(q, v, is_causal=True),
        "median_s": medians,
        "vs_torch_sdpa": {
            name: medians[name] / medians["torch_sdpa"] for name in IMPLEMENTATIONS
        },
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {
        "machine": {
            "device": device,
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
        },
        "lengths": {},
    }
    for length in args.lengths:
        results["lengths"][str(length)] = measure(length, args.repeats, device)
        print(length, json.dumps(results["lengths"][str(length)]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "torch_fused.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
