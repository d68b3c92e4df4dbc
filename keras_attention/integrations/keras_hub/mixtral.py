"""Mixtral (keras-hub's `MixtralBackbone`) with our attention.

Mixtral's attention is Mistral's (grouped-query, rotary, the causal sliding
window, no biases); its sparse mixture-of-experts feed-forward is keras-hub's,
untouched, and keeps reading the padding mask.

References:
    - [Jiang et al., 2024. Mixtral of Experts](https://arxiv.org/abs/2401.04088)
    - [Jiang et al., 2023. Mistral 7B](https://arxiv.org/abs/2310.06825)
"""

from keras_hub.src.models.mixtral import mixtral_decoder

from keras_attention.integrations.keras_hub.attention import (
    KerasHubAttention,
    initializer_config,
)
from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.mistral import (
    sliding_window_attention_arguments,
)
from keras_attention.integrations.keras_hub.swap import Family


class MixtralAttention(KerasHubAttention):
    """keras-hub's `CachedMixtralAttention` as our `GroupedQueryAttention`:
    no biases, the head size `dim / num_query_heads`, keras-hub's rotary
    embedding, the causal sliding window, dropout on the attention output.

    Args:
        num_query_heads, num_key_value_heads, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, sliding_window, dropout:
            keras-hub's `CachedMixtralAttention`'s; `sliding_window` (None:
            no window) keeps a query to the `sliding_window` most recent
            keys, itself included.
        **kwargs: `GroupedQueryAttention`'s other arguments (`chunk_size`,
            `flash_attention`, `cache_dtype`, ...) and the base layer's.
    """

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        rope_max_wavelength=10000,
        rope_scaling_factor=1.0,
        kernel_initializer="glorot_uniform",
        sliding_window=512,
        dropout=0,
        **kwargs,
    ):
        super().__init__(
            {
                "num_query_heads": num_query_heads,
                "num_key_value_heads": num_key_value_heads,
                "rope_max_wavelength": rope_max_wavelength,
                "rope_scaling_factor": rope_scaling_factor,
                "kernel_initializer": initializer_config(kernel_initializer),
                "sliding_window": sliding_window,
                "dropout": dropout,
            },
            **sliding_window_attention_arguments(
                num_query_heads,
                num_key_value_heads,
                rope_max_wavelength,
                rope_scaling_factor,
                kernel_initializer,
                sliding_window,
                dropout,
                None,
                kwargs.get("dtype"),
            ),
            **kwargs,
        )


class MixtralTransformerDecoder(
    HandsMaskParts, mixtral_decoder.MixtralTransformerDecoder
):
    """keras-hub's Mixtral block, handing its attention the mask's parts (the
    window is the attention's own)."""


FAMILIES = (
    Family(
        name="Mixtral",
        backbones=("keras_hub.src.models.mixtral.mixtral_backbone:MixtralBackbone",),
        replacements={
            "keras_hub.src.models.mixtral.mixtral_decoder:CachedMixtralAttention": (
                MixtralAttention
            ),
            "keras_hub.src.models.mixtral.mixtral_backbone:"
            "MixtralTransformerDecoder": MixtralTransformerDecoder,
        },
    ),
)
