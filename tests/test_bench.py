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
    decode = results["cases"]["decode"]
    for name in ("ours", "keras_hub", "ours_no_cache"):
        check_timing(decode["timings"][name])
    assert decode["time_ratio_vs_keras_hub"] == pytest.approx(
        decode["per_token_s"]["ours"] / decode["per_token_s"]["keras_hub"]
    )
    assert decode["matmul_bound_per_token_s"] > 0
    assert {"decode_cache_speedup", "decode_time_ratio_vs_keras_hub"} <= set(
        results["ratios"]
    )
    assert "| ratio | value |" in (tmp_path / "attention.md").read_text()


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
