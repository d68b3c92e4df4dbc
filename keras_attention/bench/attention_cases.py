"""The cases of the `attention` suite, each run in a process of its own
(`python -m keras_attention.bench --case`): attention and
`MultiHeadAttention` forward + backward, ours against Keras' and PyTorch's,
the matmul yardstick, and incremental decoding with and without a cache
(see the suite's docstring, `bench.attention`)."""

import numpy as np

MATMUL_SIZE = 2048
HEADS, HEAD_DIM, WIDTH = 8, 64, 512
CHUNK = 256
# Tokens per batch of the `grid` cases (at least one sequence).
GRID_TOKENS = 4096


def _case_ops(case):
    import keras

    from keras_attention.bench.common import (
        jit,
        peak_memory_bytes,
        peak_memory_growth,
        time_call,
        value_and_grad,
    )
    from keras_attention.ops import dot_product_attention

    length, impl, dtype = case["length"], case["impl"], case["dtype"]
    is_causal = case.get("causal", False)
    rng = np.random.default_rng(0)
    q, k, v = (
        keras.ops.convert_to_tensor(
            rng.normal(size=(1, length, HEADS, HEAD_DIM)).astype("float32"), dtype
        )
        for _ in range(3)
    )
    weights = keras.ops.convert_to_tensor(
        rng.normal(size=(HEAD_DIM,)).astype("float32"), dtype
    )

    def loss(q, k, v):
        if impl == "keras":
            out = keras.ops.dot_product_attention(q, k, v, is_causal=is_causal)
        else:
            chunk = CHUNK if impl == "ours_chunked" else None
            out = dot_product_attention(
                q,
                k,
                v,
                is_causal=is_causal,
                chunk_size=chunk,
                sliding_window=case.get("window"),
            )
        return keras.ops.sum(keras.ops.cast(out * weights, "float32"))

    baseline = peak_memory_bytes()
    step = jit(value_and_grad(loss))
    timing = time_call(step, q, k, v, repeats=case["repeats"])
    flops = 12 * HEADS * length * length * HEAD_DIM
    return {
        **timing,
        "gflops": flops / timing["median_s"] / 1e9,
        "peak_memory_bytes": peak_memory_growth(baseline),
    }


def _case_mha(case):
    import keras

    from keras_attention.bench.common import (
        jit,
        layer_value_and_grad,
        peak_memory_bytes,
        peak_memory_growth,
        time_call,
    )
    from keras_attention.layers import MultiHeadAttention

    length, impl = case["length"], case["impl"]
    batch = max(1, 4096 // length)
    cls = MultiHeadAttention if impl == "ours" else keras.layers.MultiHeadAttention
    # Half precision runs as Keras' mixed policy: bfloat16 compute, float32 weights.
    policy = "mixed_bfloat16" if case["dtype"] == "bfloat16" else None
    layer = cls(num_heads=HEADS, key_dim=HEAD_DIM, dtype=policy)
    x = keras.ops.convert_to_tensor(
        np.random.default_rng(0).normal(size=(batch, length, WIDTH)).astype("float32")
    )
    layer(x, x)
    step = jit(layer_value_and_grad(layer, lambda x: layer(x, x)))
    baseline = peak_memory_bytes()
    timing = time_call(
        step, [v.value for v in layer.trainable_variables], x, repeats=case["repeats"]
    )
    tokens = batch * length
    forward = 4 * 2 * tokens * WIDTH * WIDTH + 4 * batch * HEADS * length**2 * HEAD_DIM
    return {
        **timing,
        "batch": batch,
        "gflops": 3 * forward / timing["median_s"] / 1e9,
        "peak_memory_bytes": peak_memory_growth(baseline),
    }


def mha_flops(batch, length, width):
    """Forward + backward FLOPs of self-attention over `(batch, length,
    width)`: four `width x width` projections and the two `(T, S)` products,
    the backward pass twice the forward. Causal cases count the full square,
    as both layers compute it."""
    tokens = batch * length
    forward = 8 * tokens * width * width + 4 * batch * length * length * width
    return 3 * forward


def _case_grid(case):
    import keras

    from keras_attention.bench.common import (
        jit,
        layer_value_and_grad,
        time_alternating,
    )
    from keras_attention.layers import MultiHeadAttention

    length, width, causal = case["length"], case["width"], case["causal"]
    batch = max(1, GRID_TOKENS // length)
    policy = "mixed_bfloat16" if case["dtype"] == "bfloat16" else None
    rng = np.random.default_rng(0)
    x = keras.ops.convert_to_tensor(
        rng.normal(size=(batch, length, width)).astype("float32")
    )
    calls = {}
    for name, cls in (("ours", MultiHeadAttention), ("keras", None)):
        cls = cls or keras.layers.MultiHeadAttention
        layer = cls(num_heads=HEADS, key_dim=width // HEADS, dtype=policy)
        layer(x, x)

        def forward(x, layer=layer):
            return layer(x, x, use_causal_mask=causal)

        step = jit(layer_value_and_grad(layer, forward))
        calls[name] = (step, ([v.value for v in layer.trainable_variables], x))
    compute_dtype = "bfloat16" if policy else "float32"
    a, b = (
        keras.ops.convert_to_tensor(
            rng.normal(size=(MATMUL_SIZE, MATMUL_SIZE)).astype("float32"),
            compute_dtype,
        )
        for _ in range(2)
    )
    calls["matmul"] = (jit(keras.ops.matmul), (a, b))
    timings = time_alternating(calls, repeats=case["repeats"])
    matmul_gflops = 2 * MATMUL_SIZE**3 / timings["matmul"]["median_s"] / 1e9
    flops = mha_flops(batch, length, width)
    result = {"batch": batch, "matmul_gflops": matmul_gflops}
    for name in ("ours", "keras"):
        gflops = flops / timings[name]["median_s"] / 1e9
        result[name] = {
            **timings[name],
            "gflops": gflops,
            "matmul_fraction": gflops / matmul_gflops,
        }
    result["time_ratio"] = timings["ours"]["median_s"] / timings["keras"]["median_s"]
    return result


def grid_key(causal, width, dtype, length):
    return f"grid/{'causal' if causal else 'full'}/w{width}/{dtype}/T{length}"


def _case_matmul(case):
    import keras

    from keras_attention.bench.common import jit, time_call

    n = case["size"]
    rng = np.random.default_rng(0)
    a, b = (
        keras.ops.convert_to_tensor(
            rng.normal(size=(n, n)).astype("float32"), case["dtype"]
        )
        for _ in range(2)
    )
    timing = time_call(jit(keras.ops.matmul), a, b, repeats=case["repeats"])
    return {**timing, "gflops": 2 * n**3 / timing["median_s"] / 1e9}


def _case_torch_sdpa(case):
    """`torch.nn.functional.scaled_dot_product_attention`, forward+backward,
    the peer on a machine that has PyTorch (its GPU when there is one)."""
    import torch

    from keras_attention.bench.common import time_call

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, case["dtype"])
    generator = torch.Generator().manual_seed(0)
    length = case["length"]
    q, k, v = (
        torch.randn(1, HEADS, length, HEAD_DIM, generator=generator)
        .to(device, dtype)
        .requires_grad_()
        for _ in range(3)
    )
    weights = torch.randn(HEAD_DIM, generator=generator).to(device, dtype)

    def step(q, k, v):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        loss = (out * weights).float().sum()
        return torch.autograd.grad(loss, (q, k, v))

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    baseline = torch.cuda.memory_allocated() if device == "cuda" else 0
    timing = time_call(step, q, k, v, repeats=case["repeats"])
    flops = 12 * HEADS * length * length * HEAD_DIM
    peak = torch.cuda.max_memory_allocated() - baseline if device == "cuda" else None
    return {
        **timing,
        "gflops": flops / timing["median_s"] / 1e9,
        "peak_memory_bytes": peak,
    }


def decode_flops(batch, width, blocks, slots):
    """Multiply-adds x 2 of one decoding step of `blocks` decoder blocks
    (self-attention only, feed-forward 4 x width) for `batch` sequences,
    attending over a cache of `slots` positions."""
    projections = 4 * width * width + 2 * width * 4 * width
    attention = 2 * slots * width
    return 2 * batch * blocks * (projections + attention)


def _case_decode(case):
    """Greedy-style generation through decoder blocks with their caches, ours
    against keras-hub's `TransformerDecoder` in turn, plus ours without a
    cache (the whole padded prefix re-run at every step) and the matmul
    yardstick; each generation loop is one compiled function."""
    import keras
    import keras_hub

    from keras_attention.bench.common import jit, time_alternating
    from keras_attention.layers import TransformerDecoderBlock

    batch, width, steps = case["batch"], case["width"], case["steps"]
    heads, depth = case["heads"], case["blocks"]
    rng = np.random.default_rng(0)
    x = keras.ops.convert_to_tensor(
        rng.normal(size=(batch, steps, width)).astype("float32")
    )
    prompt = keras.ops.concatenate([x[:, :1], keras.ops.zeros_like(x[:, 1:])], axis=1)
    stacks = {
        "ours": [TransformerDecoderBlock(4 * width, heads) for _ in range(depth)],
        "keras_hub": [
            keras_hub.layers.TransformerDecoder(4 * width, heads) for _ in range(depth)
        ],
    }
    for stack in stacks.values():
        for b in stack:
            b(x)

    def generate_with_cache(stack):
        def generate(prompt, caches):
            def body(t, carry):
                sequence, caches = carry
                token = keras.ops.slice(sequence, (0, t, 0), (batch, 1, width))
                new_caches = []
                for b, cache in zip(stack, caches, strict=True):
                    token, cache = b(
                        token,
                        self_attention_cache=cache,
                        self_attention_cache_update_index=t,
                    )
                    new_caches.append(cache)
                sequence = keras.ops.slice_update(sequence, (0, t + 1, 0), token)
                return sequence, new_caches

            return keras.ops.fori_loop(0, steps - 1, body, (prompt, caches))[0]

        return jit(generate)

    def generate_without_cache(prompt):
        def body(t, sequence):
            out = sequence
            for b in stacks["ours"]:
                out = b(out)
            token = keras.ops.slice(out, (0, t, 0), (batch, 1, width))
            return keras.ops.slice_update(sequence, (0, t + 1, 0), token)

        return keras.ops.fori_loop(0, steps - 1, body, prompt)

    cache_shape = (batch, 2, steps, heads, width // heads)
    calls = {
        "ours": (
            generate_with_cache(stacks["ours"]),
            (prompt, [keras.ops.zeros(cache_shape) for _ in range(depth)]),
        ),
        "keras_hub": (
            generate_with_cache(stacks["keras_hub"]),
            (prompt, [keras.ops.zeros(cache_shape) for _ in range(depth)]),
        ),
        "ours_no_cache": (jit(generate_without_cache), (prompt,)),
    }
    a, b = (
        keras.ops.convert_to_tensor(
            rng.normal(size=(MATMUL_SIZE, MATMUL_SIZE)).astype("float32")
        )
        for _ in range(2)
    )
    calls["matmul"] = (jit(keras.ops.matmul), (a, b))
    calls["dense_floor"] = (jit(_dense_floor_loop(case, rng)), (prompt,))
    timings = time_alternating(calls, repeats=case["repeats"])
    matmul_gflops = 2 * MATMUL_SIZE**3 / timings["matmul"]["median_s"] / 1e9
    tokens = steps - 1
    per_token = {
        name: timings[name]["median_s"] / tokens
        for name in ("ours", "keras_hub", "ours_no_cache", "dense_floor")
    }
    bound = decode_flops(batch, width, depth, steps) / (matmul_gflops * 1e9)
    return {
        "timings": {k: v for k, v in timings.items() if k != "matmul"},
        "heads": heads,
        "matmul_gflops": matmul_gflops,
        "per_token_s": per_token,
        "matmul_bound_per_token_s": bound,
        "time_ratio_vs_keras_hub": per_token["ours"] / per_token["keras_hub"],
        "times_matmul_bound": per_token["ours"] / bound,
        "dense_floor_times_matmul_bound": per_token["dense_floor"] / bound,
        "times_dense_floor": per_token["ours"] / per_token["dense_floor"],
        "speedup": per_token["ours_no_cache"] / per_token["ours"],
    }


def _dense_floor_loop(case, rng):
    """The step's dense layers alone, as one compiled loop of the same steps:
    per block the query, key, value and output projections and the two
    feed-forward matmuls, `(batch, width)` rows through random weights of the
    blocks' shapes, and nothing else (no attention, normalization or
    cache). What a step costs at this batch when only its matmuls run: the
    rate of small matmuls, which the 2048^3 yardstick overstates."""
    import keras

    batch, width, steps = case["batch"], case["width"], case["steps"]
    shapes = [(width, width)] * 4 + [(width, 4 * width), (4 * width, width)]
    weights = [
        [
            keras.ops.convert_to_tensor(
                (rng.normal(size=shape) / np.sqrt(shape[0])).astype("float32")
            )
            for shape in shapes
        ]
        for _ in range(case["blocks"])
    ]

    def dense_floor(prompt):
        def body(t, sequence):
            token = keras.ops.slice(sequence, (0, t, 0), (batch, 1, width))[:, 0]
            for query, key, value, output, hidden, back in weights:
                mixed = keras.ops.matmul(token, query) + keras.ops.matmul(token, key)
                mixed = mixed + keras.ops.matmul(token, value)
                token = token + keras.ops.matmul(mixed, output)
                token = token + keras.ops.matmul(
                    keras.ops.relu(keras.ops.matmul(token, hidden)), back
                )
            return keras.ops.slice_update(sequence, (0, t + 1, 0), token[:, None])

        return keras.ops.fori_loop(0, steps - 1, body, prompt)

    return dense_floor


CASES = {
    "ops": _case_ops,
    "mha": _case_mha,
    "grid": _case_grid,
    "matmul": _case_matmul,
    "torch_sdpa": _case_torch_sdpa,
    "decode": _case_decode,
}
