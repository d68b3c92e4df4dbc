"""`MultiHeadAttention.from_keras` and `load_keras_weights`: a layer of this
package from a built `keras.layers.MultiHeadAttention` or
`keras.layers.GroupQueryAttention`, its config and weights.

`KerasConversion` holds the two methods of the layer; `attention_sizes` reads
the sizes both kinds of layer agree on from their configs."""


class KerasConversion:
    """`load_keras_weights` and `from_keras` of `MultiHeadAttention` (see the
    module)."""

    def load_keras_weights(self, keras_layer):
        """Copies the weights of a built `keras.layers.MultiHeadAttention` or
        `keras.layers.GroupQueryAttention`.

        The two layers must agree on the heads, head sizes, use_bias and
        use_gate; this layer is built to the Keras layer's input sizes if
        needed.
        """
        if not keras_layer.built:
            raise ValueError(
                f"The Keras {type(keras_layer).__name__} must be built first."
            )
        theirs, ours = attention_sizes(keras_layer), attention_sizes(self)
        for name, value in ours.items():
            if theirs[name] != value:
                raise ValueError(
                    f"Cannot load weights: the Keras layer has {name}="
                    f"{theirs[name]}, this layer has {name}={value}."
                )
        if not self.built:
            self.build(**keras_layer.get_build_config()["shapes_dict"])
        self.set_weights(keras_layer.get_weights())
        return self

    @classmethod
    def from_keras(cls, keras_layer, **kwargs):
        """A new layer with the config and weights of a Keras
        `MultiHeadAttention` (or, for `GroupedQueryAttention`, a Keras
        `GroupQueryAttention`), its dtype policy and trainability included."""
        config = keras_layer.get_config()
        config.pop("name", None)
        # The policy object itself: its config is a dict on some releases.
        config["dtype"] = keras_layer.dtype_policy
        config.update(kwargs)
        layer = cls(**config).load_keras_weights(keras_layer)
        layer.trainable = keras_layer.trainable
        return layer


def attention_sizes(layer):
    """Heads, head sizes and options of a multi-head or grouped-query
    attention layer, ours or Keras', under one set of names (from its
    config)."""
    config = layer.get_config()
    heads = config.get("num_query_heads", config.get("num_heads"))
    key_dim = config.get("head_dim", config.get("key_dim"))
    return {
        "num_heads": heads,
        "num_key_value_heads": config.get("num_key_value_heads") or heads,
        "key_dim": key_dim,
        "value_dim": config.get("value_dim") or key_dim,
        "use_bias": config["use_bias"],
        "use_gate": config.get("use_gate", False),
    }
