"""A `.keras` file is data, not code: our layers and models serialize to
configs that name only Keras and keras_attention classes (no Lambda, no
pickle), and a file tampered with to run code is refused with safe mode on."""

import json
import zipfile

import keras
import numpy as np
import pytest

from tests.models import model_cases

MODELS = {
    "transformer": model_cases.tiny_transformer,
    "gpt": model_cases.tiny_gpt,
    "lstm_language_model": model_cases.tiny_lstm_lm,
    "rnn_seq2seq": model_cases.tiny_rnn_seq2seq,
    "transformer_classifier": model_cases.transformer_classifier,
    "hierarchical_attention_network": model_cases.han,
    "show_attend_tell": model_cases.captioner,
    "sagan": model_cases.tiny_sagan,
}
TRUSTED_MODULES = ("keras", "keras_attention", "keras_hub")


def walk(config):
    """Every dict inside a config."""
    if isinstance(config, dict):
        yield config
        for value in config.values():
            yield from walk(value)
    elif isinstance(config, list):
        for value in config:
            yield from walk(value)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_saved_models_hold_only_configs_and_weights(name, tmp_path):
    model = MODELS[name]()
    path = tmp_path / "model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        config = json.loads(archive.read("config.json"))
    assert names <= {"config.json", "metadata.json", "model.weights.h5"} | {
        n
        for n in names
        if n.startswith("assets/") and not n.endswith((".pkl", ".pickle"))
    }
    for entry in walk(config):
        assert entry.get("class_name") not in ("Lambda", "__lambda__", "function"), (
            entry
        )
        module = entry.get("module")
        if module is not None:
            assert module.split(".")[0] in TRUSTED_MODULES, entry
    keras.saving.load_model(path, safe_mode=True)


def tampered(tmp_path, edit):
    """A saved model whose config `edit` changed, as an attacker would."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    path = tmp_path / "model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        files = {n: archive.read(n) for n in archive.namelist()}
    config = json.loads(files["config.json"])
    edit(config["config"]["layers"][-1])
    files["config.json"] = json.dumps(config).encode()
    bad = tmp_path / "tampered.keras"
    with zipfile.ZipFile(bad, "w") as archive:
        for n, data in files.items():
            archive.writestr(n, data)
    return bad


def test_a_config_that_calls_a_python_function_is_refused(tmp_path):
    marker = tmp_path / "executed"

    def call_os_system(layer):
        layer["config"]["activation"] = {
            "module": "os",
            "class_name": "function",
            "config": "system",
            "registered_name": "system",
        }

    path = tampered(tmp_path, call_os_system)
    with pytest.raises((ValueError, TypeError)):
        model = keras.saving.load_model(path, safe_mode=True)
        model.predict(np.ones((1, 3)), verbose=0)
    assert not marker.exists()


def touch_marker(x):
    """What an attacker's Lambda would do: write a file when it runs."""
    import os

    open(os.environ["KERAS_ATTENTION_MARKER"], "w").close()
    return x


def test_a_lambda_layer_is_refused_in_safe_mode(tmp_path, monkeypatch):
    marker = tmp_path / "executed"
    monkeypatch.setenv("KERAS_ATTENTION_MARKER", str(marker))
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Lambda(lambda x: touch_marker(x))]
    )
    path = tmp_path / "lambda.keras"
    model.save(path)
    marker.unlink()  # building the model ran the function once
    with pytest.raises(ValueError, match="safe_mode"):
        keras.saving.load_model(path, safe_mode=True)
    assert not marker.exists()
