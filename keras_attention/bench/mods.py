"""The `mods` suite: flexible attention, the built-in arguments against the
same rules written as mods, and against Keras with the equivalent dense mask
or bias.

Forward + backward, XLA on, B=1, 8 heads of 64, causal, float32. At each
length T one process times every implementation in turn
(`time_alternating`), so that each ratio comes from the same minutes:

- `causal`: the chunked path with `is_causal=True` (the causal part, its
  block map by interval arithmetic) against `mask_mod=mods.causal_mask_mod`
  (a custom part, its block map evaluated tile by tile).
- `soft_cap`: `attn_logits_soft_cap=30` against
  `score_mod=mods.soft_cap_score_mod(30)`, both chunked, both the same score
  part differentiated per tile (before 29 November 2026 the built-in had a
  derivative of its own; the figures in docs/benchmarks.md, equal within
  1%, are why it went). Keras' `attn_logits_soft_cap` raises off a TPU: no peer here.
- `documents`: 8 packed documents of T/8 tokens: `segment_ids` on the chunked
  path (tiles between documents skipped) against our standard path with the
  dense `(T, T)` mask and `keras.ops.dot_product_attention` (what Keras'
  `MultiHeadAttention` calls) with that mask.
- `t5`: T5's relative position bias from a trainable table: the chunked path
  with `mods.relative_position_score_mod` (the table's gradient included)
  against our standard path and `keras.ops.dot_product_attention`, each with
  the dense `(N, T, T)` bias gathered from the table.

The packing curve: one row of T = 4,096 tokens (quick: 512) packed with
documents of L tokens, L from 256 to T, `segment_ids` on the chunked path,
timed in turn: the attention work of a packed row is the sum of its
documents' squared lengths, T * L here, so the time should grow as L (the
fitted exponent near 1) while a padded or dense path costs T^2 whatever L.

Memory rows, each its own process (one timed call): the `documents` and `t5`
score mods on the chunked path at T = 16,384 and 65,536 (documents of 2,048
tokens, so that the work stays that of T * 2,048), against the float32
`(N, T, T)` scores alone that a dense path would keep.

Usage: `python -m keras_attention.bench --suite mods [--quick] [--out DIR]`.
"""

import numpy as np

from keras_attention.bench.common import (
    describe,
    finish_axes,
    fit_exponent,
    leave_empty,
)

HEADS, HEAD_DIM, CHUNK, CAP = 8, 64, 256, 30.0
NUM_BUCKETS, MAX_DISTANCE = 32, 128
FULL = {
    "lengths": (1024, 4096),
    "memory_lengths": (16384, 65536),
    "packing_length": 4096,
    "document_lengths": (256, 512, 1024, 2048, 4096),
    "repeats": 5,
}
QUICK = {
    "lengths": (256,),
    "memory_lengths": (1024,),
    "packing_length": 512,
    "document_lengths": (256, 512),
    "repeats": 2,
}
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


def _case_packing(case):
    from keras_attention.bench.common import jit, time_alternating, value_and_grad

    length = case["length"]
    calls = {}
    for document in case["document_lengths"]:
        q, k, v, table, segments = _inputs(length, document)
        loss = _loss("documents", "segment_ids", segments, length)
        calls[f"L{document}"] = (jit(value_and_grad(loss)), (q, k, v, table))
    timings = time_alternating(calls, repeats=case["repeats"])
    documents = list(case["document_lengths"])
    seconds = [timings[f"L{d}"]["median_s"] for d in documents]
    return {
        "timings": timings,
        "time_exponent_in_document_length": fit_exponent(documents, seconds),
    }


CASES = {"compare": _case_compare, "memory": _case_memory, "packing": _case_packing}


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
        phase(f"mods against the built-in arguments and keras, T={length}")
        measure(
            f"compare/T{length}",
            {"kind": "compare", "length": length, "repeats": config["repeats"]},
        )
    length = config["packing_length"]
    phase(f"one packed row of T={length}, documents of {config['document_lengths']}")
    measure(
        f"packing/T{length}",
        {
            "kind": "packing",
            "length": length,
            "document_lengths": list(config["document_lengths"]),
            "repeats": config["repeats"],
        },
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
    packing_length = config["packing_length"]
    packing = results["cases"].get(f"packing/T{packing_length}", {})
    lines += [
        "",
        f"One packed row of T = {packing_length}, documents of L tokens "
        "(`segment_ids`, chunked):",
        "",
        "| L | documents | median ms | / L = T |",
        "| ---: | ---: | ---: | ---: |",
    ]
    if "timings" in packing:
        whole = packing["timings"][f"L{packing_length}"]["median_s"]
        for document in config["document_lengths"]:
            t = packing["timings"][f"L{document}"]["median_s"]
            lines.append(
                f"| {document} | {packing_length // document} | {1e3 * t:.1f} | "
                f"{t / whole:.2f} |"
            )
        exponent = packing["time_exponent_in_document_length"]
        lines += ["", f"Fitted exponent of time in L: {exponent:.2f} (1: work T * L)."]
    else:
        lines.append(f"| all | | {packing.get('skipped', 'not run')} | |")
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
    fig, (ratio_ax, packing_ax) = plt.subplots(1, 2, figsize=(13, 4))
    labels, values = [], []
    for key, case in sorted(results["cases"].items()):
        for name, ratio in case.get("ratios", {}).items():
            labels.append(f"{key.split('/')[1]} {name}")
            values.append(ratio)
    if values:
        ratio_ax.barh(range(len(values)), values)
        ratio_ax.set_yticks(range(len(values)), labels, fontsize=7)
        ratio_ax.axvline(1.0, color="gray", lw=0.8)
        ratio_ax.set_xscale("log")
        ratio_ax.set_xlabel("time / the first implementation of the case")
    else:
        leave_empty(ratio_ax)
    curves = [
        (key, case)
        for key, case in results["cases"].items()
        if key.startswith("packing")
    ]
    for key, case in curves:
        if "timings" not in case:
            continue
        documents = case["case"]["document_lengths"]
        seconds = [case["timings"][f"L{d}"]["median_s"] for d in documents]
        packing_ax.plot(
            documents, seconds, "o-", label=f"{key.split('/')[1]}, measured"
        )
        packing_ax.plot(
            documents,
            [seconds[-1] * d / documents[-1] for d in documents],
            "--",
            color="gray",
            label="proportional to L (work T * L)",
        )
    finish_axes(
        packing_ax,
        "document length L in one packed row",
        "forward + backward time (s)",
        log_y=True,
    )
    fig.suptitle(f"mods: {describe(results['machine'])}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
