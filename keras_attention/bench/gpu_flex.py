"""The `flex` part of the `gpu` suite: flexible attention on the fused kernels.

Forward + backward in bfloat16 (gradients of queries, keys and values, and of
T5's table), each variant compiled with XLA on the JAX backend; T = S from
1024 to 32,768 with B x T held at 32,768 tokens, and one long causal case at
T = 131,072 (B = 1), 16 heads of 128. One process per T, as in the
`attention` part: every variant is traced, all are compiled (several at
once), each runs once (the warm-up), then the variants of a group are timed
in turn (`time_alternating`). Three groups:

- `layer`: `keras_attention.layers.MultiHeadAttention(num_heads=16,
  key_dim=128)` made with `MultiHeadAttention.from_keras` from a
  `keras.layers.MultiHeadAttention(num_heads=16, key_dim=128)` (the same
  weights), both under the `"mixed_bfloat16"` policy, where Keras' layer
  takes cuDNN by itself (`flash_attention=None`, half precision, no dropout,
  no scores returned), on inputs of width 16 x 128, without and with
  `use_causal_mask`; gradients of the weights and the input. Each row
  records the path our layer took (`layer.attention_path`) and the kernel
  Keras' step holds (`kernel`: a cuDNN custom call in its lowered program, or
  `xla`). FLOPs: `LAYER_FLOPS_FORMULA`.
- `plain`: our `ops.dot_product_attention(..., flash_attention=True)`
  without a mask and causal: cuDNN on a GPU (its `path` says which served),
  the reference of the throughput ratios.
- the variants, ours through `ops.dot_product_attention(...,
  flash_attention=True)` (the Pallas kernel on a GPU: `path`) against what
  Keras does for the same attention, `keras.ops.dot_product_attention`
  with `flash_attention=None` (Keras picks cuDNN or XLA itself; `kernel`
  records which) and the dense mask or bias a Keras user builds:
  - `soft_cap`: causal, `attn_logits_soft_cap=50`; Keras' op refuses a soft
    cap off a TPU, so its row is the unfused attention keras-hub's Gemma
    writes (einsum, `cap * tanh(s / cap)`, a float32 softmax, einsum);
  - `window`: `sliding_window=4096, is_causal=True`; Keras: the dense band
    mask with `is_causal=True`;
  - `documents`: 8 packed documents of equal length per row, `segment_ids`,
    causal; Keras: the dense `(B, 1, T, S)` document mask with
    `is_causal=True`;
  - `alibi`: causal, `alibi_slopes=ops.alibi_slopes(16)`; Keras: the dense
    `(1, H, T, S)` ALiBi bias with `is_causal=True`;
  - `t5`: T5's bucketed bias in both directions, not causal,
    `score_mod=mods.relative_position_score_mod(32, 128, True)` over a
    trainable `(32, 16)` table in `score_mod_inputs` (its gradient
    included); Keras: the dense `(1, H, T, S)` bias gathered from the table.

  FLOPs count the visible tiles only (`FLEX_FLOPS_FORMULA`). A Keras row
  whose dense tensors (`dense_bytes`) would take over half the device's
  memory is recorded as skipped with the reason, as one whose cuDNN call
  fails to compile falls back to Keras' XLA path (a note says so).

The long case runs the causal rows only (T5's is bidirectional); at its
length no dense mask or bias fits, so it measures ours, the plain causal
call and both layers. Ratios (`summarize`): ours / Keras' layer speed
(`keras ms / ours ms`, target >= 0.95), each variant's throughput over the
plain call's with the same causality (target >= 0.8), and each variant's
speed-up over Keras' (`keras ms / ours ms`).
"""

import time

from keras_attention.bench.common import finish_axes

# The names marked F401 were this module's before the parts shared them:
# importable from here as before.
from keras_attention.bench.gpu_common import (
    CUSTOM_CALLS,  # noqa: F401
    attention_flops,
    case_seconds,
    cases_by_length,
    compile_steps,
    describe_error,
    device_info,
    kernels_in,
    memory_limit_bytes,
    table_cell,
    time_in_turn,
)

# Visible (query, key) pairs per head, the FLOPs of the attention rows.
FLEX_FLOPS_FORMULA = (
    "3.5 x 4·B·H·D·P (forward 4·B·H·D·P, backward 2.5x the forward) over the "
    "P visible (query, key) pairs per head: T·S without a mask, T²/2 causal, "
    "T·w - w²/2 for a causal window of w < T, n·(T/n)²/2 for n causal "
    "documents of T/n tokens"
)
LAYER_FLOPS_FORMULA = (
    "the attention's 3.5 x 4·B·H·T·S·D (halved when causal) plus the four "
    "projections (query, key, value, output; input width E = H·D): forward "
    "2·B·T·E·H·D each, backward 2x the forward, so 24·B·T·E·H·D"
)
VARIANTS = ("soft_cap", "window", "documents", "alibi", "t5")
CAUSAL_VARIANTS = ("soft_cap", "window", "documents", "alibi")
LAYER_MASKS = ("full", "causal")
SIDES = ("ours", "keras")
# A Keras row whose dense tensors would take more than this fraction of the
# device's memory is not run (XLA's temporaries and autotuning need the rest).
DENSE_FRACTION = 0.5
TARGETS = {"layer_speed": 0.95, "throughput_vs_plain": 0.8}

FULL = {
    "lengths": (1024, 4096, 16384, 32768),
    "long": {"length": 131072, "repeats": 2},
    "tokens": 32768,
    "heads": 16,
    "head_dim": 128,
    "soft_cap": 50.0,
    "window": 4096,
    "documents": 8,
    "num_buckets": 32,
    "max_distance": 128,
    "policy": "mixed_bfloat16",
    "parallel_compile": True,
    "repeats": 5,
    "long_repeats": 3,
    "long_from": 16384,
}
# T = 64 with every row, T = 128 as the long case (its causal rows).
QUICK = {
    **FULL,
    "lengths": (64,),
    "long": {"length": 128, "repeats": 2},
    "tokens": 256,
    "heads": 2,
    "head_dim": 16,
    "window": 32,
    "repeats": 2,
    "long_repeats": 2,
    "long_from": 128,
}


def row_names(causal_only=False):
    """Every row of a case, in order; `causal_only`: the long case's."""
    masks = ("causal",) if causal_only else LAYER_MASKS
    variants = CAUSAL_VARIANTS if causal_only else VARIANTS
    names = [f"layer/{mask}/{side}" for mask in LAYER_MASKS for side in SIDES]
    names += [f"plain/{mask}" for mask in LAYER_MASKS]
    names += [f"{variant}/{side}" for variant in VARIANTS for side in SIDES]
    run = [
        name
        for name in names
        if name.split("/")[0] in variants
        or (name.startswith(("layer/", "plain/")) and name.split("/")[1] in masks)
    ]
    return names, run


def visible_pairs(kind, length, window=None, documents=None):
    """P of `FLEX_FLOPS_FORMULA`: the (query, key) pairs a head computes
    for a mask `kind` (`"full"`, `"causal"`, `"window"` (causal),
    `"documents"` (causal))."""
    if kind == "full":
        return float(length) * length
    if kind == "window" and window < length:
        return float(length) * window - window * window / 2
    if kind == "documents":
        return documents * (length / documents) ** 2 / 2
    return float(length) * length / 2


def variant_flops(variant, batch, heads, length, head_dim, config):
    kind = {"t5": "full", "window": "window", "documents": "documents"}
    pairs = visible_pairs(
        kind.get(variant, "causal"), length, config["window"], config["documents"]
    )
    return 3.5 * 4 * batch * heads * head_dim * pairs


def layer_flops(batch, heads, length, head_dim, causal):
    """`LAYER_FLOPS_FORMULA`."""
    width = heads * head_dim
    projections = 24 * batch * length * width * heads * head_dim
    return attention_flops(batch, heads, length, head_dim, causal) + projections


def dense_bytes(variant, batch, heads, length):
    """`(bytes, what)`: the dense tensors Keras' row of `variant` holds."""
    grid = float(length) * length
    if variant == "soft_cap":
        return 16 * batch * heads * grid, "4 float32 tensors of B·H·T·S"
    if variant == "window":
        return 5 * grid, "a (T, S) mask, its bfloat16 bias and the bias' gradient"
    if variant == "documents":
        return 5 * batch * grid, (
            "a (B, 1, T, S) mask, its bfloat16 bias and the bias' gradient"
        )
    return 12 * heads * grid, (
        "a (1, H, T, S) float32 bias, its bfloat16 copy and their gradients"
    )


def _arguments(variant, config, segments):
    """`dot_product_attention`'s keyword arguments of an attention row."""
    from keras_attention.ops import alibi_slopes, mods

    if variant == "plain/full":
        return {}
    if variant == "plain/causal":
        return {"is_causal": True}
    if variant == "soft_cap":
        return {"is_causal": True, "attn_logits_soft_cap": config["soft_cap"]}
    if variant == "window":
        return {"is_causal": True, "sliding_window": config["window"]}
    if variant == "documents":
        return {"is_causal": True, "segment_ids": segments}
    if variant == "alibi":
        return {"is_causal": True, "alibi_slopes": alibi_slopes(config["heads"])}
    return {
        "score_mod": mods.relative_position_score_mod(
            config["num_buckets"], config["max_distance"], True
        )
    }


def _ours_loss(variant, config):
    """`loss(q, k, v, table, w, segments)` of our op with `flash_attention=True`."""
    import keras

    from keras_attention.ops import dot_product_attention

    def loss(q, k, v, table, w, segments):
        arguments = _arguments(variant, config, segments)
        if variant == "t5":
            arguments["score_mod_inputs"] = (table,)
        out = dot_product_attention(q, k, v, flash_attention=True, **arguments)
        return keras.ops.sum(keras.ops.cast(out * w, "float32"))

    return loss


def _keras_loss(variant, config, length, flash_attention=None):
    """`loss(q, k, v, table, w, segments)` of what Keras does for `variant`:
    `keras.ops.dot_product_attention` with the dense mask or bias, and for
    the soft cap the unfused attention of keras-hub's Gemma."""
    import keras

    from keras_attention.ops import alibi_slopes
    from keras_attention.ops.positions import alibi_bias, relative_position_buckets

    ops = keras.ops

    def causal():
        rows = ops.arange(length)[:, None]
        return rows >= ops.arange(length)[None, :]

    def soft_capped(q, k, v):
        cap = config["soft_cap"]
        scale = ops.cast(1.0 / config["head_dim"] ** 0.5, q.dtype)
        logits = ops.einsum("bthd,bshd->bhts", q * scale, k)
        logits = ops.tanh(logits / ops.cast(cap, logits.dtype)) * ops.cast(
            cap, logits.dtype
        )
        logits = ops.where(causal()[None, None], ops.cast(logits, "float32"), -1e9)
        weights = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
        return ops.einsum("bhts,bshd->bthd", weights, v)

    def attend(q, k, v, table, segments):
        if variant == "soft_cap":
            return soft_capped(q, k, v)
        mask = bias = None
        if variant == "window":
            rows = ops.arange(length)[:, None]
            band = causal() & (rows - ops.arange(length)[None, :] < config["window"])
            mask = band[None, None]
        elif variant == "documents":
            same = segments[:, :, None] == segments[:, None, :]
            mask = (same & causal()[None])[:, None]
        elif variant == "alibi":
            bias = alibi_bias(alibi_slopes(config["heads"]), length)[None]
        else:
            buckets = relative_position_buckets(
                length, length, config["num_buckets"], config["max_distance"], True
            )
            bias = ops.transpose(ops.take(table, buckets, axis=0), (2, 0, 1))[None]
        return ops.dot_product_attention(
            q,
            k,
            v,
            bias=bias,
            mask=mask,
            is_causal=variant != "t5",
            flash_attention=flash_attention,
        )

    def loss(q, k, v, table, w, segments):
        out = attend(q, k, v, table, segments)
        return ops.sum(ops.cast(out * w, "float32"))

    return loss


def _layers(config, batch, length, policy):
    """`{mask: {side: (layer, step, args)}}`: Keras' MultiHeadAttention and
    ours from it (the same weights), each step a forward + backward of the
    weights and the input under `policy`."""
    import keras

    from keras_attention.bench.common import layer_value_and_grad
    from keras_attention.layers import MultiHeadAttention

    heads, head_dim = config["heads"], config["head_dim"]
    width = heads * head_dim
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        theirs = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=head_dim)
        shape = (batch, length, width)
        theirs.build(shape, shape)
        ours = MultiHeadAttention.from_keras(theirs)
    finally:
        keras.config.set_dtype_policy(previous)
    x = keras.random.normal(shape, seed=5, dtype="float32")
    steps = {}
    for mask in LAYER_MASKS:
        steps[mask] = {}
        for side, layer in (("ours", ours), ("keras", theirs)):

            def forward(x, layer=layer, causal=mask == "causal"):
                return layer(x, x, use_causal_mask=causal)

            values = [v.value for v in layer.trainable_variables]
            steps[mask][side] = (
                layer,
                layer_value_and_grad(layer, forward),
                (values, x),
            )
    return steps


def case_flex(case):
    """Every row of `row_names` at one T: traced, compiled together
    (`compile_steps`), run once each, then timed in turn per group."""
    import jax
    import keras
    import numpy as np

    from keras_attention.bench.common import accelerator, block
    from keras_attention.ops import attention_path

    start, seconds = time.monotonic(), case_seconds()
    on_accelerator = accelerator() is not None
    dtype = "bfloat16" if on_accelerator else "float32"
    policy = case["policy"] if on_accelerator else "float32"
    length, heads, head_dim = case["length"], case["heads"], case["head_dim"]
    batch = max(1, case["tokens"] // length)
    shape = (batch, length, heads, head_dim)
    q, k, v = (keras.random.normal(shape, seed=i, dtype=dtype) for i in range(3))
    w = keras.random.normal((head_dim,), seed=3, dtype=dtype)
    table = keras.random.normal((case["num_buckets"], heads), seed=4)
    document = max(1, length // case["documents"])
    segments = keras.ops.convert_to_tensor(
        np.broadcast_to(np.arange(length) // document, (batch, length)).astype("int32")
    )
    limit = memory_limit_bytes()
    repeats = case["long_repeats"] if length >= case["long_from"] else case["repeats"]
    causal_only = case.get("causal_only", False)
    names, run = row_names(causal_only)
    result = {
        "batch": batch,
        "length": length,
        "dtype": dtype,
        "policy": policy,
        "device": device_info(),
        "memory_limit_bytes": limit,
        "repeats": repeats,
        "causal_only": causal_only,
    }
    rows, lowered, notes, calls_of = {}, {}, {}, {}
    for name in names:
        if name not in run:
            rows[name] = {
                "skipped": f"the long case (T = {length}) runs the causal rows only"
            }
    attention_args = (q, k, v, table, w, segments)

    def lower(name, loss, argnums, heavy):
        try:
            step = jax.jit(jax.value_and_grad(loss, argnums=argnums))
            item = step.lower(*attention_args)
        except Exception as error:  # recorded, the others still run
            rows[name] = {"skipped": describe_error(error)}
            return None
        lowered[name] = (item, heavy)
        calls_of[name] = attention_args
        return item

    # The layers (their paths are known once traced).
    layers = {}
    if any(name.startswith("layer/") for name in run):
        try:
            layers = _layers(case, batch, length, policy)
        except Exception as error:
            for name in run:
                if name.startswith("layer/"):
                    rows[name] = {"skipped": describe_error(error)}
    for mask, sides in layers.items():
        for side, (layer, step, args) in sides.items():
            name = f"layer/{mask}/{side}"
            if name not in run:
                continue
            try:
                item = jax.jit(step).lower(*args)
            except Exception as error:
                rows[name] = {"skipped": describe_error(error)}
                continue
            lowered[name] = (item, False)
            calls_of[name] = args
            notes[name] = {"kernel": kernels_in(item)}
            if side == "ours":
                notes[name]["path"] = layer.attention_path
    # The plain calls and the variants.
    for name in run:
        if name.startswith("layer/"):
            continue
        variant, _, side = name.partition("/")
        if variant == "plain":
            variant, side = name, "ours"
        argnums = (0, 1, 2, 3) if variant == "t5" else (0, 1, 2)
        if side == "ours":
            arguments = _arguments(variant, case, segments)
            try:
                path = attention_path(q, v, flash_attention=True, **arguments)
            except Exception as error:
                path = f"unknown ({describe_error(error)})"
            item = lower(name, _ours_loss(variant, case), argnums, False)
            if item is not None:
                notes[name] = {"path": path, "kernel": kernels_in(item)}
            continue
        needed, what = dense_bytes(variant, batch, heads, length)
        result.setdefault("dense_bytes", {})[variant] = needed
        if needed > DENSE_FRACTION * limit:
            rows[name] = {
                "skipped": f"dense: {what} would need about {needed / 2**30:.0f} "
                f"GiB, over half the device's {limit / 2**30:.0f} GiB"
            }
            continue
        item = lower(name, _keras_loss(variant, case, length), argnums, True)
        if item is not None:
            notes[name] = {"kernel": kernels_in(item)}
    compiled = compile_steps(lowered, case.get("parallel_compile", True))
    # Keras' automatic choice (cuDNN) failing to compile falls back to its
    # XLA path where the scores fit, with a note.
    for name, step in list(compiled.items()):
        variant = name.split("/")[0]
        if not (name.endswith("/keras") and variant in VARIANTS):
            continue
        if not isinstance(step, Exception) or notes[name]["kernel"] == "xla":
            continue
        scores, _ = dense_bytes("soft_cap", batch, heads, length)
        if scores > DENSE_FRACTION * limit:
            continue
        argnums = (0, 1, 2, 3) if variant == "t5" else (0, 1, 2)
        loss = _keras_loss(variant, case, length, flash_attention=False)
        try:
            item = jax.jit(jax.value_and_grad(loss, argnums=argnums)).lower(
                *attention_args
            )
            compiled[name] = item.compile()
        except Exception:  # the first failure is the one reported
            continue
        notes[name] = {
            "kernel": kernels_in(item),
            "note": f"keras.ops' own choice ({notes[name]['kernel']}) failed to "
            f"compile ({describe_error(step)}); timed with flash_attention=False",
        }
    result["compile_s"] = time.monotonic() - start
    for name, step in compiled.items():
        if isinstance(step, Exception):
            rows[name] = {"skipped": describe_error(step)}
    groups = {
        "layer": [n for n in run if n.startswith("layer/")],
        "attention": [n for n in run if not n.startswith("layer/")],
    }
    for group, members in groups.items():
        calls = {}
        for name in members:
            if name in rows:
                continue
            if seconds is not None and time.monotonic() - start > seconds:
                rows[name] = {"skipped": "the time budget was spent"}
                continue
            try:
                block(compiled[name](*calls_of[name]))  # the warm-up
            except Exception as error:
                rows[name] = {"skipped": describe_error(error)}
                continue
            calls[name] = (compiled[name], calls_of[name])
        timings = time_in_turn(calls, repeats, rows)
        for name, timing in timings.items():
            causal = "causal" in name or name.split("/")[0] in CAUSAL_VARIANTS
            if group == "layer":
                flops = layer_flops(batch, heads, length, head_dim, causal)
            elif name.startswith("plain/"):
                flops = attention_flops(batch, heads, length, head_dim, causal)
            else:
                flops = variant_flops(
                    name.split("/")[0], batch, heads, length, head_dim, case
                )
            rows[name] = {
                **timing,
                "ms": 1e3 * timing["median_s"],
                "flops": flops,
                "tflops": flops / timing["median_s"] / 1e12,
            }
    for name, note in notes.items():
        rows[name] = {**note, **rows.get(name, {})}
    result["rows"] = {name: rows.get(name, {"skipped": "not run"}) for name in names}
    return result


def flex_part(measure, config, quick):
    """One process per T (`case_flex`), the long causal case last."""
    from keras_attention.utils.progress import phase

    lengths = [(length, False) for length in config["lengths"]]
    if config.get("long"):
        lengths.append((config["long"]["length"], True))
    for length, long in lengths:
        phase(
            f"flex fwd+bwd T={length}: "
            + ("the causal rows (the long case)" if long else "layers, mods, masks")
        )
        case = {
            "kind": "flex",
            "quick": quick,
            **{k: v for k, v in config.items() if k not in ("lengths", "long")},
            "length": length,
        }
        if long:
            repeats = config["long"]["repeats"]
            case.update(causal_only=True, repeats=repeats, long_repeats=repeats)
        measure(f"flex/T{length}", case)


def flex_cases(results):
    """`[(length, case)]` of the flex cases, by T."""
    return cases_by_length(results, "flex")


def _reference(variant):
    return "plain/full" if variant == "t5" else "plain/causal"


def summarize(results, fractions, ratios):
    """Adds each row's `peak_fraction`, and the flex part's fractions and
    ratios (see the module's docstring), to `fractions` and `ratios`."""
    peak = results["peak_flops"]
    for length, case in flex_cases(results):
        if "device" in case and "device" not in results:
            results["device"] = case["device"]
        rows = case.get("rows", {})
        for name, row in rows.items():
            if "tflops" in row:
                row["peak_fraction"] = row["tflops"] * 1e12 / peak
                fractions[f"flex/{name}/T{length}"] = row["peak_fraction"]

        def ms(name, rows=rows):
            return rows.get(name, {}).get("median_s")

        for mask in LAYER_MASKS:
            ours, keras = ms(f"layer/{mask}/ours"), ms(f"layer/{mask}/keras")
            if ours and keras:
                ratios[f"flex/layer_{mask}/ours_vs_keras_speed/T{length}"] = (
                    keras / ours
                )
        for variant in VARIANTS:
            ours = rows.get(f"{variant}/ours", {})
            reference = rows.get(_reference(variant), {})
            if "tflops" in ours and "tflops" in reference:
                ratios[f"flex/{variant}/throughput_vs_plain/T{length}"] = (
                    ours["tflops"] / reference["tflops"]
                )
            keras = ms(f"{variant}/keras")
            if ours.get("median_s") and keras:
                ratios[f"flex/{variant}/speedup_vs_keras/T{length}"] = (
                    keras / ours["median_s"]
                )


def markdown_lines(results, reasons):
    """The flex part's section of the suite's report (`reasons`: the
    report's footnotes of skipped cells, appended to)."""
    config = results["config"].get("flex", FULL)
    ratios = results.get("ratios", {})
    peak = results["peak_flops"]
    cases = flex_cases(results)
    policies = sorted({case["policy"] for _, case in cases if "policy" in case})
    lines = [
        "",
        "### Flexible attention on the fused kernels (flex)",
        "",
        f"Forward + backward, {config['tokens']} tokens per step (B = "
        f"{config['tokens']} / T, at least 1), {config['heads']} heads "
        f"of {config['head_dim']}. Cells: ms per step and, in brackets, the "
        f"fraction of {peak / 1e12:.0f} TFLOP/s. The rows of a T were timed "
        "in turn in one process.",
        "",
        f"Layers: our `MultiHeadAttention.from_keras` of Keras' (same weights), "
        f"policy {', '.join(policies) or config['policy']}; FLOPs: "
        f"{LAYER_FLOPS_FORMULA}. Speed = keras ms / ours ms (target >= "
        f"{TARGETS['layer_speed']}).",
        "",
        "| mask | T | B | ours | keras | ours path | keras kernel | speed |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    if "flex" in results["cases"]:  # the part failed in this process
        lines.append(f"| {table_cell(results['cases']['flex'], reasons)} |")
    for mask in LAYER_MASKS:
        for length, case in cases:
            rows = case.get("rows", {})
            ours = rows.get(f"layer/{mask}/ours", case)
            keras = rows.get(f"layer/{mask}/keras", case)
            speed = ratios.get(f"flex/layer_{mask}/ours_vs_keras_speed/T{length}")
            lines.append(
                f"| {mask} | {length} | {case.get('batch', '')} | "
                f"{table_cell(ours, reasons)} | {table_cell(keras, reasons)} | "
                f"{ours.get('path', '')} | {keras.get('kernel', '')} | "
                f"{'n/a' if speed is None else f'{speed:.2f}'} |"
            )
    lines += [
        "",
        "Attention: ours `ops.dot_product_attention(..., flash_attention=True)` "
        "(`path`: the kernel that served), Keras `keras.ops.dot_product_attention` "
        "with the dense mask or bias (`flash_attention=None`; `kernel`: what it "
        "took), for the soft cap keras-hub's unfused Gemma attention. FLOPs of "
        f"the visible pairs: {FLEX_FLOPS_FORMULA}. vs plain = ours' TFLOP/s over "
        "the plain call's with the same causality (target >= "
        f"{TARGETS['throughput_vs_plain']}); speed-up = keras ms / ours ms.",
        "",
        "| attention | T | B | ours path | ours | TFLOP/s | vs plain | keras kernel "
        "| keras | speed-up |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for variant in ("plain/full", "plain/causal", *VARIANTS):
        for length, case in cases:
            rows = case.get("rows", {})
            if variant.startswith("plain/"):
                ours, keras = rows.get(variant, case), {}
            else:
                ours = rows.get(f"{variant}/ours", case)
                keras = rows.get(f"{variant}/keras", case)
            against = ratios.get(f"flex/{variant}/throughput_vs_plain/T{length}")
            speedup = ratios.get(f"flex/{variant}/speedup_vs_keras/T{length}")
            tflops = f"{ours['tflops']:.3g}" if "tflops" in ours else ""
            note = " (fallback)" if "note" in keras else ""
            lines.append(
                f"| {variant} | {length} | {case.get('batch', '')} | "
                f"{ours.get('path', '')} | {table_cell(ours, reasons)} | {tflops} | "
                f"{'' if against is None else f'{against:.2f}'} | "
                f"{keras.get('kernel', '')}{note} | "
                + (table_cell(keras, reasons) if keras else "")
                + f" | {'' if speedup is None else f'{speedup:.2f}x'} |"
            )
    for _, case in cases:
        for name, row in case.get("rows", {}).items():
            if "note" in row:
                lines += ["", f"T = {case['length']}, {name}: {row['note']}."]
    return lines


def plot_panel(ax, results):
    """Our variants' TFLOP/s of visible FLOPs against T, the plain calls
    dashed, Keras' rows dotted."""
    cases = flex_cases(results)
    series = [("plain/causal", "o-"), ("plain/full", "o--")]
    series += [(f"{variant}/ours", "s-") for variant in VARIANTS]
    series += [(f"{variant}/keras", "x:") for variant in VARIANTS]
    for name, style in series:
        xs, ys = [], []
        for length, case in cases:
            row = case.get("rows", {}).get(name, {})
            if "tflops" in row:
                xs.append(length)
                ys.append(row["tflops"])
        if xs:
            variant, side = name.split("/")
            color = "k" if variant == "plain" else f"C{VARIANTS.index(variant)}"
            alpha = 0.6 if side == "keras" else 1.0
            ax.plot(xs, ys, style, color=color, label=name, alpha=alpha)
    if finish_axes(
        ax, "sequence length T = S", "TFLOP/s of the visible pairs", legend_size=6
    ):
        ax.set_title("flex: fwd+bwd throughput", fontsize=10)
