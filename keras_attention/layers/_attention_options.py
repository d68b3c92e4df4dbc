"""The options of `MultiHeadAttention` beyond Keras' layer that pretrained
models' attention needs (Gemma's soft cap and scale, Qwen's projection
biases, Qwen 3's and Gemma 3's query/key normalization, Gemma 3n's and
Gemma 4's value normalization, a model's own rotary
embedding, Gemma's and Gemma 3n's kernel layouts, keras-hub's dropout on the
attention output, GPT-OSS's attention sinks, Qwen 3.5's output gate packed
in the query projection, Gemma 3n's cache layout, Gemma 4's values taken
from the key projection and its layers sharing another layer's keys and
values): their checks, their defaults and their config.

The layer arguments (`query_norm`, `key_norm`, `value_norm`,
`rotary_embedding`) are kept
out of Keras' attribute tracking until `build`, which tracks each right after
the projection it follows, so the weights keep the order of the models they
come from (query, its norm, key, its norm, value, its norm, output).
"""

import math

import keras
from keras import ops

from keras_attention._checks import check_positive_number, check_rate

KERNEL_LAYOUTS = ("input_first", "heads_first", "flat")
# The layouts of the decoding cache (`key_value_cache.CACHE_LAYOUTS`).
CACHE_LAYOUTS = ("stacked", "heads_first", "pair")

# The options with their defaults; the config lists those set otherwise.
DEFAULTS = {
    "scale": None,
    "soft_cap": None,
    "query_norm": None,
    "key_norm": None,
    "value_norm": None,
    "rotary_embedding": None,
    "output_dropout": 0.0,
    "use_output_bias": None,
    "kernel_layout": "input_first",
    "use_sinks": False,
    "packed_gate": False,
    "cache_layout": "stacked",
    "values_from_keys": False,
    "shares_keys_values": False,
}
LAYER_OPTIONS = ("query_norm", "key_norm", "value_norm", "rotary_embedding")


def options_from(arguments):
    """The options among a constructor's `arguments` (its `locals()`), by
    the names of `DEFAULTS`."""
    return {name: arguments[name] for name in DEFAULTS}


def check_options(options, attention_positions):
    """Raises a ValueError naming the option for a value it cannot take."""
    check_positive_number("scale", options["scale"], allow_none=True)
    check_positive_number("soft_cap", options["soft_cap"], allow_none=True)
    check_rate("output_dropout", options["output_dropout"])
    if options["kernel_layout"] not in KERNEL_LAYOUTS:
        raise ValueError(
            f"`kernel_layout` must be one of {KERNEL_LAYOUTS}; received "
            f"{options['kernel_layout']!r}."
        )
    if options["cache_layout"] not in CACHE_LAYOUTS:
        raise ValueError(
            f"`cache_layout` must be one of {CACHE_LAYOUTS}; received "
            f"{options['cache_layout']!r}."
        )
    for name in (
        "use_sinks",
        "packed_gate",
        "values_from_keys",
        "shares_keys_values",
    ):
        if options[name] not in (True, False):
            raise ValueError(
                f"`{name}` must be True or False; received {options[name]!r}."
            )
    if options["shares_keys_values"]:
        # A sharing layer projects no keys or values: these would be unused.
        unused = [
            name
            for name in ("key_norm", "value_norm", "values_from_keys")
            if options[name] not in (None, False)
        ]
        if unused:
            raise ValueError(
                "`shares_keys_values=True` builds no key or value projection "
                f"(the keys and values come normalized and rotated): "
                f"{', '.join(unused)} must be left unset."
            )
    if options["use_output_bias"] not in (None, True, False):
        raise ValueError(
            "`use_output_bias` must be None (as `use_bias`), True or False; "
            f"received {options['use_output_bias']!r}."
        )
    for name in LAYER_OPTIONS:
        value = options[name]
        if value is not None and not isinstance(value, keras.layers.Layer):
            raise ValueError(
                f"`{name}` must be a Keras layer (or None); received "
                f"{value!r} of type {type(value).__name__}."
            )
    if options["rotary_embedding"] is not None and attention_positions is not None:
        raise ValueError(
            "`rotary_embedding` is the layer's own rotary encoding: it "
            "replaces `attention_positions`, which must then be None; "
            f"received attention_positions={attention_positions!r}."
        )


def check_gate(options, use_gate):
    """Raises a ValueError for both gates: Keras' own projection
    (`use_gate`) and the one packed in the query's (`packed_gate`)."""
    if use_gate and options["packed_gate"]:
        raise ValueError(
            "`use_gate=True` (a gate projection of its own) and "
            "`packed_gate=True` (the gate packed in the query projection) "
            "exclude each other; received both."
        )


def split_packed_gate(projected, key_dim):
    """The query projection of a `packed_gate` layer, `(..., heads, key_dim
    + value_dim)`, as the queries `(..., heads, key_dim)` and the gate
    `sigmoid` of the rest, `(..., heads, value_dim)`."""
    return projected[..., :key_dim], ops.sigmoid(projected[..., key_dim:])


def deserialize_layers(config):
    """`config` with the layer options' configs turned into layers."""
    config = dict(config)
    for name in LAYER_OPTIONS:
        if isinstance(config.get(name), dict):
            config[name] = keras.saving.deserialize_keras_object(config[name])
    return config


def options_config(options):
    """The options set to other than their defaults, layers serialized."""
    config = {}
    for name, default in DEFAULTS.items():
        value = options[name]
        if value is default or value == default and name not in LAYER_OPTIONS:
            continue
        if name in LAYER_OPTIONS:
            value = keras.saving.serialize_keras_object(value)
        config[name] = value
    return config


def attention_scale(options, key_dim):
    """The scores' scale: the option, else `1 / sqrt(key_dim)`."""
    scale = options["scale"]
    return 1.0 / math.sqrt(key_dim) if scale is None else scale


def settle_head_size(layer, query_shape):
    """`key_dim` (and `value_dim`) left None: `dim / num_heads`, as keras-hub's
    models settle it when they see the input size."""
    if layer._key_dim is not None:
        return
    dim = query_shape[-1]
    if dim is None or dim % layer.num_heads:
        raise ValueError(
            "`key_dim=None` takes the head size as the query's last axis "
            f"divided by `num_heads`; received a last axis of {dim} and "
            f"num_heads={layer.num_heads}."
        )
    layer._key_dim = dim // layer.num_heads
    if layer._value_dim is None:
        layer._value_dim = layer._key_dim


def heads_first_equation(free_dims):
    """`(B, ..., dim)` -> `(B, ..., heads, size)` with a kernel `(heads, dim,
    size)` (Gemma's layout)."""
    free = "abcdefg"[:free_dims]
    return f"{free}m,nmh->{free}nh"
