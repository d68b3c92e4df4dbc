import argparse
import json
import os
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.data.synthetic import reversal_task
from keras_attention.names import LM_GPT_SIZES
from keras_attention.tasks.demo import run_demo
from tests.models.model_cases import tiny_sagan, tiny_transformer

SUBCOMMANDS = ("demo", "translate", "classify", "caption", "gan", "lm", "bench")


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in SUBCOMMANDS:
        assert command in out


def test_no_subcommand_prints_help(capsys):
    assert cli.main([]) == 0
    assert "usage: keras-attention" in capsys.readouterr().out


def _subcommand_parsers():
    parser = cli.build_parser()
    commands = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    return commands.choices


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_option_has_help_and_its_default(command):
    parser = _subcommand_parsers()[command]
    # Without white space, which the help's line wrapping adds.
    text = "".join(parser.format_help().split())
    for action in parser._actions:
        assert action.help, f"{command} {action.option_strings} has no help"
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if action.option_strings and shown and action.dest != "help":
            assert "(default" in action.help or f"(default:{action.default})" in text


def test_a_subcommand_that_takes_load_uses_the_loaded_model():
    # `main` loads the `--load` model and hands it to the subcommand's `use`.
    for name, parser in _subcommand_parsers().items():
        takes_load = "--load" in parser._option_string_actions
        assert takes_load == hasattr(cli.COMMANDS[name], "use"), name


def test_help_and_argument_errors_load_no_framework(tmp_path):
    # The entry point the console script runs: `--help` and a refused
    # argument answer without importing Keras or TensorFlow.
    script = (
        "import sys, keras_attention_cli\n"
        "for argv in (['translate', '--help'], ['translate', '--epochs', '0'],"
        " ['--help']):\n"
        "    sys.argv = ['keras-attention', *argv]\n"
        "    try:\n"
        "        keras_attention_cli.main()\n"
        "    except SystemExit as exit_:\n"
        "        print('exit', exit_.code)\n"
        "print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch') "
        "if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "[]"
    assert [line for line in lines if line.startswith("exit")] == [
        "exit 0",
        "exit 2",
        "exit 0",
    ]
    assert result.stderr.strip() == (
        "keras-attention translate: error: argument --epochs: expected a "
        "positive integer; got '0'"
    )


def _error(argv, capsys):
    """The exit status and the one line of stderr of a refused command."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return exit_.value.code, lines[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["translate", "--model", "transformer,foo"],
            "argument --model: unknown model 'foo'; expected one of transformer, "
            "transformer-base, rnn,",
        ),
        (["translate", "--model", "rnn,rnn"], "a model is listed twice in 'rnn,rnn'"),
        (["translate", "--epochs", "0"], "expected a positive integer; got '0'"),
        (["translate", "--epochs", "-1"], "expected a positive integer; got '-1'"),
        (["translate", "--num-train", "-10"], "--num-train: expected a positive"),
        (["translate", "--batch-size", "x"], "--batch-size: expected a positive"),
        (["translate", "--beam", "0"], "--beam: expected a positive integer"),
        (["translate", "--time-budget", "0"], "--time-budget: expected a positive"),
        (["translate", "--seed", "-1"], "--seed: expected an integer >= 0"),
        (["translate", "--min-confidence", "nan"], "--min-confidence: expected"),
        (
            ["translate", "--data", "missing.tsv"],
            "'missing.tsv' is neither a built-in dataset (dates, de-en, messages-de) "
            "nor an "
            "existing file",
        ),
        (["classify", "--model", "svm"], "unknown model 'svm'"),
        (["classify", "--seeds", "0"], "--seeds: expected a positive integer"),
        (["classify", "--labelled", "0"], "--labelled: expected a positive integer"),
        (["classify", "--learning-rate", "0"], "--learning-rate: expected a positive"),
        (["classify", "--monitor", "val_acc"], "argument --monitor: invalid choice"),
        (
            ["classify", "--labelled", "100", "--num-train", "100"],
            "--labelled and --num-train both choose the training texts; give one",
        ),
        (
            ["classify", "--model", "bilstm", "--width", "64"],
            "--width, --heads and --blocks size the Transformer; they need --model "
            "transformer, not bilstm",
        ),
        (["caption", "--model", "attention,none"], "unknown model 'none'"),
        (["caption", "--doubly-stochastic", "-1"], "expected a number >= 0"),
        (["caption", "--data", "no_folder"], "nor an existing folder"),
        (["gan", "--ema", "1.5"], "--ema: expected a number between 0 and 1"),
        (["gan", "--fid-samples", "1"], "expected an integer >= 2; got '1'"),
        (["gan", "--steps-per-epoch", "0"], "--steps-per-epoch: expected a positive"),
        (["gan", "--image-size", "4"], "expected an integer >= 8; got '4'"),
        (
            ["gan", "--data", "fashion-pairs", "--attention-resolution", "64"],
            "--attention-resolution 64 is not a feature-map side of both networks "
            "for the 64x64 images of 'fashion-pairs'; expected one of 4, 8, 16, 32",
        ),
        (
            ["gan", "--attention-resolution", "32"],
            "for the 32x32 images of 'fashion-mnist'; expected one of 4, 8, 16",
        ),
        (
            ["gan", "--attention-resolution", "0"],
            "--attention-resolution: expected a positive integer; got '0'",
        ),
        (["lm", "--model", "gpt,rnn"], "unknown model 'rnn'; expected one of gpt"),
        (["lm", "--sampler", "beam"], "argument --sampler: invalid choice: 'beam'"),
        (["lm", "--top-p", "0"], "--top-p: expected a number above 0, at most 1"),
        (["lm", "--temperature", "-1"], "--temperature: expected a positive"),
        (["lm", "--length", "1"], "--length: expected an integer >= 2"),
        (["lm", "--data", "no.txt"], "nor an existing file"),
        (["lm", "--prompt", "Once"], "prompts to lm need --load DIR/model.keras"),
        (["lm", "--draft", "no.keras"], "--draft 'no.keras': no such file"),
        (
            ["lm", "--draft", "no.keras", "--model", "gpt,lstm"],
            "--draft proposes characters for a GPT: it needs --model gpt",
        ),
        (["lm", "--draft-tokens", "0"], "--draft-tokens: expected a positive"),
        # GPT's 4 heads by default: they do not divide a width of 30.
        (["lm", "--width", "30"], "--heads 4 does not divide the width 30"),
        (["lm", "--blocks", "0"], "--blocks: expected a positive integer"),
        (["bench", "--suite", "nope"], "argument --suite: invalid choice: 'nope'"),
        (["translate", "--strategy", "gpu"], "argument --strategy: invalid choice"),
        (
            ["translate", "--model-shards", "2"],
            "--model-shards 2 needs --strategy model-parallel; received --strategy "
            "default",
        ),
        (
            ["classify", "--strategy", "data-parallel"],
            "--strategy data-parallel uses keras.distribution, which trains on the "
            "jax backend (KERAS_BACKEND=jax); the backend is 'tensorflow'",
        ),
        (["translate", "--nope"], "unrecognized arguments: --nope"),
        (
            ["translate", "some sentence"],
            "sentences to translate need --load DIR/model.keras",
        ),
        (["classify", "some text"], "texts to classify need --load DIR/model.keras"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(argv, message, capsys, tmp_path):
    status, line = _error([*argv, "--out", str(tmp_path / "run")], capsys)
    assert status == 2
    assert line.startswith(f"keras-attention {argv[0]}: error: ")
    assert message in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("ablation", [False, True])
def test_gan_takes_the_long_range_set_and_an_attention_resolution(
    ablation, monkeypatch, tmp_path
):
    from keras_attention.tasks import gan

    received = {}

    def record(out_dir, **kwargs):
        received.update(kwargs, out_dir=out_dir)

    monkeypatch.setattr(gan, "ablation" if ablation else "run_gan", record)
    argv = ["gan", "--data", "fashion-pairs", "--attention-resolution", "32"]
    cli.main([*argv, *(["--ablation"] if ablation else []), "--out", str(tmp_path)])
    assert received["data"] == "fashion-pairs"
    assert received["attention_resolution"] == 32
    assert received["out_dir"] == str(tmp_path)
    assert ("seeds" in received) == ablation


@pytest.mark.parametrize("models", ["gpt", "gpt,lstm"])
def test_lm_sizes_gpt_with_its_own_feed_forward_ratio(models, monkeypatch, tmp_path):
    from keras_attention.tasks import lm

    received = {}

    def record(out_dir, *args, **kwargs):
        received.update(kwargs)

    monkeypatch.setattr(lm, "run_lm" if models == "gpt" else "compare", record)
    sizes = ["--width", "64", "--heads", "8", "--blocks", "2"]
    cli.main(["lm", "--model", models, *sizes, "--out", str(tmp_path)])
    # GPT's feed-forward layers are 4 times its width (512 for 128).
    assert {key: received[key] for key in LM_GPT_SIZES} == {
        "hidden_dim": 64,
        "num_heads": 8,
        "num_layers": 2,
        "intermediate_dim": 256,
    }
    received.clear()
    cli.main(["lm", "--model", models, "--out", str(tmp_path)])
    assert not set(LM_GPT_SIZES) & set(received)


def test_out_must_be_a_folder_that_can_be_written(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    status, line = _error(["translate", "--out", str(a_file)], capsys)
    assert (status, line) == (
        2,
        f"keras-attention translate: error: --out '{a_file}' exists and is not "
        "a folder",
    )
    status, line = _error(["translate", "--out", str(a_file / "run")], capsys)
    assert status == 2
    assert line.endswith(f"cannot be created: '{a_file}' is not a folder")
    # /proc refuses new files, even to root.
    status, line = _error(["translate", "--out", "/proc/run"], capsys)
    assert status == 2
    assert line.startswith("keras-attention translate: error: --out '/proc/run' ")
    assert "cannot be written" in line


def test_the_output_check_leaves_no_trace(tmp_path):
    cli.check_output_folder(str(tmp_path / "a" / "b"))
    assert list(tmp_path.iterdir()) == []
    cli.check_output_folder(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="session")
def saved_transformer(tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "model.keras"
    tiny_transformer().save(path)
    return path


def _load_error(command, path, capsys):
    images = ["x.png"] if command == "caption" else []
    status, line = _error([command, "--load", str(path), *images], capsys)
    prefix = f"keras-attention {command}: error: --load '{path}'"
    assert line.startswith(prefix), line
    return status, line[len(prefix) :]


@pytest.mark.xdist_group("saved_transformer")
def test_load_tells_each_kind_of_bad_file_apart(tmp_path, saved_transformer, capsys):
    assert _load_error("translate", tmp_path / "none.keras", capsys) == (
        2,
        ": no such file",
    )

    run = tmp_path / "run"
    run.mkdir()
    (run / "model.keras").write_bytes(saved_transformer.read_bytes())
    assert _load_error("translate", run, capsys) == (
        2,
        f" is a folder, not a .keras file; did you mean '{run / 'model.keras'}'?",
    )

    text = tmp_path / "notes.keras"
    text.write_text("garbage")
    status, message = _load_error("translate", text, capsys)
    assert status == 2
    assert message == " is not a .keras archive (a zip file); it starts with b'garbage'"

    weights = tmp_path / "model.weights.h5"
    tiny_transformer().save_weights(weights)
    status, message = _load_error("translate", weights, capsys)
    assert status == 2
    assert message.startswith(" is an HDF5 file (weights only")

    data = saved_transformer.read_bytes()
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(data[: len(data) // 2])
    status, message = _load_error("translate", truncated, capsys)
    assert status == 1
    assert message.startswith(" is a corrupt .keras archive (truncated or damaged")

    damaged = tmp_path / "damaged.keras"
    with zipfile.ZipFile(saved_transformer) as archive:
        info = archive.getinfo("model.weights.h5")
        middle = info.header_offset + len(info.filename) + 30 + info.file_size // 2
    flipped = bytes([data[middle] ^ 0xFF])
    damaged.write_bytes(data[:middle] + flipped + data[middle + 1 :])
    status, message = _load_error("translate", damaged, capsys)
    assert status == 1
    assert message == (
        " is a corrupt .keras archive: model.weights.h5 fails its checksum"
    )

    not_keras = tmp_path / "other.keras"
    with zipfile.ZipFile(not_keras, "w") as archive:
        archive.writestr("readme.txt", "hello")
    status, message = _load_error("translate", not_keras, capsys)
    assert status == 2
    assert message == " is a zip file without config.json, not a .keras archive"

    assert _load_error("caption", saved_transformer, capsys) == (
        2,
        " holds a Transformer model; `keras-attention caption` reads ShowAttendTell",
    )
    sequential = tmp_path / "sequential.keras"
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(sequential)
    status, message = _load_error("gan", sequential, capsys)
    assert status == 2
    assert message.startswith(" holds a Sequential model; `keras-attention gan` reads")


@pytest.mark.xdist_group("saved_transformer")
def test_load_reports_an_unreadable_file(saved_transformer, monkeypatch, capsys):
    real_open = open

    def refuse(path, *args, **kwargs):
        if os.fspath(path) == str(saved_transformer):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refuse)
    assert _load_error("translate", saved_transformer, capsys) == (
        1,
        " cannot be read: Permission denied",
    )


@pytest.mark.xdist_group("saved_transformer")
def test_load_accepts_a_model_of_the_command(saved_transformer, tmp_path):
    cli.check_saved_model(str(saved_transformer), "translate")
    generator = tmp_path / "model.keras"
    tiny_sagan(ema_decay=0.9).sampler.save(generator)
    cli.check_saved_model(str(generator), "gan")
    with pytest.raises(cli.CommandError, match="reads TransformerClassifier, "):
        cli.check_saved_model(str(saved_transformer), "classify")


def test_a_draft_must_be_a_gpt_with_the_models_vocabulary(
    tmp_path, saved_transformer, capsys
):
    from keras_attention.models import GPT

    sizes = {"max_length": 16, "hidden_dim": 8, "num_heads": 1, "num_layers": 1}
    small = tmp_path / "small.keras"
    GPT(50, intermediate_dim=8, **sizes).save(small)
    target = tmp_path / "target.keras"
    GPT(128, intermediate_dim=8, **sizes).save(target)
    out = ["--out", str(tmp_path / "run")]

    def error(*argv):
        status, line = _error(["lm", *argv, *out], capsys)
        assert status == 2
        return line.removeprefix("keras-attention lm: error: ")

    assert error("--draft", str(small)) == (
        f"--draft '{small}' has a vocabulary of 50 ids, the model 128: the draft "
        "must share the model's tokenizer"
    )
    assert "vocabulary of 50 ids, the model 128" in error(
        "--load", str(target), "--draft", str(small), "--sampler", "greedy"
    )
    assert error("--load", str(target), "--draft", str(target)) == (
        "--draft with --load continues greedily: give --sampler greedy"
    )
    assert error("--load", str(target), "--width", "64") == (
        "--width, --heads and --blocks size a model to train; with --load "
        "nothing is trained"
    )
    assert error("--draft", str(saved_transformer)) == (
        f"--draft '{saved_transformer}' holds a Transformer model; "
        "`keras-attention lm --draft` reads GPT"
    )
    text = tmp_path / "notes.keras"
    text.write_text("garbage")
    assert error("--draft", str(text)).endswith(
        "is not a .keras archive (a zip file); it starts with b'garbage'"
    )
    assert not (tmp_path / "run").exists()


def test_a_failure_is_one_line_and_debug_shows_the_traceback(
    tmp_path, monkeypatch, capsys
):
    def fail(args):
        raise RuntimeError("the data vanished\nsecond line")

    out = tmp_path / "run"
    monkeypatch.setattr(cli.translate, "run", fail)
    status, line = _error(["translate", "--out", str(out)], capsys)
    assert (status, line) == (
        1,
        "keras-attention translate: error: RuntimeError: the data vanished",
    )
    assert not out.exists()  # the run created it; it failed empty

    with pytest.raises(SystemExit):
        cli.main(["translate", "--out", str(out), "--debug"])
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1] == line


def test_lines_from_standard_input(monkeypatch):
    class Terminal:
        lines = iter(["a date\n", "\n", "another\n", ""])

        def isatty(self):
            return True

        def readline(self):
            return next(self.lines)

    monkeypatch.setattr(sys, "stdin", Terminal())
    # At a terminal, each line is answered before the next is read.
    assert list(cli.read_inputs([], "sentences")) == [["a date"], ["another"]]
    assert list(cli.read_inputs(["given"], "sentences")) == [["given"]]


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


@pytest.mark.slow
@pytest.mark.xdist_group("saved_transformer")
def test_a_run_starts_quietly_and_fails_in_one_line(saved_transformer, tmp_path):
    # TensorFlow loads (the model is read) without its start-up logs, and the
    # model's missing tokenizers are reported in one line.
    command = "import sys, keras_attention_cli; sys.exit(keras_attention_cli.main())"
    result = subprocess.run(
        [sys.executable, "-c", command, "translate", "--load", saved_transformer, "x"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "keras-attention translate: error: This model has no tokenizers; train "
        "it with `keras-attention translate`, or pass "
        "`source_tokenizer`/`target_tokenizer`."
    ]


def test_an_interrupted_training_says_how_to_resume(tmp_path, monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.translate, "run", interrupted)
    status, line = _error(["translate", "--out", str(tmp_path)], capsys)
    assert (status, line) == (
        130,
        "keras-attention translate: interrupted; the same command resumes the training",
    )


def test_a_refused_batch_size_leaves_nothing(tmp_path, capsys):
    """Refused before any work: not even the output folder is made, so the
    same command with a sane batch size starts as in a fresh folder."""
    out = tmp_path / "run"
    small = ["translate", "--num-train", "600", "--beam", "1", "--out", str(out)]
    status, line = _error([*small, "--batch-size", "100000"], capsys)
    assert (status, line) == (
        2,
        "keras-attention translate: error: batch size 100,000 is larger than the "
        "training split (600 pairs): no full batch to train on",
    )
    assert not out.exists()
