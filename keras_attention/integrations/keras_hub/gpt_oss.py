"""GPT-OSS (keras-hub's `GptOssBackbone`) with our attention.

keras-hub's `GptOssAttention` adds its learned sinks as one more logit column
and computes the dense `(B, N, T, S + 1)` scores on every backend. Ours
computes the sinks from the log-sum-exp (`ops.sinks`), on the chunked path
and the fused kernels too, so GPT-OSS trains and decodes memory-efficiently.

keras-hub's window keeps the keys `q - w <= j <= q`: `w + 1` keys, where the
model card and Hugging Face's implementation keep `w`. The adapter matches
keras-hub by default (`sliding_window_keys="keras_hub"`) and takes the
paper's with `sliding_window_keys="paper"`.

References:
    - [OpenAI, 2025. gpt-oss-120b & gpt-oss-20b Model Card](
      https://arxiv.org/abs/2508.10925)
    - [Xiao et al., 2023. Efficient Streaming Language Models with Attention
      Sinks](https://arxiv.org/abs/2309.17453)
"""

from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.gpt_oss import gpt_oss_decoder

from keras_attention._checks import check_choice
from keras_attention.integrations.keras_hub.attention import (
    KerasHubRotaryAttention,
)
from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.swap import block_family

# keras-hub's `w + 1` keys, or the model card's `w`.
SLIDING_WINDOW_KEYS = ("keras_hub", "paper")


class GptOssAttention(KerasHubRotaryAttention):
    """keras-hub's `GptOssAttention` as our `GroupedQueryAttention`: biases
    on every projection, YaRN rotary positions, a learned sink per query
    head (`use_sinks`), the causal sliding window, dropout on the attention
    output.

    Args:
        num_query_heads, num_key_value_heads, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, sliding_window, dropout,
        head_dim: keras-hub's `GptOssAttention`'s; `sliding_window` None or
            0 is no window.
        **kwargs: `sliding_window_keys`: `"keras_hub"` (keras-hub's `w + 1`
            keys, the default, so outputs match keras-hub's model) or
            `"paper"` (the model card's `w`); our other options (see
            `KerasHubAttention`).
    """

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        rope_max_wavelength=10000,
        rope_scaling_factor=1.0,
        kernel_initializer="glorot_uniform",
        sliding_window=4096,
        dropout=0,
        head_dim=None,
        **kwargs,
    ):
        keys = kwargs.pop("sliding_window_keys", "keras_hub")
        check_choice("sliding_window_keys", keys, SLIDING_WINDOW_KEYS)
        window = sliding_window or None
        if window is not None and keys == "keras_hub":
            window += 1
        rotary = _yarn_rotary(rope_max_wavelength, rope_scaling_factor, kwargs)
        super().__init__(
            GptOssAttention.__init__,
            locals(),
            rotary_embedding=rotary,
            head_dim=head_dim,
            use_bias=True,
            sliding_window=window,
            use_sinks=True,
            **kwargs,
        )
        if keys != "keras_hub":
            self.keras_hub_config["sliding_window_keys"] = keys


def _yarn_rotary(max_wavelength, scaling_factor, kwargs):
    """keras-hub's GPT-OSS rotary embedding: YaRN, as its attention builds it
    (the whole head rotated: GPT-OSS's head sizes are even)."""
    return RotaryEmbedding(
        max_wavelength=max_wavelength,
        scaling_factor=scaling_factor,
        rope_type="yarn",
        beta_fast=32.0,
        beta_slow=1.0,
        original_max_position_embeddings=4096,
        truncate=False,
        dtype=kwargs.get("dtype"),
    )


class GptOssTransformerDecoder(
    HandsMaskParts, gpt_oss_decoder.GptOssTransformerDecoder
):
    """keras-hub's GPT-OSS block, handing its attention the mask's parts (the
    window is the attention's own)."""


FAMILIES = (
    block_family(
        "GPT-OSS",
        "keras_hub.src.models.gpt_oss.gpt_oss_backbone:GptOssBackbone",
        GptOssTransformerDecoder,
        {"GptOssAttention": GptOssAttention},
    ),
)
