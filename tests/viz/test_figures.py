"""What every figure shares: the lazy, headless pyplot, PNGs written by
save_figure, and the package's exports."""

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
from PIL import Image

from keras_attention import viz

ROOT = Path(__file__).resolve().parents[2]
MODULES = ("charts", "figures", "heatmaps", "images", "text")


def test_pyplot_is_matplotlib_pyplot_on_the_headless_backend():
    plt = viz.pyplot()
    assert plt is sys.modules["matplotlib.pyplot"]
    assert matplotlib.get_backend().lower() == "agg"


def test_save_figure_writes_a_png_of_the_figure_size(tmp_path):
    plt = viz.pyplot()
    fig, ax = plt.subplots(figsize=(3.0, 2.0))
    ax.plot([0, 1], [1, 0])
    path = tmp_path / "nested" / "folders" / "line.png"
    assert viz.save_figure(fig, path) is None
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.load()  # decodes every pixel
        assert image.size == (360, 240)  # inches times 120 dots per inch
    assert not plt.fignum_exists(fig.number)  # closed once written


def test_save_figure_takes_a_string_path_in_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fig = viz.pyplot().figure(figsize=(1.0, 1.5))
    viz.save_figure(fig, "here.png")
    with Image.open(tmp_path / "here.png") as image:
        assert image.size == (120, 180)


def test_every_public_function_of_the_modules_is_exported():
    defined = set()
    for name in MODULES:
        module = importlib.import_module(f"keras_attention.viz.{name}")
        assert module.__doc__, f"keras_attention.viz.{name} has no docstring"
        for attribute, value in vars(module).items():
            if (
                inspect.isfunction(value)
                and not attribute.startswith("_")
                and value.__module__ == module.__name__
            ):
                assert value.__doc__, f"{module.__name__}.{attribute} has no docstring"
                defined.add(attribute)
    assert sorted(viz.__all__) == sorted(defined)
    for name in viz.__all__:
        assert getattr(viz, name) is not None


@pytest.mark.slow
def test_keras_attention_loads_viz_on_first_use():
    check = (
        "import sys, keras_attention\n"
        "assert 'keras_attention.viz' not in sys.modules, 'viz loaded on import'\n"
        "keras_attention.viz.plot_attention\n"
        "print(sorted(m for m in sys.modules if m.startswith('keras_attention.viz')))\n"
    )
    printed = subprocess.check_output(  # its stderr shows in the report
        [sys.executable, "-c", check],
        env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        text=True,
        timeout=300,
    )
    loaded = [f"keras_attention.viz.{name}" for name in MODULES]
    assert printed.strip() == str(sorted(["keras_attention.viz", *loaded]))
