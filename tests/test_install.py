"""The core install: `pip install keras-attention` brings keras and numpy, not the
applications' TensorFlow, keras-hub or matplotlib, and the library works on JAX,
generation (greedy and beam search) and the image sets' measures included."""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USE_THE_LIBRARY = """
import importlib.util, sys
import numpy as np
import keras_attention
from keras_attention import layers, models, ops

x = np.random.default_rng(0).normal(size=(2, 6, 16)).astype("float32")
out = layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x, use_causal_mask=True)
assert out.shape == (2, 6, 16), out.shape
model = models.Transformer(
    source_vocabulary_size=20, target_vocabulary_size=20, hidden_dim=16,
    num_heads=2, intermediate_dim=32, num_encoder_layers=1, num_decoder_layers=1,
)
ids = np.ones((2, 5), "int32")
logits = model({"encoder_token_ids": ids, "decoder_token_ids": ids})
assert logits.shape == (2, 5, 20), logits.shape
# Every search on the core install: greedy search is ours, not keras-hub's.
for beam_width in (1, 2):
    tokens = np.asarray(model.generate(ids, max_length=4, beam_width=beam_width))
    assert tokens.shape == (2, 4) and tokens.dtype == np.int32, tokens
gpt = models.GPT(
    20, max_length=8, hidden_dim=16, num_heads=2, num_layers=1,
    intermediate_dim=32, end_token_id=3,
)
tokens = np.asarray(gpt.generate(np.array([[5, 6, 7], [8, 0, 0]]), max_length=8))
assert tokens.shape == (2, 8) and tokens.dtype == np.int32, tokens
assert tokens[0, :3].tolist() == [5, 6, 7] and tokens[1, 0] == 8, tokens
# The image sets and their measures need no TensorFlow either (the SAGAN
# study of examples/sagan_long_range.py runs on GPU machines without it).
from keras_attention.data.fashion_pairs import PAIR_CELLS, compose_pairs
from keras_attention.evaluation import LongRangeAgreement, feature_classifier

rng = np.random.default_rng(0)
items = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
canvases, _, _ = compose_pairs(items, np.repeat(np.arange(2), 10))
classifier = feature_classifier((32, 32, 1), 2)
measure = LongRangeAgreement(classifier, (64, 64, 1), PAIR_CELLS)
assert 0 <= measure(canvases)["agreement"] <= 1
for name in ("tensorflow", "keras_hub", "matplotlib", "sacrebleu"):
    assert importlib.util.find_spec(name) is None, f"{name} is installed"
    assert name not in sys.modules, f"{name} was imported"
print("core ok on", keras_attention.ops.__name__, __import__("keras").backend.backend())
"""


def core_install(tmp_path):
    """The folder of a virtual environment with the core install: the one
    KERAS_ATTENTION_CORE_ENV names (.ci/keras_matrix's, whose making took
    as long as this test's checks), else a fresh one made here."""
    made = os.environ.get("KERAS_ATTENTION_CORE_ENV")
    if made:
        return Path(made)
    env_dir = tmp_path / "core"
    venv.create(env_dir, with_pip=True)
    subprocess.run(
        [env_dir / "bin" / "python", "-m", "pip", "install", "-q", f"{ROOT}[jax]"],
        check=True,
        timeout=900,
    )
    return env_dir


@pytest.mark.slow
def test_core_install_uses_the_library_without_the_applications(tmp_path):
    env_dir = core_install(tmp_path)
    python = env_dir / "bin" / "python"
    result = subprocess.run(
        [python, "-c", USE_THE_LIBRARY],
        env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "core ok on keras_attention.ops jax" in result.stdout

    # The command line names the extra it needs, in one line, no traceback.
    cli = subprocess.run(
        [env_dir / "bin" / "keras-attention", "translate", "--out", str(tmp_path)],
        env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 1
    assert cli.stderr.strip().splitlines() == [
        "keras-attention translate: error: needs tensorflow, keras_hub, "
        "sacrebleu, matplotlib, which the applications' extra installs: pip "
        "install 'keras-attention[apps]'"
    ]


@pytest.mark.slow
def test_library_import_on_jax_loads_no_application_module():
    check = (
        "import sys, keras_attention, keras_attention.models, "
        "keras_attention.decoding\n"
        "print(sorted(m for m in ('tensorflow', 'keras_hub', 'tensorflow_text', "
        "'sacrebleu') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check],
        env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"
