"""Mistral (keras-hub's `MistralBackbone`) with our attention.

keras-hub's Mistral block restricts each query to the `sliding_window` most
recent keys (itself included) by a banded dense mask, `i - w < j <= i`. Our
attention's `sliding_window=w` is the symmetric band `|i - j| < w`, which
with the causal mask is the same band; the swapped block hands the attention
the causal mask and the padding as such (`masks.DecoderMask`) and the
attention applies the window itself (from the cache update index while
decoding), so the chunked path skips the tiles outside the band.

References:
    - [Jiang et al., 2023. Mistral 7B](https://arxiv.org/abs/2310.06825)
"""

from keras_hub.src.models.mistral import mistral_transformer_decoder

from keras_attention.integrations.keras_hub.attention import KerasHubRotaryAttention
from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.swap import block_family


class MistralAttention(KerasHubRotaryAttention):
    """keras-hub's `CachedMistralAttention` as our `GroupedQueryAttention`:
    no biases, the head size `head_dim` (else `dim / num_query_heads`),
    keras-hub's rotary embedding, the causal sliding window, dropout on the
    attention output.

    Args:
        num_query_heads, num_key_value_heads, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, sliding_window, dropout,
        head_dim: keras-hub's `CachedMistralAttention`'s; `sliding_window`
            (None: no window) keeps a query to the `sliding_window` most
            recent keys, itself included.
        **kwargs: our options (see `KerasHubAttention`).
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
        head_dim=None,
        **kwargs,
    ):
        super().__init__(
            MistralAttention.__init__,
            locals(),
            head_dim=head_dim,
            sliding_window=sliding_window,
            **kwargs,
        )


class MistralTransformerDecoder(
    HandsMaskParts, mistral_transformer_decoder.MistralTransformerDecoder
):
    """keras-hub's Mistral block, handing its attention the mask's parts (the
    window is the attention's own)."""


FAMILIES = (
    block_family(
        "Mistral",
        "keras_hub.src.models.mistral.mistral_backbone:MistralBackbone",
        MistralTransformerDecoder,
        {"CachedMistralAttention": MistralAttention},
    ),
)
