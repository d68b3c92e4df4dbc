import pytest

from keras_attention.tasks.gan import SUMMARY_KEYS, summarize_ablation


def test_the_ablation_summary_has_mean_and_spread_of_the_long_range_agreement():
    def run(fid, agreement):
        return {
            "fid": fid,
            "long_range_agreement": agreement,
            "long_range_agreement_chance": 0.1,
            "long_range_agreement_real": 0.8,
            "train_seconds": 10.0,
            "steps": 100,
        }

    results = {
        "attention": [run(12.0, 0.5), run(14.0, 0.7)],
        "no-attention": [run(10.0, 0.2), run(10.0, 0.4)],
    }
    summary = summarize_ablation(results, seeds=(0, 1))
    assert summary["attention"]["seeds"] == [0, 1]
    assert summary["attention"]["long_range_agreement"] == [0.5, 0.7]
    assert summary["attention"]["long_range_agreement_mean"] == pytest.approx(0.6)
    assert summary["attention"]["long_range_agreement_std"] == pytest.approx(0.1)
    assert summary["no-attention"]["fid_mean"] == 10.0
    assert summary["no-attention"]["long_range_agreement_real_mean"] == 0.8
    # Only the listed figures, and only those the runs report.
    assert "steps" not in summary["attention"]
    assert "inception_score" in SUMMARY_KEYS
    assert "inception_score" not in summary["attention"]
