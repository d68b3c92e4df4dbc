"""Smoke tests: every benchmark suite runs end to end in quick mode and writes
its outputs with the expected schema (no timing is asserted), plus the
arithmetic the suites report (exponent fits, crossover)."""

import json
import pathlib

import numpy as np
import pytest

from keras_attention import cli
from keras_attention.bench import SUITES
from keras_attention.bench.common import fit_exponent, time_alternating
from keras_attention.bench.seq2seq import MODELS, crossover_length

TIMING_FIELDS = {"median_s", "min_s", "max_s", "repeats"}


def run_suite(suite, tmp_path):
    cli.main(["bench", "--suite", suite, "--quick", "--out", str(tmp_path)])
    results = json.loads((tmp_path / f"{suite}.json").read_text())
    assert results["suite"] == suite and results["quick"] is True
    assert {"cpu", "cores", "backend", "keras", "python"} <= set(results["machine"])
    assert (tmp_path / f"{suite}.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / f"{suite}.md").read_text().startswith("Machine: ")
    return results


def check_timing(timing):
    assert TIMING_FIELDS <= set(timing), timing
    assert 0 < timing["min_s"] <= timing["median_s"] <= timing["max_s"]


def test_time_alternating_times_each_function_in_turn():
    order = []
    calls = {name: (order.append, (name,)) for name in ("ours", "peer")}
    timings = time_alternating(calls, repeats=3, warmup=1)
    assert order == ["ours", "peer"] * 4  # one warm-up, then three turns
    for name in calls:
        check_timing(timings[name])
        assert timings[name]["repeats"] == 3


def test_suites_are_all_on_the_command_line():
    parser = cli.build_parser()
    for suite in (*SUITES, "all"):
        assert parser.parse_args(["bench", "--suite", suite]).suite == suite
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--suite", "nope"])


def test_run_suites_refuses_unknown_names():
    from keras_attention.bench import run_suites
    from keras_attention.bench.__main__ import main

    with pytest.raises(ValueError, match="Unknown suite 'nope'"):
        run_suites(["layers", "nope"])
    with pytest.raises(SystemExit):
        main(["--suite", "nope"])


@pytest.mark.slow
def test_attention_suite_quick(tmp_path):
    results = run_suite("attention", tmp_path)
    assert results["matmul_gflops"] > 0
    for impl in ("keras", "ours", "ours_chunked"):
        case = results["cases"][f"ops/{impl}/128"]
        check_timing(case)
        assert {"gflops", "peak_memory_bytes"} <= set(case)
    for impl in ("keras", "ours", "ours_chunked"):
        case = results["cases"][f"ops_causal/{impl}/128"]
        check_timing(case)
        assert case["case"]["causal"] is True
    assert "chunked_causal_time_ratio_vs_standard_T128" in results["ratios"]
    for length in (128, 256):
        case = results["cases"][f"ops_window/ours_chunked/{length}"]
        check_timing(case)
        assert case["case"]["window"] == results["window"] and case["case"]["causal"]
    # At the quick tier's lengths the fit is noise; its arithmetic is tested below.
    assert np.isfinite(results["ratios"]["chunked_window_time_exponent"])
    assert "chunked_window_time_ratio_vs_causal_T128" in results["ratios"]
    assert "mha_time_ratio_T128" in results["ratios"]
    for mask in ("full", "causal"):
        case = results["cases"][f"grid/{mask}/w256/float32/T128"]
        check_timing(case["ours"])
        check_timing(case["keras"])
        assert case["time_ratio"] == pytest.approx(
            case["ours"]["median_s"] / case["keras"]["median_s"]
        )
        assert 0 < case["ours"]["matmul_fraction"] and case["matmul_gflops"] > 0
        assert f"mha_grid_time_ratio_{mask}_w256_float32_T128" in results["ratios"]
    assert "| causal | 256 | float32 | 128 |" in (tmp_path / "attention.md").read_text()
    for key, heads in {"decode": 4, "decode_heads8": 8}.items():
        decode = results["cases"][key]
        assert decode["heads"] == heads
        for name in ("ours", "keras_hub", "ours_no_cache", "dense_floor"):
            check_timing(decode["timings"][name])
        per_token = decode["per_token_s"]
        assert decode["time_ratio_vs_keras_hub"] == pytest.approx(
            per_token["ours"] / per_token["keras_hub"]
        )
        assert decode["times_dense_floor"] == pytest.approx(
            per_token["ours"] / per_token["dense_floor"]
        )
        assert decode["matmul_bound_per_token_s"] > 0
        assert {
            f"{key}_cache_speedup",
            f"{key}_time_ratio_vs_keras_hub",
            f"{key}_times_dense_floor",
        } <= set(results["ratios"])
    assert "| ratio | value |" in (tmp_path / "attention.md").read_text()


@pytest.mark.slow
def test_mods_suite_quick(tmp_path):
    from keras_attention.bench.mods import IMPLS, QUICK

    results = run_suite("mods", tmp_path)
    (length,) = QUICK["lengths"]
    compare = results["cases"][f"compare/T{length}"]
    for kind, impls in IMPLS.items():
        for impl in impls:
            check_timing(compare["timings"][f"{kind}/{impl}"])
        for impl in impls[1:]:
            assert compare["ratios"][f"{kind}/{impl}_vs_{impls[0]}"] > 0
    for kind in ("documents", "t5"):
        memory = results["cases"][f"memory/{kind}/T{QUICK['memory_lengths'][0]}"]
        assert memory["median_s"] > 0 and "peak_memory_bytes" in memory
    packing = results["cases"][f"packing/T{QUICK['packing_length']}"]
    for document in QUICK["document_lengths"]:
        check_timing(packing["timings"][f"L{document}"])
    assert isinstance(packing["time_exponent_in_document_length"], float)


@pytest.mark.slow
def test_seq2seq_suite_quick(tmp_path):
    results = run_suite("seq2seq", tmp_path)
    config = results["config"]
    for width in config["widths"]:
        transformer = results["parameters"][f"transformer/{width}"]["parameters"]
        for name in MODELS:
            entry = results["parameters"][f"{name}/{width}"]
            assert abs(entry["parameters"] - transformer) < 0.25 * transformer
            for length in config["lengths"]:
                case = results["cases"][f"train/{name}/{width}/{length}"]
                check_timing(case)
                assert case["batch_size"] * length >= config["tokens_per_batch"] // 2
                assert case["tokens_per_s"] > 0
        for layer in ("self_attention", "recurrent"):
            for length in config["layer_lengths"]:
                check_timing(results["cases"][f"layer/{layer}/{width}/{length}"])
    for prefix in ("train/transformer", "train/rnn", "layer/recurrent"):
        assert isinstance(results["exponents"][f"{prefix}/n/d{width}"], float)
    first = config["lengths"][0]
    assert f"transformer_vs_rnn_bahdanau/d{width}/n{first}" in results["ratios"]
    assert set(results["crossover"]) == {f"d{w}" for w in config["widths"]}
    assert "Fitted exponents" in (tmp_path / "seq2seq.md").read_text()


@pytest.mark.slow
def test_decode_suite_quick(tmp_path):
    results = run_suite("decode", tmp_path)
    assert len(results["cases"]) == 6
    for case in results["cases"].values():
        check_timing(case)
        assert case["tokens_per_s"] > 0
    assert {
        "cache_speedup/transformer/greedy",
        "cache_speedup/rnn-bahdanau/greedy",
        "transformer_vs_rnn/beam/cache",
        "greedy_vs_beam/transformer",
    } <= set(results["ratios"])


@pytest.mark.slow
def test_xla_suite_quick(tmp_path):
    results = run_suite("xla", tmp_path)
    for key, case in results["cases"].items():
        assert key.endswith(("/xla", "/no_xla"))
        check_timing(case)
    assert set(results["speedups"]) == {
        key.removesuffix("/xla") for key in results["cases"] if key.endswith("/xla")
    }
    assert "train/translate/transformer/default" in results["speedups"]
    assert "generate/translate/transformer" in results["speedups"]
    assert "layer/multi_head" in results["speedups"]


@pytest.mark.slow
def test_layers_suite_quick(tmp_path):
    from keras_attention.bench.layers import PAIRS

    results = run_suite("layers", tmp_path)
    assert list(results["cases"]) == list(PAIRS)
    for case in results["cases"].values():
        check_timing(case["ours"])
        check_timing(case["keras"])
        assert case["time_ratio"] > 0


@pytest.mark.slow
def test_scaling_suite_quick(tmp_path):
    """On the JAX backend in a process of its own, with two virtual CPU
    devices: one device, data- and model-parallel train the same first step;
    model parallelism holds less state per device, data parallelism the
    same."""
    results = run_suite("scaling", tmp_path)
    measured = results["cases"]["steps"]
    assert measured["num_devices"] == 2
    names = ["1 device", "data-parallel 2", "model-parallel 2"]
    for name in names:
        check_timing(measured[name])
    losses = [measured[name]["first_loss"] for name in names]
    np.testing.assert_allclose(losses, losses[0], rtol=1e-5)
    ratios = results["ratios"]
    assert ratios["data-parallel 2/state_per_device_vs_one_device"] == 1.0
    assert ratios["model-parallel 2/state_per_device_vs_one_device"] < 0.9


@pytest.mark.slow
def test_gpu_suite_quick(tmp_path):
    """The gpu suite's dry run on a CPU (one process per case, on JAX): every
    row of every part is there, measured or skipped with its reason (a CPU
    has no cuDNN), and every fraction of the peak is a number."""
    from keras_attention.bench.gpu import PEAK_FLOPS, QUICK
    from keras_attention.bench.gpu_attention import IMPLS, MASKS
    from keras_attention.bench.gpu_common import attention_flops
    from keras_attention.bench.gpu_decode import DECODE_RUNS, decode_label

    results = run_suite("gpu", tmp_path)
    config = QUICK["attention"]
    assert results["peak_flops"] == PEAK_FLOPS
    assert "4·B·H·T·S·D" in results["flops_formula"]
    assert results["device"]["platform"] == "cpu" and results["device"]["jax"]
    for length in config["lengths"]:
        case = results["cases"][f"attention/T{length}"]
        assert case["batch"] * length == config["tokens"]
        assert case["dtype"] == "float32"  # bfloat16 on an accelerator
        for mask in MASKS:
            rows = case[mask]
            assert list(rows) == list(IMPLS)
            for impl in ("ours", "ours_chunked", "jax_xla"):
                check_timing(rows[impl])
                fraction = results["fractions"][f"{mask}/{impl}/T{length}"]
                assert isinstance(fraction, float) and 0 < fraction < 1
                assert rows[impl]["flops"] == attention_flops(
                    case["batch"],
                    config["heads"],
                    length,
                    config["head_dim"],
                    causal=mask == "causal",
                )
                assert rows[impl]["peak_fraction"] == pytest.approx(
                    rows[impl]["flops"] / rows[impl]["median_s"] / PEAK_FLOPS
                )
            for impl in ("keras_flash", "jax_cudnn"):
                assert rows[impl]["skipped"]
            assert "median_s" in rows["torch_sdpa"] or rows["torch_sdpa"]["skipped"]
            ratio = results["ratios"][f"{mask}/ours_chunked_vs_jax_xla/T{length}"]
            assert ratio == pytest.approx(
                rows["ours_chunked"]["median_s"] / rows["jax_xla"]["median_s"]
            )
    seq2seq = results["cases"]["seq2seq"]
    for length in QUICK["seq2seq"]["lengths"]:
        rows = seq2seq["lengths"][str(length)]
        for name in ("transformer", "rnn-bahdanau"):
            check_timing(rows[name])
            assert rows[name]["tokens_per_s"] > 0
        key = f"seq2seq/transformer_vs_rnn_bahdanau_tokens_per_s/n{length}"
        assert results["ratios"][key] > 0
    transformer, rnn = (
        seq2seq["parameters"][n] for n in ("transformer", "rnn-bahdanau")
    )
    assert abs(rnn - transformer) < 0.1 * transformer  # QUICK's rnn_units match
    runs = results["cases"]["decode"]["runs"]
    assert list(runs) == [decode_label(*run) for run in DECODE_RUNS]
    for row in runs.values():
        check_timing(row)
        assert row["ms_per_step"] > 0
    assert "decode/transformer_cache_speedup" in results["ratios"]
    for name in ("transformer", "rnn-bahdanau"):
        assert results["ratios"][f"decode/{name}_beam4_vs_greedy"] > 0
    text = (tmp_path / "gpu.md").read_text()
    assert "| full | 64 | 4 | float32 |" in text and "cuDNN" in text
    check_flex_quick(results, text)
    check_paths_quick(results, text)


def check_paths_quick(results, text):
    """The paths part's rows on a CPU: every workload in float32, ours on
    the chunked or standard path, its output and input gradient within the
    tolerance of the standard path's (two paths apart where causal), cuDNN
    skipped with its reason, the speeds numbers."""
    from keras_attention.bench.gpu_paths import QUICK, SIDES, TOLERANCES, WORKLOADS

    case = results["cases"]["paths"]
    assert list(case["workloads"]) == list(QUICK["workloads"]) == list(WORKLOADS)
    for workload, dtypes in case["workloads"].items():
        spec = WORKLOADS[workload][1].split()
        record = dtypes["float32"]
        assert list(record["rows"]) == list(SIDES)
        rows = record["rows"]
        for side in ("ours", "standard"):
            check_timing(rows[side])
        path = rows["ours"]["path"]
        assert path == ("chunked" if "causal" in spec else "standard")
        check = record["check"]
        assert check["passed"] and check["same_path"] == (path == "standard")
        for part in ("output", "input_gradient"):
            assert check[part]["relative"] <= TOLERANCES["float32"]
            assert check[part]["max_abs"] > 0
        refused = {"dropout": "no attention dropout", "soft_cap": "no soft cap"}
        reasons = [refused[word] for word in spec if word in refused]
        assert (reasons or ["cuDNN"])[0] in rows["jax_cudnn"]["skipped"]
        if "soft_cap" in spec:
            assert "soft cap" in rows["keras"]["skipped"]
        else:
            check_timing(rows["keras"])
            key = f"paths/{workload}/float32/ours_vs_keras_speed"
            assert results["ratios"][key] > 0
        if case["tokamax"] and "dropout" not in spec:
            check_timing(rows["tokamax"])
    assert results["paths_failed_checks"] == []
    assert "### The path table's training workloads" in text
    assert "| gqa | float32 | 1 x 512, 2 x 16 | chunked (xla) |" in text


def check_flex_quick(results, text):
    """The flex part's rows on a CPU: every path chunked or standard, every
    Keras row on XLA, every ratio a number; the long case (T = 128) runs
    its causal rows only."""
    from keras_attention.bench.gpu_flex import LAYER_MASKS, QUICK, VARIANTS, row_names

    (short,) = QUICK["lengths"]
    for length, long in ((short, False), (QUICK["long"]["length"], True)):
        case = results["cases"][f"flex/T{length}"]
        assert case["batch"] == max(1, QUICK["tokens"] // length)
        names, run = row_names(causal_only=long)
        assert list(case["rows"]) == names
        for name, row in case["rows"].items():
            if name not in run:
                assert "causal rows only" in row["skipped"]
                continue
            check_timing(row)
            assert row["flops"] > 0 and 0 < row["peak_fraction"] < 1
            if name.endswith("/ours") or name.startswith("plain/"):
                assert row["path"] in ("chunked", "standard")
            if name.endswith("/keras"):
                assert row["kernel"] == "xla"
        ratios = results["ratios"]
        for mask in ("causal",) if long else LAYER_MASKS:
            key = f"flex/layer_{mask}/ours_vs_keras_speed/T{length}"
            assert np.isfinite(ratios[key]) and ratios[key] > 0
        for variant in VARIANTS:
            for ratio in ("throughput_vs_plain", "speedup_vs_keras"):
                key = f"flex/{variant}/{ratio}/T{length}"
                if long and variant == "t5":
                    assert key not in ratios
                else:
                    assert np.isfinite(ratios[key]) and ratios[key] > 0
    assert "### Flexible attention" in text and "| t5 | 64 |" in text


def gpu_results():
    """What the gpu suite records on a GPU, for the report's code: a T where
    everything ran, one where the standard paths did not fit and Keras fell
    back, a T whose process died, a failed part."""
    from keras_attention.bench.gpu import FULL
    from keras_attention.bench.gpu_attention import IMPLS
    from keras_attention.bench.gpu_common import attention_flops

    def timed(ms, batch, length, causal):
        flops = attention_flops(batch, 16, length, 128, causal)
        return {
            "median_s": ms / 1e3,
            "min_s": ms / 1e3,
            "max_s": ms / 1e3,
            "repeats": 5,
            "ms": ms,
            "flops": flops,
            "tflops": flops / (ms / 1e3) / 1e12,
        }

    device = {"platform": "gpu", "device_kind": "NVIDIA H200", "jax": "0.11.2"}
    everything = {
        mask: {
            impl: timed(2.0 + i, 32, 1024, mask == "causal")
            for i, impl in enumerate(IMPLS)
        }
        for mask in ("full", "causal")
    }
    long = {
        mask: {
            **{
                impl: timed(80.0 + i, 1, 32768, mask == "causal")
                for i, impl in enumerate(IMPLS)
            },
            "ours": {"skipped": "the (T, S) scores would need about 256 GiB"},
            "jax_xla": {"skipped": "the (T, S) scores would need about 256 GiB"},
            "jax_cudnn": {"skipped": "RuntimeError: cuDNN is not detected."},
        }
        for mask in ("full", "causal")
    }
    for mask in long:
        long[mask]["keras_flash"]["note"] = "Keras fell back to xla"
    return {
        "suite": "gpu",
        "quick": False,
        "machine": {
            "cpu": "Intel Xeon",
            "cores": 16,
            "backend": "jax",
            "keras": "3.15.1",
            "accelerator": "gpu",
            "devices": ["cuda:0 (NVIDIA H200)"],
        },
        "config": FULL,
        "peak_flops": 989e12,
        "peak_given": False,
        "flops_formula": "fwd 4·B·H·T·S·D",
        "cases": {
            "attention/T1024": {
                "batch": 32,
                "length": 1024,
                "dtype": "bfloat16",
                "device": device,
                "torch": "2.11.0",
                "torch_cuda": "12.8",
                **everything,
            },
            "attention/T2048": {"skipped": "exit 1: RuntimeError: boom"},
            "attention/T32768": {
                "batch": 1,
                "length": 32768,
                "dtype": "bfloat16",
                "device": device,
                **long,
            },
            "seq2seq": {"skipped": "error: ValueError: bad"},
            **flex_gpu_cases(timed, device),
            "decode": {
                "device": device,
                "policy": "mixed_bfloat16",
                "rnn_units": 736,
                "runs": {
                    "transformer/greedy/cache": {
                        "median_s": 0.5,
                        "ms_per_step": 2.0,
                        "tokens_per_s": 16000.0,
                    },
                    "transformer/greedy/no_cache": {"skipped": "exceeded 120 s"},
                    "rnn-bahdanau/greedy/cache": {
                        "median_s": 0.25,
                        "ms_per_step": 1.0,
                        "tokens_per_s": 32000.0,
                    },
                    "transformer/beam/cache": {
                        "median_s": 0.75,
                        "ms_per_step": 3.0,
                        "tokens_per_s": 10667.0,
                    },
                    "rnn-bahdanau/beam/cache": {"skipped": "exceeded 120 s"},
                },
            },
        },
    }


def flex_gpu_cases(timed, device):
    """The flex part's cases on a GPU: T = 1024 with every row (ours on
    cuDNN and Pallas, a Keras row that fell back to XLA, one whose dense
    bias did not fit), the long case with its causal rows only."""
    from keras_attention.bench.gpu_flex import VARIANTS, row_names

    def case(length, long):
        batch = max(1, 32768 // length)
        names, run = row_names(causal_only=long)
        rows = {}
        for i, name in enumerate(names):
            if name not in run:
                rows[name] = {"skipped": "the long case runs the causal rows only"}
                continue
            row = timed(1.0 + i, batch, length, "causal" in name)
            if name.endswith("/ours") or name.startswith("plain/"):
                pallas = name.split("/")[0] in VARIANTS
                row["path"] = "jax_pallas" if pallas else "jax_cudnn"
            if name.endswith("/keras"):
                row["kernel"] = "cudnn"
            rows[name] = row
        if long:
            for variant in ("soft_cap", "alibi"):
                rows[f"{variant}/keras"] = {"skipped": "dense: about 2048 GiB"}
        else:
            rows["t5/keras"]["kernel"] = "xla"
            rows["t5/keras"]["note"] = "keras.ops' own choice (cudnn) failed"
            rows["alibi/ours"] = {"skipped": "JaxRuntimeError: Pallas boom"}
        return {
            "batch": batch,
            "length": length,
            "dtype": "bfloat16",
            "device": device,
            "causal_only": long,
            "rows": rows,
        }

    return {"flex/T1024": case(1024, False), "flex/T131072": case(131072, True)}


def test_gpu_report_takes_every_outcome_of_a_gpu_run(tmp_path):
    from keras_attention.bench.gpu import markdown, plot, summarize

    results = gpu_results()
    summarize(results)
    assert results["device"]["device_kind"] == "NVIDIA H200"
    row = results["cases"]["attention/T1024"]["causal"]["ours"]
    assert row["peak_fraction"] == pytest.approx(row["tflops"] * 1e12 / 989e12)
    assert results["fractions"]["causal/ours/T1024"] == row["peak_fraction"]
    assert results["ratios"]["full/ours_vs_jax_cudnn/T1024"] == pytest.approx(2 / 5)
    assert "full/ours_vs_jax_cudnn/T32768" not in results["ratios"]
    assert "full/ours_chunked_vs_torch_sdpa/T32768" in results["ratios"]
    assert "decode/transformer_cache_speedup" not in results["ratios"]
    assert results["ratios"]["decode/transformer_vs_rnn_bahdanau_ms_per_step"] == 2.0
    assert results["ratios"]["decode/transformer_beam4_vs_greedy"] == 1.5
    assert "decode/rnn-bahdanau_beam4_vs_greedy" not in results["ratios"]
    text = markdown(results)
    assert text.startswith("Machine: ") and "NVIDIA H200" in text
    assert "| full | 1024 | 32 | bfloat16 | 2 (" in text
    for reason in ("exit 1: RuntimeError: boom", "error: ValueError: bad", "256 GiB"):
        assert reason in text
    assert "PyTorch 2.11.0 (CUDA 12.8)" in text
    # The flex part: row i takes 1 + i ms (plain/causal 6, soft_cap/ours 7,
    # soft_cap/keras 8).
    rows = results["cases"]["flex/T1024"]["rows"]
    ratios = results["ratios"]
    assert ratios["flex/layer_full/ours_vs_keras_speed/T1024"] == 2 / 1
    assert ratios["flex/soft_cap/throughput_vs_plain/T1024"] == pytest.approx(
        rows["soft_cap/ours"]["tflops"] / rows["plain/causal"]["tflops"]
    )
    assert ratios["flex/soft_cap/speedup_vs_keras/T1024"] == pytest.approx(8 / 7)
    assert "flex/alibi/throughput_vs_plain/T1024" not in ratios
    assert "flex/t5/speedup_vs_keras/T131072" not in ratios
    assert "flex/window/throughput_vs_plain/T131072" in ratios
    assert results["fractions"]["flex/plain/causal/T1024"] > 0
    assert (
        "### Flexible attention" in text and "| t5 | 1024 | 32 | jax_pallas |" in text
    )
    for reason in ("Pallas boom", "dense: about 2048 GiB", "causal rows only"):
        assert reason in text
    assert "xla (fallback)" in text and "keras.ops' own choice (cudnn) failed" in text
    plot(results, tmp_path / "gpu.png")
    assert (tmp_path / "gpu.png").read_bytes().startswith(b"\x89PNG")


def paths_gpu_results():
    """The paths part as a GPU run may leave it: the process of every
    workload died; run again, one workload passed its checks in bfloat16 and
    failed them in float32, one found the budget spent."""
    from keras_attention.bench.gpu import FULL
    from keras_attention.bench.gpu_paths import SIDES

    def record(ms, passed):
        rows = {}
        for i, side in enumerate(SIDES):
            timing = {"median_s": (ms + i) / 1e3, "min_s": 0.001, "max_s": 1.0}
            rows[side] = {**timing, "repeats": 5, "ms": ms + i, "kernel": "cudnn"}
        rows["ours"]["path"] = "jax_cudnn"
        rows["tokamax"] = {"skipped": "tokamax is not installed"}
        relative = 1e-3 if passed else 0.5
        part = {"relative": relative, "max_abs_diff": relative, "max_abs": 1.0}
        check = {"output": part, "input_gradient": part, "same_path": False}
        return {
            "batch": 4,
            "length": 4096,
            "heads": 16,
            "head_dim": 128,
            "rows": rows,
            "check": {**check, "passed": passed},
        }

    device = {"platform": "gpu", "device_kind": "NVIDIA H100", "jax": "0.11.2"}
    again = {"bfloat16": record(2.0, True), "float32": record(10.0, False)}
    return {
        "suite": "gpu",
        "quick": False,
        "machine": {"cpu": "Xeon", "cores": 16, "backend": "jax", "keras": "3"},
        "config": FULL,
        "peak_flops": 989e12,
        "peak_given": False,
        "flops_formula": "fwd 4·B·H·T·S·D",
        "cases": {
            "paths": {"skipped": "exit -11: killed by signal 11 (out of memory?)"},
            "paths/causal_padding": {
                "device": device,
                "workloads": {"causal_padding": again},
            },
            "paths/encoder_padding": {"skipped": "the suite's time budget was spent"},
        },
    }


def test_gpu_paths_report_shows_failed_checks_and_dead_processes(tmp_path):
    from keras_attention.bench.gpu import markdown, plot, summarize

    results = paths_gpu_results()
    summarize(results)
    assert results["device"]["device_kind"] == "NVIDIA H100"
    ratios = results["ratios"]
    # Row i takes (ms + i): ours 2, standard 3, keras 4, jax_cudnn 5.
    assert ratios["paths/causal_padding/bfloat16/ours_vs_standard_speed"] == 3 / 2
    assert ratios["paths/causal_padding/bfloat16/ours_vs_jax_cudnn_speed"] == 5 / 2
    assert "paths/causal_padding/bfloat16/ours_vs_tokamax_speed" not in ratios
    assert results["paths_failed_checks"] == ["causal_padding/float32"]
    text = markdown(results)
    assert "| causal_padding | bfloat16 | 4 x 4096, 16 x 128 | jax_cudnn (cudnn) |" in (
        text
    )
    assert "ok 1.0e-03 / 1.0e-03" in text and "**FAILED** 5.0e-01" in text
    assert "Checks FAILED" in text and "causal_padding/float32." in text
    for reason in ("killed by signal 11", "time budget was spent", "not installed"):
        assert reason in text
    assert "| encoder_padding | all | skipped [" in text
    assert "| documents | all | skipped [" in text
    plot(results, tmp_path / "gpu.png")
    assert (tmp_path / "gpu.png").read_bytes().startswith(b"\x89PNG")


def test_gpu_paths_part_runs_each_workload_alone_after_a_dead_process():
    from keras_attention.bench.gpu_paths import QUICK, paths_part

    calls = []

    def measure(key, case):
        calls.append((key, case["workloads"]))
        return {"skipped": "exit -11: killed"} if key == "paths" else {}

    paths_part(measure, QUICK, quick=True)
    assert calls[0] == ("paths", QUICK["workloads"])
    assert calls[1:] == [(f"paths/{w}", [w]) for w in QUICK["workloads"]]
    calls.clear()
    paths_part(
        lambda key, case: calls.append(key) or {"skipped": "exceeded"}, QUICK, True
    )
    assert calls == ["paths"]  # not again for time
    calls.clear()
    # As on a GPU (not the dry run): each alone at once.
    paths_part(lambda key, case: calls.append(key) or {}, QUICK, False)
    assert calls == [f"paths/{w}" for w in QUICK["workloads"]]


def test_all_suites_leave_out_the_gpu_suite(monkeypatch):
    import types

    import keras_attention.bench as bench

    ran = []

    def fake(name):
        suite = name.rsplit(".", 1)[1]
        return types.SimpleNamespace(run=lambda **options: ran.append((suite, options)))

    monkeypatch.setattr(bench.importlib, "import_module", fake)
    bench.run_suites("all", quick=True)
    assert [name for name, _ in ran] == list(bench.ALL_SUITES)
    assert "gpu" in SUITES and "gpu" not in bench.ALL_SUITES
    ran.clear()
    bench.run_suites(["gpu"], peak_flops=312e12)
    assert ran == [("gpu", {"quick": False, "out": "runs/bench", "peak_flops": 312e12})]
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "--suite", "gpu", "--peak-tflops", "312"])
    assert args.peak_tflops == 312.0
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--suite", "gpu", "--peak-tflops", "0"])


def test_gpu_suite_runs_a_failed_attention_process_again_cautiously():
    from keras_attention.bench.gpu_attention import QUICK, attention_part

    calls = []

    def measure(key, case):
        calls.append((key, case["torch"], case["parallel_compile"]))
        if len(calls) == 1:
            return {"skipped": "exit -11: killed by signal 11 (out of memory?)"}
        return {"batch": 1}

    attention_part(measure, QUICK, quick=True, has_torch=True)
    # Once more without torch, compiling in turn, and so on for the next T.
    assert calls == [
        ("attention/T64", True, True),
        ("attention/T64", False, False),
        ("attention/T128", False, False),
    ]


def test_gpu_suite_past_its_time_budget_records_every_case_skipped(
    tmp_path, monkeypatch
):
    from keras_attention.bench import gpu

    monkeypatch.setitem(gpu.QUICK, "budgets_s", dict.fromkeys(gpu.PARTS, 0))
    results = gpu.run(quick=True, out=str(tmp_path))
    assert set(results["cases"]) == {
        "paths",
        "attention/T64",
        "attention/T128",
        "seq2seq",
        "decode",
        "flex/T64",
        "flex/T128",
    }
    for case in results["cases"].values():
        assert case["skipped"] == "the suite's time budget was spent"
    assert "time budget was spent" in (tmp_path / "gpu.md").read_text()
    assert (tmp_path / "gpu.png").read_bytes().startswith(b"\x89PNG")


def test_gpu_suite_rnn_units_are_the_seq2seq_suites_matched_ones():
    from keras_attention.bench.gpu import FULL

    path = (
        pathlib.Path(__file__).parents[1] / "docs" / "data" / "bench-seq2seq-cpu.json"
    )
    measured = json.loads(path.read_text())
    width = FULL["seq2seq"]["width"]
    assert measured["config"]["vocabulary_size"] == FULL["seq2seq"]["vocabulary_size"]
    units = measured["parameters"][f"rnn-bahdanau/{width}"]["units"]
    assert FULL["seq2seq"]["rnn_units"] == FULL["decode"]["rnn_units"] == units


def test_attention_flops_count_fwd_and_bwd_and_halve_causal():
    from keras_attention.bench.gpu_common import attention_flops

    # fwd 4·B·H·T·S·D, bwd 2.5x the forward.
    assert attention_flops(2, 3, 5, 7, causal=False) == 3.5 * 4 * 2 * 3 * 5 * 5 * 7
    assert attention_flops(2, 3, 5, 7, causal=True) == 0.5 * attention_flops(
        2, 3, 5, 7, causal=False
    )


def test_fit_exponent_recovers_power_laws():
    n = np.array([16, 32, 64, 128, 256])
    assert fit_exponent(n, 3e-6 * n**2) == pytest.approx(2.0)
    assert fit_exponent(n, 5e-4 * n) == pytest.approx(1.0)
    assert fit_exponent([16], [1.0]) is None


def test_crossover_length_interpolates_on_log_axes():
    lengths = [64, 128, 256, 512]
    recurrent = [1.0, 1.0, 1.0, 1.0]
    # Per-token attention cost doubles with n: 0.25, 0.5, 1.0 (equal), 2.0.
    attention = [0.25, 0.5, 1.0 + 1e-9, 2.0]
    assert crossover_length(lengths, attention, recurrent) == pytest.approx(
        256, rel=1e-3
    )
    # log(0.5) to log(1.5): zero at the fraction ln 2 / ln 3 of the octave.
    assert crossover_length(lengths, [0.5, 1.5, 3.0, 6.0], recurrent) == (
        pytest.approx(64 * 2 ** (np.log(2) / np.log(3)))
    )
    assert crossover_length(lengths, [0.1] * 4, recurrent) is None
    assert crossover_length(lengths, [2.0] * 4, recurrent) == 64


def test_an_interrupted_suite_resumes_with_the_cases_it_measured(tmp_path):
    from keras_attention.bench.common import case_runner, new_results

    calls = []

    def square(case):
        calls.append(case["x"])
        if case["x"] == 3:
            raise KeyboardInterrupt  # the suite is stopped during this case
        return {"value": case["x"] ** 2}

    def run_suite_of_squares():
        results = new_results("squares", quick=True)
        measure = case_runner(
            "unused", {"square": square}, results, tmp_path, 60, False
        )
        for x in (1, 2, 3):
            measure(f"square/{x}", {"kind": "square", "x": x})
        return results

    with pytest.raises(KeyboardInterrupt):
        run_suite_of_squares()
    saved = json.loads((tmp_path / "squares.json").read_text())
    assert [saved["cases"][f"square/{x}"]["value"] for x in (1, 2)] == [1, 4]
    assert calls == [1, 2, 3]

    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_suite_of_squares()
    assert calls == [3]  # the finished cases were not measured again

    (tmp_path / "squares.json").write_text(
        json.dumps({**saved, "machine": {"cpu": "another"}})
    )
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_suite_of_squares()
    assert calls == [1, 2, 3]  # another machine's figures are not reused


def test_crossover_compares_the_lengths_both_layers_ran():
    import pathlib

    from keras_attention.bench.seq2seq import summarize

    path = (
        pathlib.Path(__file__).parents[1] / "docs" / "data" / "bench-seq2seq-cpu.json"
    )
    results = json.loads(path.read_text())
    # The measured run: the GRU at d=512, n=4096 ran out of memory.
    assert "skipped" in results["cases"]["layer/recurrent/512/4096"]
    summarize(results)
    assert set(results["crossover"]) == {"d128", "d256", "d512"}
    assert results["crossover"]["d512"] is None  # attention cheaper up to n=2048


def test_one_entry_point_runs_a_single_case_of_a_suite(capsys):
    # What `run_isolated` runs in a fresh process for every isolated case.
    from keras_attention.bench.__main__ import main

    case = {"kind": "matmul", "size": 64, "dtype": "float32", "repeats": 1}
    assert main(["--suite", "attention", "--case", json.dumps(case)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["gflops"] > 0
    with pytest.raises(SystemExit):
        main(["--suite", "attention", "layers", "--case", json.dumps(case)])
    assert "--case needs exactly one --suite" in capsys.readouterr().err


def test_benchmark_scripts_run_their_suite_through_the_entry_point(monkeypatch):
    import runpy

    import keras_attention.bench.__main__ as entry

    calls = []
    monkeypatch.setattr(entry, "main", lambda argv: calls.append(argv) or 0)
    scripts = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    for suite in SUITES:
        monkeypatch.setattr("sys.argv", [f"{suite}.py", "--quick", "--out", "x"])
        with pytest.raises(SystemExit) as exited:
            runpy.run_path(str(scripts / f"{suite}.py"), run_name="__main__")
        assert exited.value.code == 0
    assert calls == [["--suite", s, "--quick", "--out", "x"] for s in SUITES]
