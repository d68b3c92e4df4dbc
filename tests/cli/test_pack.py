"""`--pack` of `keras-attention lm` and `pretrain`: the combinations that
cannot be packed are refused in one line, before any work."""

import pytest

from keras_attention import cli
from keras_attention.models import GPT
from tests.test_cli import _error


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["lm", "--pack", "--model", "lstm"],
            "--pack needs --model gpt: the lstm would carry its state from one "
            "document of a row into the next",
        ),
        (["lm", "--model", "gpt,lstm", "--pack"], "--pack needs --model gpt"),
    ],
)
def test_what_cannot_be_packed_is_refused_in_one_line(argv, message, capsys, tmp_path):
    status, line = _error([*argv, "--out", str(tmp_path / "run")], capsys)
    assert status == 2
    assert line.startswith(f"keras-attention {argv[0]}: error: ")
    assert message in line
    assert not (tmp_path / "run").exists()


def test_a_loaded_model_is_not_packed(capsys, tmp_path):
    path = tmp_path / "model.keras"
    GPT(128, max_length=8, hidden_dim=8, num_heads=2, num_layers=1).save(path)
    argv = ["lm", "--load", str(path), "--pack", "--prompt", "A"]
    status, line = _error(argv, capsys)
    assert (status, line) == (
        2,
        "keras-attention lm: error: --pack is how a model trains; with --load "
        "nothing is trained",
    )


@pytest.mark.parametrize("command", ["lm", "pretrain"])
def test_pack_is_an_option_with_help(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert "--pack" in capsys.readouterr().out
