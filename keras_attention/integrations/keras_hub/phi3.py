"""Phi-3 (keras-hub's `Phi3Backbone`) with our attention.

keras-hub's Phi-3 attention has separate query, key and value projections
without biases (the checkpoints' fused `qkv_proj` is split when converted)
and either the plain rotary embedding or Phi-3's "su" scaled one (LongRoPE's
per-frequency factors, the short or the long set by the last position, and
a magnitude factor), which our attention calls as keras-hub does: on the
new queries and keys from the cache update index.

References:
    - [Abdin et al., 2024. Phi-3 Technical Report](
      https://arxiv.org/abs/2404.14219)
    - [Ding et al., 2024. LongRoPE: Extending LLM Context Window Beyond 2
      Million Tokens](https://arxiv.org/abs/2402.13753)
"""

from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.phi3 import phi3_decoder
from keras_hub.src.models.phi3.phi3_rotary_embedding import (
    Phi3SuScaledRotaryEmbedding,
)

from keras_attention.integrations.keras_hub.attention import KerasHubRotaryAttention
from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.swap import block_family


class Phi3Attention(KerasHubRotaryAttention):
    """keras-hub's `Phi3Attention` as our `GroupedQueryAttention`: no biases,
    the head size `dim / num_query_heads`, keras-hub's rotary embedding (its
    `Phi3SuScaledRotaryEmbedding` for `rope_scaling_type="su"`), dropout on
    the attention output.

    Args:
        num_query_heads, num_key_value_heads, kernel_initializer, dropout,
        max_sequence_length, pretraining_sequence_length,
        rope_max_wavelength, rope_scaling_type, rope_scaling_short_factor,
        rope_scaling_long_factor: keras-hub's `Phi3Attention`'s; the scaling
            factors are lists of `head_dim / 2` floats.
        **kwargs: our options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        kernel_initializer="glorot_uniform",
        dropout=0,
        max_sequence_length=4096,
        pretraining_sequence_length=4096,
        rope_max_wavelength=10000,
        rope_scaling_type=None,
        rope_scaling_short_factor=None,
        rope_scaling_long_factor=None,
        **kwargs,
    ):
        if rope_scaling_type is None:
            rotary = RotaryEmbedding(
                max_wavelength=rope_max_wavelength, dtype=kwargs.get("dtype")
            )
        elif rope_scaling_type == "su":
            rotary = Phi3SuScaledRotaryEmbedding(
                inverese_freq_short_factor=rope_scaling_short_factor,
                inverese_freq_long_factor=rope_scaling_long_factor,
                max_sequence_length=max_sequence_length,
                pretraining_sequence_length=pretraining_sequence_length,
                max_wavelength=rope_max_wavelength,
                dtype=kwargs.get("dtype"),
            )
        else:
            raise ValueError(
                "`rope_scaling_type` must be None (keras-hub's "
                '`RotaryEmbedding`) or "su" (`Phi3SuScaledRotaryEmbedding`); '
                f"received {rope_scaling_type!r}."
            )
        super().__init__(Phi3Attention.__init__, locals(), rotary, **kwargs)

    def build(self, inputs_shape, value_shape=None, key_shape=None):
        config = self.keras_hub_config
        if config["rope_scaling_type"] == "su":
            half_head_dim = inputs_shape[-1] // config["num_query_heads"] // 2
            for name in ("rope_scaling_short_factor", "rope_scaling_long_factor"):
                if len(config[name]) != half_head_dim:
                    raise ValueError(
                        f"`{name}` must be of length "
                        "`hidden_dim // num_query_heads // 2` "
                        f"({half_head_dim}); received {len(config[name])} "
                        "factors."
                    )
        super().build(inputs_shape, value_shape, key_shape)


class Phi3Decoder(HandsMaskParts, phi3_decoder.Phi3Decoder):
    """keras-hub's Phi-3 block, handing its attention the mask's parts."""


FAMILIES = (
    block_family(
        "Phi-3",
        "keras_hub.src.models.phi3.phi3_backbone:Phi3Backbone",
        Phi3Decoder,
        {"Phi3Attention": Phi3Attention},
    ),
)
