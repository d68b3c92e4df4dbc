"""The config of the reference models: their constructor's arguments, kept as
attributes and written by `get_config` (`ConfigMixin`), the keras-hub
tokenizers among them saved inside the `.keras` file."""

import keras


class ConfigMixin:
    """The config bookkeeping of the reference models, `keras.Model`
    subclasses built in their constructor (functional, as keras-hub's
    backbones): a model's config is its constructor's arguments.

    Each class lists once, in `config_names`, the constructor arguments it
    adds to its bases' config, and in `serialized_config_names` those that
    hold Keras objects (keras-hub tokenizers, whose vocabularies are saved
    inside the `.keras` file). Its constructor passes its base's arguments on
    with `**Base.arguments_from(locals())` and keeps its own as attributes of
    the same names with `self.keep_config(Class, locals())`. `get_config`
    writes `name`, `trainable` and `dtype`, then the config of every class
    from the base down; `from_config` passes it back to the constructor, the
    tokenizers deserialized.

    Example:

    ```python
    class TextModel(ConfigMixin, keras.Model):
        config_names = ("vocabulary_size", "tokenizer")
        serialized_config_names = ("tokenizer",)

        def __init__(self, inputs, outputs, vocabulary_size, tokenizer=None,
                     **kwargs):
            super().__init__(inputs=inputs, outputs=outputs, **kwargs)
            self.keep_config(TextModel, locals())

    class TinyTransformer(TextModel):
        config_names = ("hidden_dim",)

        def __init__(self, vocabulary_size, hidden_dim=128, tokenizer=None,
                     dtype=None, **kwargs):
            ...  # the layers, and the functional graph from `inputs` to `logits`
            super().__init__(inputs, logits, **TextModel.arguments_from(locals()))
            self.keep_config(TinyTransformer, locals())
    ```
    """

    config_names = ()
    serialized_config_names = ()

    @classmethod
    def _gather(cls, attribute):
        """The names under `attribute` of every class from the base down."""
        return [
            name
            for klass in reversed(cls.__mro__)
            for name in vars(klass).get(attribute, ())
        ]

    @classmethod
    def arguments_from(cls, arguments):
        """The keyword arguments of `cls`'s constructor out of a subclass
        constructor's `arguments` (its `locals()`, which name `dtype` and
        `kwargs`): the config of `cls`, then `dtype` and the other keyword
        arguments (`name`, ...), which go on to `keras.Model`."""
        config = {name: arguments[name] for name in cls._gather("config_names")}
        return {**config, "dtype": arguments["dtype"], **arguments["kwargs"]}

    def keep_config(self, cls, arguments):
        """Keeps the config arguments that `cls` adds to its bases' (its own
        `config_names`) as attributes, out of `arguments` (`cls`'s
        constructor's `locals()`)."""
        for name in vars(cls)["config_names"]:
            setattr(self, name, arguments[name])

    def get_config(self):
        serialized = self._gather("serialized_config_names")
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }
        for name in self._gather("config_names"):
            value = getattr(self, name)
            config[name] = serialize_optional(value) if name in serialized else value
        return config

    @classmethod
    def from_config(cls, config):
        serialized = cls._gather("serialized_config_names")
        return cls(**deserialize_optional(config, serialized))


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
