"""The reference models on JAX and PyTorch: each trains a step, saves to
`.keras`, loads back in safe mode with the same predictions and (the
translators and the captioner) generates with its cache, greedy and beam (the
language models: greedy and top-p); SAGAN learns, averages its generator,
repeats itself from a seed and trains in mixed precision.
The other model tests run on TensorFlow, CI's default backend."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import tempfile
import numpy as np
import keras
from keras_attention.models import (
    HierarchicalAttentionNetwork, RNNSeq2Seq, ShowAttendTell, Transformer,
    TransformerClassifier,
)
from tests.layer_test import assert_saved_model_matches

rng = np.random.default_rng(0)
ids = rng.integers(4, 20, size=(8, 6)).astype("int32")
ids[:, 4:] = 0  # padding
images = rng.random((8, 16, 16, 1)).astype("float32")
sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
cases = {
    "Transformer": (
        Transformer(20, 20, hidden_dim=16, num_heads=2, intermediate_dim=32,
                    num_encoder_layers=1, num_decoder_layers=1,
                    max_source_length=8, max_target_length=8),
        {"encoder_token_ids": ids, "decoder_token_ids": ids}, ids, sparse, ids),
    "RNNSeq2Seq": (
        RNNSeq2Seq(20, 20, embedding_dim=8, units=16, max_source_length=8,
                   max_target_length=8),
        {"encoder_token_ids": ids, "decoder_token_ids": ids}, ids, sparse, ids),
    "ShowAttendTell": (
        ShowAttendTell(20, image_shape=(16, 16, 1), encoder_filters=(4, 8),
                       embedding_dim=8, units=16, attention_units=8,
                       max_caption_length=5),
        {"images": images, "decoder_token_ids": ids}, ids, sparse, images),
    "TransformerClassifier": (
        TransformerClassifier(20, 3, max_length=6, hidden_dim=16),
        ids, ids[:, 0] % 3, "sparse_categorical_crossentropy", None),
    "HierarchicalAttentionNetwork": (
        HierarchicalAttentionNetwork(20, 3, max_sentences=2, max_words=3,
                                     embedding_dim=8, word_units=8,
                                     sentence_units=8),
        ids.reshape(8, 2, 3), ids[:, 0] % 3, "sparse_categorical_crossentropy",
        None),
}
folder = tempfile.mkdtemp()
for name, (model, x, y, loss, sources) in cases.items():
    model.compile(optimizer="adam", loss=loss)
    history = model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0]), name
    loaded = assert_saved_model_matches(model, x, folder, atol=1e-5)
    if sources is not None:
        for beam_width in (1, 2):
            tokens = keras.ops.convert_to_numpy(
                loaded.generate(sources, max_length=4, beam_width=beam_width)
            )
            assert tokens.shape == (8, 4) and tokens.max() < 20, (name, tokens)
    print(name, "ok")
from keras_attention.models import GPT, LSTMLanguageModel
for model in (
    GPT(20, max_length=8, hidden_dim=16, num_heads=2, num_layers=1,
        intermediate_dim=32, end_token_id=3),
    LSTMLanguageModel(20, hidden_dim=16, num_layers=1, max_length=8, end_token_id=3),
):
    model.compile(optimizer="adam", loss=sparse)
    history = model.fit(ids, ids, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0]), model.name
    loaded = assert_saved_model_matches(model, ids, folder, atol=1e-5)
    for sampler in ("greedy", "top_p"):
        tokens = keras.ops.convert_to_numpy(
            loaded.generate(ids[:, :2], max_length=8, sampler=sampler)
        )
        assert tokens.shape == (8, 8) and (tokens[:, :2] == ids[:, :2]).all()
    print(type(model).__name__, "ok")
# SAGAN, its own two-optimizer step, on the 8x8 digits in [-1, 1].
from keras_attention.data.labelled_images import load_digits_images
from tests.models.sagan_checks import check_training_on_this_backend
digits = load_digits_images().images[:512].astype("float32") / 127.5 - 1.0
check_training_on_this_backend(digits)
"""

MODELS = [
    "Transformer",
    "RNNSeq2Seq",
    "ShowAttendTell",
    "TransformerClassifier",
    "HierarchicalAttentionNetwork",
    "GPT",
    "LSTMLanguageModel",
]
# tests/models/sagan_checks.py's check_training_on_this_backend.
SAGAN_CHECKS = ["learns", "averages", "reproducible", "mixed_precision"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_models_train_save_load_and_generate(backend):
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, "KERAS_BACKEND": backend},
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    models = [word for model in MODELS for word in (model, "ok")]
    sagan = [word for check in SAGAN_CHECKS for word in (check, "ok")]
    assert result.stdout.split() == models + sagan
