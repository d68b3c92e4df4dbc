"""A swapped keras-hub model trains on the chunked path as keras-hub's own
model does (loss and gradients), and the long-context benchmark runs."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
import keras  # noqa: E402
from keras import ops  # noqa: E402

from keras_attention.integrations.keras_hub import swap_attention  # noqa: E402
from keras_attention.integrations.keras_hub.generation import (  # noqa: E402
    attention_layers,
)
from tests.integrations.keras_hub_models import small_llama  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _loss_and_gradients(causal_lm, x, y):
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    weights = causal_lm.trainable_variables
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn(y, causal_lm(x))
        return loss, tape.gradient(loss, weights)
    if keras.backend.backend() == "jax":
        import jax

        def compute(values):
            logits, _ = causal_lm.stateless_call(
                values, causal_lm.non_trainable_variables, x
            )
            return loss_fn(y, logits)

        values = [w.value for w in weights]
        return jax.value_and_grad(compute)(values)
    pytest.skip("gradients compared on TensorFlow and JAX")


def test_chunked_training_step_equals_keras_hubs():
    keras.utils.set_random_seed(0)
    causal_lm = small_llama()
    ours = swap_attention(causal_lm, chunk_size=32)
    length = 128
    tokens = np.random.default_rng(0).integers(1, 100, size=(2, length + 1))
    mask = np.ones((2, length), "int32")
    mask[1, 100:] = 0
    x = {"token_ids": tokens[:, :-1].astype("int32"), "padding_mask": mask}
    y = tokens[:, 1:].astype("int32")
    expected_loss, expected = _loss_and_gradients(causal_lm, x, y)
    loss, gradients = _loss_and_gradients(ours, x, y)
    assert attention_layers(ours)[0].attention_path == "chunked"
    np.testing.assert_allclose(float(loss), float(expected_loss), atol=1e-5)
    assert len(gradients) == len(expected)
    for gradient, want in zip(gradients, expected, strict=True):
        np.testing.assert_allclose(
            ops.convert_to_numpy(gradient), ops.convert_to_numpy(want), atol=1e-5
        )


@pytest.mark.slow
def test_the_benchmark_writes_both_cases(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "keras_hub_long_context", ROOT / "benchmarks" / "keras_hub_long_context.py"
    )
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    benchmark.main(
        [
            "--backend",
            keras.backend.backend(),
            "--lengths",
            "512",
            "--steps",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    results = json.loads((tmp_path / "keras-hub-long-context.json").read_text())
    rows = results["backends"][keras.backend.backend()]
    assert [(row["case"], row["ok"]) for row in rows] == [
        ("keras_hub", True),
        ("ours", True),
    ]
    # The same model: the same losses, and a peak that was measured.
    np.testing.assert_allclose(rows[0]["losses"], rows[1]["losses"], atol=1e-5)
    assert all(row["peak_mb"] > row["before_mb"] > 0 for row in rows)
