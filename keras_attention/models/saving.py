"""Config helpers for the models that carry keras-hub tokenizers, whose
vocabularies are saved inside the `.keras` file."""

import keras


def serialize_optional(layer):
    """The serialized layer, or None."""
    return None if layer is None else keras.saving.serialize_keras_object(layer)


def deserialize_optional(config, names):
    """A copy of `config` with the layers under `names` deserialized (those
    that are not None)."""
    config = dict(config)
    for name in names:
        if config.get(name) is not None:
            config[name] = keras.saving.deserialize_keras_object(config[name])
    return config
