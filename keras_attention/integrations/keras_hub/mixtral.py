"""Mixtral (keras-hub's `MixtralBackbone`) with our attention.

Mixtral's attention is Mistral's (grouped-query, rotary, the causal sliding
window, no biases); its sparse mixture-of-experts feed-forward is keras-hub's,
untouched, and keeps reading the padding mask.

References:
    - [Jiang et al., 2024. Mixtral of Experts](https://arxiv.org/abs/2401.04088)
    - [Jiang et al., 2023. Mistral 7B](https://arxiv.org/abs/2310.06825)
"""

from keras_hub.src.models.mixtral import mixtral_decoder

from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.mistral import MistralAttention
from keras_attention.integrations.keras_hub.swap import block_family


class MixtralAttention(MistralAttention):
    """keras-hub's `CachedMixtralAttention` as our `GroupedQueryAttention`:
    Mistral's attention (`MistralAttention`: no biases, keras-hub's rotary
    embedding, the causal sliding window, dropout on the attention output)
    without its `head_dim` argument, the head size `dim / num_query_heads`.

    Args:
        num_query_heads, num_key_value_heads, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, sliding_window, dropout:
            keras-hub's `CachedMixtralAttention`'s; `sliding_window` (None:
            no window) keeps a query to the `sliding_window` most recent
            keys, itself included.
        **kwargs: our options (see `KerasHubAttention`).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # keras-hub's Mixtral attention has no `head_dim`: neither have its
        # arguments nor its config.
        if self.keras_hub_config.pop("head_dim") is not None:
            raise TypeError(
                "keras-hub's `CachedMixtralAttention` takes no `head_dim` (its "
                "head size is `hidden_dim / num_query_heads`)."
            )


class MixtralTransformerDecoder(
    HandsMaskParts, mixtral_decoder.MixtralTransformerDecoder
):
    """keras-hub's Mixtral block, handing its attention the mask's parts (the
    window is the attention's own)."""


FAMILIES = (
    block_family(
        "Mixtral",
        "keras_hub.src.models.mixtral.mixtral_backbone:MixtralBackbone",
        MixtralTransformerDecoder,
        {"CachedMixtralAttention": MixtralAttention},
    ),
)
