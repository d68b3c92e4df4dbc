"""SmolLM 3 (keras-hub's `SmolLM3Backbone`) with our attention.

keras-hub's `SmolLM3Attention` projects the queries, keys and values with
`Dense` layers (`q_proj`, `k_proj`, `v_proj`, biases per
`attention_bias`), their kernels `(dim, heads * head_dim)`, and the output
with an `EinsumDense` (`o_proj`, no bias). Its rotary embedding
(`rotary_emb`, with the inverse frequencies as a weight) rotates the queries
and keys of the layers `rope_layer_enabled_list` enables; the others (NoPE,
every 4th layer in SmolLM 3's checkpoints) have no positions at all, though
they keep the embedding's weight. The adapter builds our layer with those
names, kernel shapes (`kernel_layout="flat"`: `Dense` projections) and
weights, in keras-hub's order, and gives the NoPE
layers no rotary encoding. keras-hub applies no dropout
(`attention_dropout` is kept in the config only), nor does the adapter.

References:
    - [Hugging Face, 2025. SmolLM3: smol, multilingual, long-context
      reasoner](https://huggingface.co/blog/smollm3)
"""

from keras import ops
from keras_hub.src.models.smollm3 import smollm3_layers, smollm3_utils

from keras_attention.integrations.keras_hub.attention import (
    PROJ_NAMES,
    KerasHubAttention,
    keras_hub_arguments,
    ported_arguments,
)
from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.swap import block_family
from keras_attention.layers._projections import projection_equation
from keras_attention.utils import keras_internals


class SmolLM3RotaryEmbedding(smollm3_layers.SmolLM3RotaryEmbedding):
    """keras-hub's SmolLM 3 rotary embedding (the same `inv_freq` weight),
    called as our attention calls a rotary layer: on the projected queries
    or keys `(B, T, heads, head_dim)`, from `start_index` or at `positions`
    `(B, T)`, returning them rotated as keras-hub's `apply_rotary_pos_emb`
    does (the cosines and sines in float32, cast to the inputs' dtype)."""

    def call(self, x, start_index=0, positions=None):
        if positions is None:
            length = ops.shape(x)[1]
            positions = ops.arange(length, dtype="float32")
            positions = positions + ops.cast(start_index, "float32")
            positions = positions[None, :]
        positions = ops.cast(positions, "float32")
        inv_freq = ops.cast(self.inv_freq, "float32")
        freqs = positions[..., None] * inv_freq
        emb = ops.concatenate((freqs, freqs), axis=-1)
        cos = ops.cast(ops.cos(emb) * self.attention_scaling, x.dtype)
        sin = ops.cast(ops.sin(emb) * self.attention_scaling, x.dtype)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        return x * cos + smollm3_utils.rotate_half(x) * sin


class SmolLM3Attention(KerasHubAttention):
    """keras-hub's `SmolLM3Attention` as our `GroupedQueryAttention`: the
    `Dense` projections `q_proj`, `k_proj`, `v_proj` (biases per
    `attention_bias`) and `o_proj` (no bias), keras-hub's rotary embedding
    on the layers `rope_layer_enabled_list` enables (a layer index past the
    list's end is enabled, as in keras-hub) and none on the others (NoPE),
    the head size `hidden_size / num_attention_heads`, no dropout.

    keras-hub's block calls it with `self_attention_cache` and
    `self_attention_cache_update_index`, and builds it with the list
    `[hidden_states_shape, rotary_shapes, mask_shape]`; the other keyword
    arguments the block passes on (its backbone's `name`, `dtype`, ...) are
    ignored, as keras-hub's layer ignores them.

    Args:
        hidden_size, num_attention_heads, num_key_value_heads,
        attention_bias, attention_dropout, rope_layer_enabled_list,
        layer_types, layer_idx, max_position_embeddings, rope_theta,
        partial_rotary_factor: keras-hub's `SmolLM3Attention`'s
            (`attention_dropout` unused, as in keras-hub).
        **kwargs: our options (see `KerasHubAttention`).
    """

    _projection_names = PROJ_NAMES

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        num_key_value_heads,
        attention_bias,
        attention_dropout,
        rope_layer_enabled_list,
        layer_types,
        layer_idx,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        partial_rotary_factor=1.0,
        **kwargs,
    ):
        config = keras_hub_arguments(SmolLM3Attention.__init__, locals())
        use_rope = (
            rope_layer_enabled_list[layer_idx]
            if layer_idx < len(rope_layer_enabled_list)
            else True
        )
        # keras-hub's layer keeps the embedding (its `inv_freq`) on the NoPE
        # layers too: ours does, and rotates with it on the others only.
        rotary = SmolLM3RotaryEmbedding(
            hidden_size=hidden_size,
            num_attention_heads=num_attention_heads,
            max_position_embeddings=max_position_embeddings,
            rope_theta=rope_theta,
            partial_rotary_factor=partial_rotary_factor,
            name="rotary_emb",
            dtype=kwargs.get("dtype"),
        )
        super().__init__(
            config,
            **ported_arguments(
                num_attention_heads, num_key_value_heads, attention_bias
            ),
            head_dim=hidden_size // num_attention_heads,
            use_output_bias=False,
            rotary_embedding=rotary if use_rope else None,
            **kwargs,
        )
        self.use_rope = use_rope
        self.__dict__["_unused_rotary"] = None if use_rope else rotary

    def build(self, inputs_shape, value_shape=None, key_shape=None):
        if inputs_shape and isinstance(inputs_shape[0], (list, tuple)):
            # keras-hub's block: [hidden_states, rotary, mask] shapes.
            inputs_shape = tuple(inputs_shape[0])
        super().build(inputs_shape, value_shape, key_shape)
        if not self.use_rope:
            # Tracked (its weight in keras-hub's place) but never applied.
            self.rotary_embedding = self._unused_rotary
        if not self.rotary_embedding.built:
            # Its weight is made: built, so that `quantize` passes it.
            heads, size = self.num_heads, self.key_dim
            self.rotary_embedding.build((*inputs_shape[:-1], heads, size))

    def _output_projection(self, input_shape, output_dims, use_bias):
        # keras-hub's `o_proj` is an `EinsumDense` of kernel `(heads,
        # head_dim, dim)`, where the query, key and value ones are flat.
        dense = self._dense(
            projection_equation(len(input_shape) - 2, 2, 1),
            output_dims,
            "attention_output",
            use_bias=use_bias,
        )
        dense.build(input_shape)
        return dense

    def _dense(self, equation, output_dims, name, activation=None, use_bias=None):
        dense = super()._dense(equation, output_dims, name, activation, use_bias)
        if name == "attention_output":
            # keras-hub builds `o_proj` in the attention's constructor,
            # outside any name scope: its kernel's path is `o_proj/kernel`.
            keras_internals.place_at_top_level(dense)
        return dense

    def call(
        self,
        hidden_states,
        training=None,
        attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        **kwargs,
    ):
        # keras-hub's backbone hands its blocks its own constructor's
        # keyword arguments (`name`, `dtype`, ...), which they pass on.
        return super().call(
            hidden_states,
            attention_mask=attention_mask,
            cache=self_attention_cache,
            cache_update_index=self_attention_cache_update_index,
            training=training,
        )

    def compute_output_spec(self, hidden_states, self_attention_cache=None, **kwargs):
        return super().compute_output_spec(hidden_states, cache=self_attention_cache)


class SmolLM3DecoderLayer(HandsMaskParts, smollm3_layers.SmolLM3DecoderLayer):
    """keras-hub's SmolLM 3 block, handing its attention the mask's parts."""


FAMILIES = (
    block_family(
        "SmolLM 3",
        "keras_hub.src.models.smollm3.smollm3_backbone:SmolLM3Backbone",
        SmolLM3DecoderLayer,
        {"SmolLM3Attention": SmolLM3Attention},
    ),
)
