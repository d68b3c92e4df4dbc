"""Llama (keras-hub's `LlamaBackbone`, `Llama3Backbone`) with our attention.

References:
    - [Touvron et al., 2023. LLaMA](https://arxiv.org/abs/2302.13971)
    - [Grattafiori et al., 2024. The Llama 3 Herd of Models](
      https://arxiv.org/abs/2407.21783)
"""

from keras_hub.src.models.llama import llama_decoder
from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding

from keras_attention.integrations.keras_hub.attention import KerasHubRotaryAttention
from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.swap import block_family


class LlamaAttention(KerasHubRotaryAttention):
    """keras-hub's `LlamaAttention` as our `GroupedQueryAttention`: no biases,
    the head size `dim / num_query_heads`, keras-hub's rotary embedding (with
    Llama 3.1's frequency adjustment), dropout on the attention output.

    Args:
        num_query_heads, num_key_value_heads, rope_max_wavelength,
        rope_position_scaling_factor, rope_frequency_adjustment_factor,
        rope_low_freq_factor, rope_high_freq_factor,
        rope_pretraining_sequence_length, kernel_initializer, dropout:
            keras-hub's `LlamaAttention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        rope_max_wavelength=10000,
        rope_position_scaling_factor=1.0,
        rope_frequency_adjustment_factor=None,
        rope_low_freq_factor=None,
        rope_high_freq_factor=None,
        rope_pretraining_sequence_length=None,
        kernel_initializer="glorot_uniform",
        dropout=0,
        **kwargs,
    ):
        rope = {
            "max_wavelength": rope_max_wavelength,
            "position_scaling_factor": rope_position_scaling_factor,
            "frequency_adjustment_factor": rope_frequency_adjustment_factor,
            "low_freq_factor": rope_low_freq_factor,
            "high_freq_factor": rope_high_freq_factor,
            "pretraining_sequence_length": rope_pretraining_sequence_length,
        }
        super().__init__(
            LlamaAttention.__init__,
            locals(),
            LlamaRotaryEmbedding(**rope, dtype=kwargs.get("dtype")),
            **kwargs,
        )


class LlamaTransformerDecoder(HandsMaskParts, llama_decoder.LlamaTransformerDecoder):
    """keras-hub's Llama block, handing its attention the mask's parts."""


FAMILIES = (
    block_family(
        "Llama",
        "keras_hub.src.models.llama.llama_backbone:LlamaBackbone",
        LlamaTransformerDecoder,
        {"LlamaAttention": LlamaAttention},
    ),
)
