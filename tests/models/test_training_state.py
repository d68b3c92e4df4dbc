"""The reference models trace their first training step once on TensorFlow
(`keras_internals.BuildsTrainingStateFirst`, whose behaviour
tests/utils/test_keras_internals.py tests; the pretraining model's check is in
tests/tasks/test_pretrain.py)."""

import inspect

import keras
import pytest

from keras_attention import models
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst

# SAGAN builds its two optimizers in its own `compile`.
OWN_TRAINING = {"SAGAN"}
MODELS = sorted(
    (name, cls)
    for name, cls in vars(models).items()
    if inspect.isclass(cls) and issubclass(cls, keras.Model)
)


def test_the_models_are_found():
    assert {"Transformer", "GPT", "ShowAttendTell", "SAGAN"} <= {n for n, _ in MODELS}


@pytest.mark.parametrize("name, cls", MODELS, ids=[name for name, _ in MODELS])
def test_every_model_builds_its_training_state_first(name, cls):
    assert issubclass(cls, BuildsTrainingStateFirst) == (name not in OWN_TRAINING)
