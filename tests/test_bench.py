"""Smoke test: the attention suite runs end to end in quick mode and writes
its outputs with the expected schema (no timing is asserted)."""

import json

from keras_attention import cli


def test_attention_suite_quick(tmp_path):
    cli.main(["bench", "--suite", "attention", "--quick", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "attention.json").read_text())
    assert results["suite"] == "attention" and results["quick"] is True
    assert {"cpu", "cores", "backend", "keras"} <= set(results["machine"])
    assert results["matmul_gflops"] > 0
    for impl in ("keras", "ours", "ours_chunked"):
        case = results["cases"][f"ops/{impl}/128"]
        assert {"median_s", "min_s", "max_s", "gflops", "peak_memory_bytes"} <= set(
            case
        )
        assert case["min_s"] <= case["median_s"] <= case["max_s"]
    assert "mha_time_ratio_T128" in results["ratios"]
    assert "decode_cache_speedup" in results["ratios"]
    assert (tmp_path / "attention.png").read_bytes().startswith(b"\x89PNG")
    assert "| ratio | value |" in (tmp_path / "attention.md").read_text()
