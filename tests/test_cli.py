import json

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.data.synthetic import reversal_task
from keras_attention.tasks.demo import run_demo


def test_help_lists_subcommands(capsys):
    try:
        cli.main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "translate", "classify", "caption", "gan", "bench"):
        assert command in out


def test_no_subcommand_prints_help(capsys):
    assert cli.main([]) == 0
    assert "usage: keras-attention" in capsys.readouterr().out


@pytest.mark.slow
def test_demo_learns_reversal_and_writes_outputs(tmp_path):
    metrics = run_demo(tmp_path, epochs=3, num_train=4000, num_test=200, verbose=0)
    assert metrics["token_accuracy"] > 0.95
    assert metrics["alignment_accuracy"] > 0.9  # the anti-diagonal of the heatmap
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["token_accuracy"] == metrics["token_accuracy"]
    assert (tmp_path / "attention.png").stat().st_size > 1000

    # The saved model loads in safe mode and predicts the same.
    model = keras.saving.load_model(tmp_path / "model.keras", safe_mode=True)
    test = reversal_task(8, seed=5)
    inputs = [test["encoder_tokens"], test["decoder_inputs"]]
    predicted = np.argmax(model.predict(inputs, verbose=0), -1)
    real = test["decoder_targets"] != 0
    assert (predicted == test["decoder_targets"])[real].mean() > 0.9
