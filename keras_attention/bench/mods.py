"""The `mods` suite: flexible attention against the hand-written paths and
against Keras with the equivalent dense mask or bias.

Forward + backward, XLA on, B=1, 8 heads of 64, causal, float32. At each
length T one process times every implementation in turn
(`time_alternating`), so that each ratio comes from the same minutes:

- `causal`: the chunked path with `is_causal=True` (its hand-written tile
  ranges) against `mask_mod=mods.causal_mask_mod` (the generic block mask).
- `soft_cap`: `attn_logits_soft_cap=30` (hand-written derivative) against
  `score_mod=mods.soft_cap_score_mod(30)` (differentiated per tile), both
  chunked. Keras' `attn_logits_soft_cap` raises off a TPU: no peer here.
- `documents`: 8 packed documents of T/8 tokens: `segment_ids` on the chunked
  path (tiles between documents skipped) against our standard path with the
  dense `(T, T)` mask and `keras.ops.dot_product_attention` (what Keras'
  `MultiHeadAttention` calls) with that mask.
- `t5`: T5's relative position bias from a trainable table: the chunked path
  with `mods.relative_position_score_mod` (the table's gradient included)
  against our standard path and `keras.ops.dot_product_attention`, each with
  the dense `(N, T, T)` bias gathered from the table.

Memory rows, each its own process (one timed call): the `documents` and `t5`
score mods on the chunked path at T = 16,384 and 65,536 (documents of 2,048
tokens, so that the work stays that of T * 2,048), against the float32
`(N, T, T)` scores alone that a dense path would keep.

Usage: `python -m keras_attention.bench --suite mods [--quick] [--out DIR]`.
"""

import numpy as np

from keras_attention.bench.common import describe

HEADS, HEAD_DIM, CHUNK, CAP = 8, 64, 256, 30.0
NUM_BUCKETS, MAX_DISTANCE = 32, 128
FULL = {"lengths": (1024, 4096), "memory_lengths": (16384, 65536), "repeats": 5}
QUICK = {"lengths": (256,), "memory_lengths": (1024,), "repeats": 2}
MEMORY_DOCUMENT = 2048
IMPLS = {
    "causal": ("is_causal", "mask_mod"),
    "soft_cap": ("attn_logits_soft_cap", "score_mod"),
    "documents": ("segment_ids", "ours_dense_mask", "keras_dense_mask"),
    "t5": ("score_mod", "ours_dense_bias", "keras_dense_bias"),
}


def _inputs(length, document):
    import keras

    rng = np.random.default_rng(0)
    q, k, v = (
        keras.ops.convert_to_tensor(
            rng.normal(size=(1, length, HEADS, HEAD_DIM)).astype("float32")
        )
        for _ in range(3)
    )
    table = keras.ops.convert_to_tensor(
        rng.normal(size=(NUM_BUCKETS, HEADS)).astype("float32")
    )
    segments = (np.arange(length) // document)[None].astype("int32")
    return q, k, v, table, segments


def _loss(kind, impl, segments, length, packed=False):
    """`loss(q, k, v, table)` of one implementation: the attention's outputs
    against fixed weights, summed. `packed`: the T5 score mod within the
    documents of `segments`."""
    import keras

    from keras_attention.ops import dot_product_attention, mods
    from keras_attention.ops.positions import relative_position_buckets

    ops = keras.ops
    weights = ops.convert_to_tensor(
        np.random.default_rng(1).normal(size=(HEAD_DIM,)).astype("float32")
    )
    t5 = mods.relative_position_score_mod(NUM_BUCKETS, MAX_DISTANCE, False)

    def dense_bias(table):
        buckets = relative_position_buckets(
            length, length, NUM_BUCKETS, MAX_DISTANCE, False
        )
        return ops.transpose(ops.take(table, buckets, axis=0), (2, 0, 1))[None]

    def attend(q, k, v, table):
        if kind == "causal":
            option = (
                {"is_causal": True}
                if impl == "is_causal"
                else {"mask_mod": mods.causal_mask_mod}
            )
            return dot_product_attention(q, k, v, chunk_size=CHUNK, **option)
        if kind == "soft_cap":
            option = (
                {"attn_logits_soft_cap": CAP}
                if impl == "attn_logits_soft_cap"
                else {"score_mod": mods.soft_cap_score_mod(CAP)}
            )
            return dot_product_attention(
                q, k, v, is_causal=True, chunk_size=CHUNK, **option
            )
        if kind == "documents" and impl == "segment_ids":
            return dot_product_attention(
                q, k, v, is_causal=True, chunk_size=CHUNK, segment_ids=segments
            )
        if kind == "documents":
            same = segments[0][:, None] == segments[0][None, :]
            mask = np.tril(same)[None, None]
            if impl == "keras_dense_mask":
                return ops.dot_product_attention(q, k, v, mask=mask)
            return dot_product_attention(q, k, v, mask=mask)
        if impl == "score_mod":
            return dot_product_attention(
                q,
                k,
                v,
                is_causal=True,
                chunk_size=CHUNK,
                score_mod=t5,
                score_mod_inputs=(table,),
                segment_ids=segments if packed else None,
            )
        if impl == "keras_dense_bias":
            return ops.dot_product_attention(
                q, k, v, bias=dense_bias(table), is_causal=True
            )
        return dot_product_attention(q, k, v, bias=dense_bias(table), is_causal=True)

    def loss(q, k, v, table):
        return ops.sum(attend(q, k, v, table) * weights)

    return loss


def _case_compare(case):
    from keras_attention.bench.common import jit, time_alternating, value_and_grad

    length = case["length"]
    q, k, v, table, segments = _inputs(length, length // 8)
    calls = {
        f"{kind}/{impl}": (
            jit(value_and_grad(_loss(kind, impl, segments, length))),
            (q, k, v, table),
        )
        for kind, impls in IMPLS.items()
        for impl in impls
    }
    timings = time_alternating(calls, repeats=case["repeats"])
    result = {"timings": timings, "ratios": {}}
    for kind, impls in IMPLS.items():
        first = timings[f"{kind}/{impls[0]}"]["median_s"]
        for impl in impls[1:]:
            ratio = timings[f"{kind}/{impl}"]["median_s"] / first
            result["ratios"][f"{kind}/{impl}_vs_{impls[0]}"] = ratio
    return result


def _case_memory(case):
    from keras_attention.bench.common import (
        jit,
        peak_memory_bytes,
        peak_memory_growth,
        time_call,
        value_and_grad,
    )

    length, kind = case["length"], case["mod"]
    q, k, v, table, segments = _inputs(length, MEMORY_DOCUMENT)
    impl = "segment_ids" if kind == "documents" else "score_mod"
    # The t5 row is the table's bias within the documents: both at once.
    loss = _loss(kind, impl, segments, length, packed=True)
    baseline = peak_memory_bytes()
    timing = time_call(jit(value_and_grad(loss)), q, k, v, table, repeats=1)
    return {**timing, "peak_memory_bytes": peak_memory_growth(baseline)}


CASES = {"compare": _case_compare, "memory": _case_memory}


def run(quick=False, out="runs/bench", timeout=3600):
    """Runs the suite, prints the ratios, writes `mods.json`, `mods.md` and
    `mods.png` under `out`; returns the results."""
    from keras_attention.bench.common import case_runner, new_results, write_report
    from keras_attention.utils.progress import phase

    config = QUICK if quick else FULL
    results = new_results("mods", quick, config)
    # Full runs measure each case in a process of its own (its own peak
    # memory); quick ones in this process, where start-ups would dominate.
    measure = case_runner("mods", CASES, results, out, timeout, isolated=not quick)
    for length in config["lengths"]:
        phase(f"mods against the hand-written paths and keras, T={length}")
        measure(
            f"compare/T{length}",
            {"kind": "compare", "length": length, "repeats": config["repeats"]},
        )
    for length in config["memory_lengths"]:
        for kind in ("documents", "t5"):
            phase(f"memory of the {kind} mod on the chunked path, T={length}")
            measure(
                f"memory/{kind}/T{length}",
                {"kind": "memory", "mod": kind, "length": length},
            )
    write_report(results, out, "mods", _markdown(results, config), _plot)
    return results


def dense_scores_bytes(length):
    """The float32 `(N, T, T)` scores a dense path keeps (one of them)."""
    return HEADS * length * length * 4


def _markdown(results, config):
    lines = [
        f"Machine: {describe(results['machine'])}; forward + backward, XLA, "
        f"B=1, {HEADS} heads of {HEAD_DIM}, causal, chunks of {CHUNK}.",
        "",
        "| T | case | implementation | median ms | / first |",
        "| ---: | --- | --- | ---: | ---: |",
    ]
    for length in config["lengths"]:
        case = results["cases"].get(f"compare/T{length}", {})
        if "timings" not in case:
            lines.append(f"| {length} | all | {case.get('skipped', 'not run')} | | |")
            continue
        for kind, impls in IMPLS.items():
            first = case["timings"][f"{kind}/{impls[0]}"]["median_s"]
            for impl in impls:
                t = case["timings"][f"{kind}/{impl}"]["median_s"]
                lines.append(
                    f"| {length} | {kind} | {impl} | {1e3 * t:.1f} | {t / first:.2f} |"
                )
    lines += [
        "",
        "| T | mod (chunked) | median s | peak memory MiB | dense (N, T, T) "
        "float32 scores MiB |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for length in config["memory_lengths"]:
        for kind in ("documents", "t5"):
            r = results["cases"].get(f"memory/{kind}/T{length}", {})
            dense = dense_scores_bytes(length) / 2**20
            if "median_s" not in r:
                lines.append(
                    f"| {length} | {kind} | {r.get('skipped', 'not run')} | | "
                    f"{dense:.0f} |"
                )
                continue
            peak = r["peak_memory_bytes"]
            lines.append(
                f"| {length} | {kind} | {r['median_s']:.2f} | "
                f"{'n/a' if peak is None else f'{peak / 2**20:.0f}'} | {dense:.0f} |"
            )
    return "\n".join(lines) + "\n"


def _plot(results, path):
    from keras_attention.viz import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    labels, values = [], []
    for key, case in sorted(results["cases"].items()):
        for name, ratio in case.get("ratios", {}).items():
            labels.append(f"{key.split('/')[1]} {name}")
            values.append(ratio)
    if values:
        ax.barh(range(len(values)), values)
        ax.set_yticks(range(len(values)), labels, fontsize=7)
        ax.axvline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("time / the first implementation of the case")
    else:
        ax.text(0.5, 0.5, "not measured in this run", ha="center")
        ax.set_axis_off()
    fig.suptitle(f"mods: {describe(results['machine'])}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
