"""`KerasHubAttention`, our grouped-query attention with the call of
keras-hub's decoder attention layers, which the families' adapters subclass
with each keras-hub layer's constructor."""

import keras

from keras_attention.integrations.keras_hub.masks import attention_call_arguments
from keras_attention.layers.grouped_query_attention import GroupedQueryAttention


def initializer_config(initializer):
    """An initializer argument as keras-hub's layers keep it in their config:
    serialized, whether it came as a name, a config or an object."""
    return keras.initializers.serialize(keras.initializers.get(initializer))


class KerasHubAttention(GroupedQueryAttention):
    """Our `GroupedQueryAttention` called as keras-hub's decoder attention
    layers are: `layer(hidden_states, attention_mask=None, cache=None,
    cache_update_index=None, training=None)`, self-attention over
    `hidden_states`, returning the output, or `(output, cache)` with a cache.

    `attention_mask` is a `masks.DecoderMask` from a swapped block (the
    causal mask, the padding and a caller's mask as such, so that the
    chunked path skips tiles and the fused kernels apply) or keras-hub's
    dense `(B, T, S)` mask. Subclasses take a keras-hub layer's constructor
    arguments, keep them in `keras_hub_config` (the config, with the options
    of ours given through `swap_attention`) and pass ours on.

    Args:
        keras_hub_config: the keras-hub layer's constructor arguments.
        **kwargs: `GroupedQueryAttention`'s arguments.
    """

    # `swap_attention`'s options (chunk_size, cache_dtype, ...) reach it.
    takes_attention_options = True

    def __init__(self, keras_hub_config, packed=False, **kwargs):
        super().__init__(**kwargs)
        self.keras_hub_config = keras_hub_config
        self.packed = packed

    def build(self, inputs_shape, value_shape=None, key_shape=None):
        super().build(inputs_shape, value_shape or inputs_shape, key_shape)

    def call(
        self,
        hidden_states,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        return super().call(
            hidden_states,
            hidden_states,
            cache=cache,
            cache_update_index=cache_update_index,
            training=training,
            **attention_call_arguments(
                attention_mask, hidden_states, cache, self.packed
            ),
        )

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def compute_output_spec(self, hidden_states, cache=None, **kwargs):
        return super().compute_output_spec(hidden_states, hidden_states, cache=cache)

    def get_config(self):
        config = keras.layers.Layer.get_config(self)
        config.update(self.keras_hub_config)
        if self.packed:
            config["packed"] = True
        return config
