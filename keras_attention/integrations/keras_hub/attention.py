"""`KerasHubAttention`, our grouped-query attention with the call of
keras-hub's decoder attention layers, which the families' adapters subclass
with each keras-hub layer's constructor, and `KerasHubRotaryAttention`, its
subclass for the families whose attention differs in its rotary embedding
and a few options only (Llama, Mistral, Mixtral, Phi-3, Qwen); and the
helpers the adapters share."""

import inspect

import keras
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding

from keras_attention.integrations.keras_hub.masks import attention_call_arguments
from keras_attention.layers.grouped_query_attention import GroupedQueryAttention
from keras_attention.layers.multi_head_attention import MultiHeadAttention

# Our projections' names -> keras-hub's in the layers it ports from Hugging
# Face's (SmolLM 3, Gemma 3n, DINOv3).
PROJ_NAMES = {
    "query": "q_proj",
    "key": "k_proj",
    "value": "v_proj",
    "attention_output": "o_proj",
}


def ported_arguments(num_attention_heads, num_key_value_heads, attention_bias):
    """Our `GroupedQueryAttention`'s arguments for keras-hub's attention
    layers ported from Hugging Face's (SmolLM 3, Gemma 3n): the heads and the
    bias flag under Hugging Face's names, `Dense` projections
    (`kernel_layout="flat"`)."""
    return {
        "num_query_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "use_bias": attention_bias,
        "kernel_layout": "flat",
    }


def our_attention(keras_layer, options, attention_class=MultiHeadAttention):
    """Our attention (`attention_class`, a `MultiHeadAttention`) of the
    config (name and dtype policy included) of an unbuilt
    `keras.layers.MultiHeadAttention`, with `options` (`swap_attention`'s)
    added."""
    config = keras_layer.get_config()
    config["dtype"] = keras_layer.dtype_policy  # the policy, not its config
    return attention_class(**{**config, **options})


def initializer_config(initializer):
    """An initializer argument as keras-hub's layers keep it in their config:
    serialized, whether it came as a name, a config or an object."""
    return keras.initializers.serialize(keras.initializers.get(initializer))


def query_key_norms(norm_class, names=("query_norm", "key_norm"), **arguments):
    """Our layer's `query_norm` and `key_norm` arguments: keras-hub's norm
    layers `norm_class(**arguments)`, named `names`."""
    query_name, key_name = names
    return {
        "query_norm": norm_class(name=query_name, **arguments),
        "key_norm": norm_class(name=key_name, **arguments),
    }


def keras_hub_arguments(constructor, arguments):
    """A keras-hub layer's config, out of the arguments that its adapter's
    constructor took (whose named parameters are keras-hub's).

    Args:
        constructor: the adapter's `__init__`.
        arguments: that constructor's `locals()`.

    Returns:
        `{name: value}` of the constructor's named parameters (`self` and
        `**kwargs` aside) in their order, the initializers serialized as
        keras-hub keeps them (`initializer_config`).
    """
    config = {}
    for name, parameter in list(inspect.signature(constructor).parameters.items())[1:]:
        if parameter.kind is parameter.VAR_KEYWORD:
            continue
        value = arguments[name]
        config[name] = (
            initializer_config(value) if name.endswith("_initializer") else value
        )
    return config


class KerasHubAttention(GroupedQueryAttention):
    """Our `GroupedQueryAttention` called as keras-hub's decoder attention
    layers are: `layer(hidden_states, attention_mask=None, cache=None,
    cache_update_index=None, training=None)`, self-attention over
    `hidden_states`, returning the output, or `(output, cache)` with a cache.

    `attention_mask` is a `masks.DecoderMask` from a swapped block (the
    causal mask, the padding and a caller's mask as such, so that the
    chunked path skips tiles and the fused kernels apply) or keras-hub's
    dense `(B, T, S)` mask. `positions`, where given, are the rotary
    layer's (`MultiHeadAttention`'s call argument; Qwen 3.5's `(B, 4, T)`).
    Subclasses take a keras-hub layer's constructor
    arguments, keep them in `keras_hub_config` (the config, with the options
    of ours given through `swap_attention`) and pass ours on. Their
    `**kwargs` are our options, as `swap_attention` gives them:
    `GroupedQueryAttention`'s other arguments (`chunk_size`,
    `flash_attention`, `cache_dtype` where the family's task decodes with
    our int8 cache, ...) and the base layer's.

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
        positions=None,
    ):
        return super().call(
            hidden_states,
            hidden_states,
            cache=cache,
            cache_update_index=cache_update_index,
            training=training,
            positions=positions,
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


class KerasHubRotaryAttention(KerasHubAttention):
    """The attention of keras-hub's Llama, Mistral, Mixtral, Phi-3 and Qwen
    as our `GroupedQueryAttention`: the rotary embedding on the queries and
    keys, dropout on the attention output, no biases unless asked for.

    A subclass's constructor takes the keras-hub layer's arguments (among
    them `num_query_heads`, `num_key_value_heads`, `kernel_initializer` and
    `dropout`) and hands them on as its `locals()`, which this keeps as
    `keras_hub_config` (`keras_hub_arguments`) and reads our layer's
    arguments from.

    Args:
        constructor: the subclass's `__init__`, whose named parameters are
            the keras-hub layer's.
        arguments: that constructor's `locals()`.
        rotary_embedding: the family's rotary embedding layer; default
            keras-hub's `RotaryEmbedding` of the arguments'
            `rope_max_wavelength` and `rope_scaling_factor`.
        head_dim: the head size; default `dim / num_query_heads`.
        use_bias: biases on the projections.
        **kwargs: more of `GroupedQueryAttention`'s arguments
            (`sliding_window`, `query_norm`, `chunk_size`, ...) and the base
            layer's.
    """

    def __init__(
        self,
        constructor,
        arguments,
        rotary_embedding=None,
        head_dim=None,
        use_bias=False,
        **kwargs,
    ):
        if rotary_embedding is None:
            rotary_embedding = RotaryEmbedding(
                max_wavelength=arguments["rope_max_wavelength"],
                scaling_factor=arguments["rope_scaling_factor"],
                dtype=kwargs.get("dtype"),
            )
        super().__init__(
            keras_hub_arguments(constructor, arguments),
            head_dim=head_dim,
            num_query_heads=arguments["num_query_heads"],
            num_key_value_heads=arguments["num_key_value_heads"],
            use_bias=use_bias,
            output_dropout=arguments["dropout"],
            kernel_initializer=arguments["kernel_initializer"],
            rotary_embedding=rotary_embedding,
            **kwargs,
        )
