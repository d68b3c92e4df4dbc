"""Qwen (keras-hub's `QwenBackbone`, `Qwen3Backbone`, `QwenMoeBackbone`,
`Qwen3MoeBackbone`) with our attention.

Qwen 2 (keras-hub's `qwen` package, Qwen 2 and 2.5) projects the query, key
and value with biases and the output without; Qwen 3 normalizes the
projected query and key per head (an RMS norm) before the rotary embedding,
and sets the head size on its own. Both may restrict each query to a sliding
window of keys. The Mixture-of-Experts models have the same attention.

keras-hub 0.32 applies the sliding window only where its attention takes the
unfused path: on TensorFlow, or for the MoE models wherever no fused kernel
is used; on JAX and PyTorch the Qwen 2 and Qwen 3 attention returns from
`ops.dot_product_attention` before the window is applied, so keras-hub's own
model attends to every earlier key there. The swapped model applies the
window on every backend (keras-hub's TensorFlow result).

References:
    - [Yang et al., 2024. Qwen2 Technical Report](
      https://arxiv.org/abs/2407.10671)
    - [Qwen Team, 2024. Qwen2.5 Technical Report](
      https://arxiv.org/abs/2412.15115)
    - [Yang et al., 2025. Qwen3 Technical Report](
      https://arxiv.org/abs/2505.09388)
"""

from keras import ops
from keras_hub.src.models.qwen import qwen_decoder
from keras_hub.src.models.qwen3 import qwen3_decoder
from keras_hub.src.models.qwen3.qwen3_layernorm import Qwen3LayerNorm
from keras_hub.src.models.qwen3_moe import qwen3_moe_decoder
from keras_hub.src.models.qwen3_moe.qwen3_moe_layernorm import Qwen3MoeLayerNorm
from keras_hub.src.models.qwen_moe import qwen_moe_decoder

from keras_attention.integrations.keras_hub.attention import (
    KerasHubRotaryAttention,
    query_key_norms,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask, HandsMaskParts
from keras_attention.integrations.keras_hub.swap import block_family


class QwenAttention(KerasHubRotaryAttention):
    """keras-hub's `QwenAttention` (Qwen 2, 2.5) as our
    `GroupedQueryAttention`: biases on the query, key and value projections,
    none on the output's, the head size `dim / num_query_heads`, keras-hub's
    rotary embedding, dropout on the attention output, and the sliding
    window (on every backend, see the module's docstring).

    Args:
        num_query_heads, num_key_value_heads, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, bias_initializer, dropout,
        use_sliding_window_attention, sliding_window_size: keras-hub's
            `QwenAttention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        rope_max_wavelength=10000,
        rope_scaling_factor=1,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        dropout=0,
        use_sliding_window_attention=False,
        sliding_window_size=4096,
        **kwargs,
    ):
        super().__init__(
            QwenAttention.__init__,
            locals(),
            use_bias=True,
            use_output_bias=False,
            sliding_window=(
                sliding_window_size if use_sliding_window_attention else None
            ),
            bias_initializer=bias_initializer,
            **kwargs,
        )


class QwenMoeAttention(QwenAttention):
    """keras-hub's `QwenMoeAttention` (the same constructor and computation
    as `QwenAttention`) as our `GroupedQueryAttention`.

    Args:
        num_query_heads, num_key_value_heads, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, bias_initializer, dropout,
        use_sliding_window_attention, sliding_window_size: keras-hub's
            `QwenMoeAttention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """


class Qwen3Attention(KerasHubRotaryAttention):
    """keras-hub's `Qwen3Attention` as our `GroupedQueryAttention`: no
    biases, the head size `head_dim` (`dim / num_query_heads` where it is
    None), the projected query and key normalized per head by keras-hub's
    `Qwen3LayerNorm` (`query_dense_layernorm`, `key_dense_layernorm`) before
    keras-hub's rotary embedding, dropout on the attention output, and the
    sliding window where `sliding_window_size` is set (on every backend, see
    the module's docstring). The weights keep keras-hub's order: query, its
    norm, key, its norm, value, output.

    Args:
        num_query_heads, num_key_value_heads, head_dim, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, dropout, layer_norm_epsilon,
        sliding_window_size: keras-hub's `Qwen3Attention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    # keras-hub's norm class of the family (`Qwen3MoeLayerNorm` for the MoE).
    norm_class = Qwen3LayerNorm

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        head_dim=None,
        rope_max_wavelength=10000,
        rope_scaling_factor=1,
        kernel_initializer="glorot_uniform",
        dropout=0.0,
        layer_norm_epsilon=1e-5,
        sliding_window_size=None,
        **kwargs,
    ):
        norms = query_key_norms(
            self.norm_class,
            ("query_dense_layernorm", "key_dense_layernorm"),
            head_dim=head_dim or None,
            epsilon=layer_norm_epsilon,
            dtype=kwargs.get("dtype"),
        )
        super().__init__(
            Qwen3Attention.__init__,
            locals(),
            head_dim=head_dim or None,
            sliding_window=sliding_window_size or None,
            **norms,
            **kwargs,
        )


class Qwen3MoeAttention(Qwen3Attention):
    """keras-hub's `Qwen3MoeAttention` (as `Qwen3Attention`, with
    `Qwen3MoeLayerNorm` and its defaults) as our `GroupedQueryAttention`.

    Args:
        num_query_heads, num_key_value_heads, head_dim, rope_max_wavelength,
        rope_scaling_factor, kernel_initializer, dropout, layer_norm_epsilon,
        sliding_window_size: keras-hub's `Qwen3MoeAttention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    norm_class = Qwen3MoeLayerNorm

    def __init__(self, *args, layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(*args, layer_norm_epsilon=layer_norm_epsilon, **kwargs)


def dense_mask(mask, hidden_states):
    """keras-hub's dense `(B, T, T)` self-attention mask (True = attend) of a
    `DecoderMask` over `hidden_states` `(B, T, dim)` without a cache: the
    causal mask with the padding's keys and a caller's mask."""
    length = ops.shape(hidden_states)[1]
    positions = ops.arange(length)
    dense = ops.expand_dims(positions[:, None] >= positions[None, :], 0)
    if mask.padding_mask is not None:
        padding = ops.cast(mask.padding_mask, "bool")
        dense = ops.logical_and(dense, padding[:, None, :])
    if mask.attention_mask is not None:
        dense = ops.logical_and(dense, ops.cast(mask.attention_mask, "bool"))
    return ops.broadcast_to(dense, (ops.shape(hidden_states)[0], length, length))


class QwenTransformerDecoder(HandsMaskParts, qwen_decoder.QwenTransformerDecoder):
    """keras-hub's Qwen 2 block, handing its attention the mask's parts."""


class Qwen3TransformerDecoder(HandsMaskParts, qwen3_decoder.Qwen3TransformerDecoder):
    """keras-hub's Qwen 3 block, handing its attention the mask's parts."""


class QwenMoeTransformerDecoder(
    HandsMaskParts, qwen_moe_decoder.QwenMoeTransformerDecoder
):
    """keras-hub's Qwen MoE block, handing its attention the mask's parts
    (its experts' load-balancing loss gets keras-hub's dense mask, see
    `QwenSparseMoeBlock`)."""


class Qwen3MoeTransformerDecoder(
    HandsMaskParts, qwen3_moe_decoder.Qwen3MoeTransformerDecoder
):
    """keras-hub's Qwen 3 MoE block, handing its attention the mask's parts
    (its experts' load-balancing loss gets keras-hub's dense mask, see
    `Qwen3SparseMoeBlock`)."""


class DenseMaskForExperts:
    """Mixin for keras-hub's Qwen MoE experts (`QwenSparseMoeBlock`,
    `Qwen3SparseMoeBlock`): given the block's `DecoderMask`, which their
    load-balancing loss reads (in training only), they get keras-hub's dense
    mask."""

    def call(self, hidden_states, attention_mask=None, training=None):
        if isinstance(attention_mask, DecoderMask):
            attention_mask = dense_mask(attention_mask, hidden_states)
        return super().call(hidden_states, attention_mask, training=training)


class QwenSparseMoeBlock(DenseMaskForExperts, qwen_moe_decoder.QwenSparseMoeBlock):
    """keras-hub's Qwen MoE experts, given keras-hub's dense mask."""


class Qwen3SparseMoeBlock(DenseMaskForExperts, qwen3_moe_decoder.Qwen3SparseMoeBlock):
    """keras-hub's Qwen 3 MoE experts, given keras-hub's dense mask."""


def _qwen_family(name, package, block, *layers):
    """The family of keras-hub's `{name}Backbone`, in its package
    `keras_hub.src.models.{package}`. Our classes have the names of the
    keras-hub classes they replace: `layers` (the attention, and the MoE
    models' experts) in the package's decoder module, `block` in its
    backbone module."""
    return block_family(
        name,
        f"keras_hub.src.models.{package}.{package}_backbone:{name}Backbone",
        block,
        {layer.__name__: layer for layer in layers},
    )


FAMILIES = (
    _qwen_family("Qwen", "qwen", QwenTransformerDecoder, QwenAttention),
    _qwen_family("Qwen3", "qwen3", Qwen3TransformerDecoder, Qwen3Attention),
    _qwen_family(
        "QwenMoe",
        "qwen_moe",
        QwenMoeTransformerDecoder,
        QwenMoeAttention,
        QwenSparseMoeBlock,
    ),
    _qwen_family(
        "Qwen3Moe",
        "qwen3_moe",
        Qwen3MoeTransformerDecoder,
        Qwen3MoeAttention,
        Qwen3SparseMoeBlock,
    ),
)
