"""Every script of examples/ runs to its end, in its tiny form
(KERAS_ATTENTION_TINY_EXAMPLES=1: the same code on a few examples and steps),
so that an API change that breaks one fails here, not in a user's hands.
`sagan_long_range.py` has tests of its own (test_sagan_long_range.py)."""

import os
import runpy
import sys

import keras
import matplotlib.pyplot as plt
import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")

# Each script: what it prints or writes when it ran to its end, and the Debian
# packages it reads.
SCRIPTS = {
    "quickstart.py": (["held-out MSE"], [], ()),
    "translate_dates.py": (
        ["exact match on 16 held-out dates"],
        ["dates_attention.png", "dates_transformer.keras"],
        (),
    ),
    "translate_de_en.py": (["Transformer, beam 4: BLEU"], [], ("trans-de-en",)),
    "caption_scenes.py": (
        ["exact captions"],
        ["caption_attention.png"],
        ("dataset-fashion-mnist",),
    ),
    "classify_reviews.py": (["test accuracy"], ["reviews_han.keras"], ()),
    "gan_fashion_mnist.py": (
        ["FID"],
        ["runs/example_gan/samples.png", "runs/example_gan/attention.png"],
        ("dataset-fashion-mnist",),
    ),
    "int8_cache_perplexity.py": (["int8 cache", "the same"], [], ("fortunes",)),
    "length_extrapolation.py": (
        ["alibi"],
        [
            "runs/length_extrapolation/metrics.json",
            "runs/length_extrapolation/extrapolation.png",
        ],
        ("fortunes",),
    ),
    "speculative_fortunes.py": (["tokens per target pass"], [], ("fortunes",)),
    "pretraining_curve.py": (
        [],
        [
            "runs/pretraining-curve/learning_curve.json",
            "runs/pretraining-curve/learning_curve.png",
        ],
        (),
    ),
}


def test_every_example_is_run_here():
    scripts = {name for name in os.listdir(EXAMPLES) if name.endswith(".py")}
    assert scripts == set(SCRIPTS) | {"sagan_long_range.py"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        pytest.param(name, marks=pytest.mark.needs_package(*needs))
        for name, (_, _, needs) in SCRIPTS.items()
    ],
)
def test_example_runs_in_its_tiny_form(script, tmp_path, monkeypatch, capsys):
    """Each script runs as `__main__` in this process, with its own folder
    and command line: a process of its own paid for importing TensorFlow
    and Keras again (about 8 s of each script's 15-40). The dtype policy and
    floatx a script sets are restored after it."""
    printed, written, _ = SCRIPTS[script]
    path = os.path.abspath(os.path.join(EXAMPLES, script))
    monkeypatch.setenv("KERAS_ATTENTION_TINY_EXAMPLES", "1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [path])
    policy, floatx = keras.config.dtype_policy(), keras.config.floatx()
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        keras.config.set_dtype_policy(policy)
        keras.config.set_floatx(floatx)
        plt.close("all")
    stdout = capsys.readouterr().out
    for text in printed:
        assert text in stdout, stdout[-3000:]
    for name in written:
        assert (tmp_path / name).stat().st_size > 0, name
