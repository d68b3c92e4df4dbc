"""Gemma (keras-hub's `GemmaBackbone`: Gemma 1 and 2) and Gemma 3 (its
`Gemma3Backbone`, text only or with a vision encoder) with our attention.

Gemma's attention, as keras-hub computes it, in our layer's options: the
kernels `(heads, dim, head_dim)` (`kernel_layout="heads_first"`), the head
size given (not `dim / heads`), scores scaled by `1 / sqrt(head_dim)` and,
in Gemma 2, soft-capped (`soft_cap`: `cap * tanh(s / cap)` after the scale),
a sliding window in every other layer (Gemma 2) or five layers of six
(Gemma 3) of `sliding_window_size` keys, the query's own included, dropout
on the attention weights. Gemma 3 normalizes the projected queries and keys
(`query_norm`, `key_norm`: keras-hub's own RMS norm layers, named as it names
them) and rotates them with keras-hub's rotary embedding (its wavelength and
scaling factor per layer); its decoding cache is keras-hub's pair `(keys,
values)` of `(B, S, N_kv, head_dim)` tensors, which our layer takes as such
(`layers.key_value_cache`), and its `use_bidirectional_attention` (the
embedding models) attends both ways with keras-hub's own window.

References:
    - [Gemma Team, 2024. Gemma: Open Models Based on Gemini Research and
      Technology](https://arxiv.org/abs/2403.08295)
    - [Gemma Team, 2024. Gemma 2: Improving Open Language Models at a
      Practical Size](https://arxiv.org/abs/2408.00118)
    - [Gemma Team, 2025. Gemma 3 Technical Report](
      https://arxiv.org/abs/2503.19786)
"""

from keras import ops
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.gemma import gemma_decoder_block
from keras_hub.src.models.gemma3 import gemma3_decoder_block

# The norm keras-hub's Gemma 3 attention uses, where it imports it from (its
# module moved in keras-hub 0.26).
from keras_hub.src.models.gemma3.gemma3_attention import RMSNormalization

from keras_attention.integrations.keras_hub.attention import (
    KerasHubAttention,
    keras_hub_arguments,
    query_key_norms,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask, decoder_mask
from keras_attention.integrations.keras_hub.swap import block_family
from keras_attention.ops import sliding_window_mask


class GemmaRotaryEmbedding(RotaryEmbedding):
    """keras-hub's `RotaryEmbedding` in the layout of keras-hub's Gemma 1 and
    2 attention: the rotated halves interleaved (`[a0, b0, a1, b1, ...]`).
    Queries and keys permuted alike keep their scores; the cached keys are
    then keras-hub's.

    Args:
        **kwargs: `RotaryEmbedding`'s arguments.
    """

    def call(self, inputs, start_index=0, positions=None):
        x = super().call(inputs, start_index=start_index, positions=positions)
        return ops.reshape(ops.stack(ops.split(x, 2, axis=-1), axis=-1), ops.shape(x))


def _scale_checked(query_head_dim_normalize, layer_name):
    """Raises for `query_head_dim_normalize=False` (a scale of `1 /
    sqrt(hidden_dim / num_query_heads)`, which needs the input size)."""
    if not query_head_dim_normalize:
        raise ValueError(
            f"The swapped {layer_name} scales the scores by `1 / sqrt(head_dim)` "
            "(`query_head_dim_normalize=True`, what keras-hub's decoder "
            "blocks always give their attention, whatever the backbone's "
            "`query_head_dim_normalize`); received "
            "query_head_dim_normalize=False."
        )


def _gemma_arguments(
    head_dim,
    num_query_heads,
    num_key_value_heads,
    kernel_initializer,
    logit_soft_cap,
    sliding_window,
    dropout,
):
    """Our `GroupedQueryAttention`'s arguments for the attention of
    keras-hub's Gemma, Gemma 3 and Gemma 4."""
    return {
        "head_dim": head_dim,
        "num_query_heads": num_query_heads,
        "num_key_value_heads": num_key_value_heads,
        "use_bias": False,
        "kernel_layout": "heads_first",
        "kernel_initializer": kernel_initializer,
        "soft_cap": logit_soft_cap,
        "sliding_window": sliding_window,
        "dropout": dropout,
    }


class _KerasHubWindow:
    """keras-hub's `_mask_sliding_window`, which its tests call on the
    attention layer: the layer itself applies its window in the attention
    (on the chunked path by skipping tiles), not through this mask."""

    def _mask_sliding_window(self, attention_mask, cache_update_index=0):
        """`attention_mask` `(B, T, S)` within this layer's window: keys
        `|i - j| < sliding_window_size` of query `i` (from
        `cache_update_index`), or, bidirectional, keras-hub's band."""
        config = self.keras_hub_config
        window = config["sliding_window_size"]
        if config.get("use_bidirectional_attention"):
            return _with_bidirectional_window(attention_mask, window)
        _, query_length, key_length = ops.shape(attention_mask)
        band = sliding_window_mask(
            query_length, key_length, window, offset=cache_update_index
        )
        return ops.logical_and(ops.cast(attention_mask, "bool"), band[None])


class GemmaAttention(_KerasHubWindow, KerasHubAttention):
    """keras-hub's `CachedGemmaAttention` (Gemma 1 and 2) as our
    `GroupedQueryAttention`.

    Args:
        head_dim, num_query_heads, num_key_value_heads, kernel_initializer,
        logit_soft_cap, use_sliding_window_attention, sliding_window_size,
        query_head_dim_normalize, dropout: keras-hub's `CachedGemmaAttention`'s
            (`query_head_dim_normalize` must be True, as keras-hub's block
            always gives it).
        **kwargs: our options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        kernel_initializer="glorot_uniform",
        logit_soft_cap=None,
        use_sliding_window_attention=False,
        sliding_window_size=4096,
        query_head_dim_normalize=True,
        dropout=0,
        **kwargs,
    ):
        _scale_checked(query_head_dim_normalize, "CachedGemmaAttention")
        super().__init__(
            keras_hub_arguments(GemmaAttention.__init__, locals()),
            rotary_embedding=GemmaRotaryEmbedding(
                max_wavelength=10_000.0, dtype=kwargs.get("dtype")
            ),
            **_gemma_arguments(
                head_dim,
                num_query_heads,
                num_key_value_heads,
                kernel_initializer,
                logit_soft_cap,
                sliding_window_size if use_sliding_window_attention else None,
                dropout,
            ),
            **kwargs,
        )


class Gemma3Attention(_KerasHubWindow, KerasHubAttention):
    """keras-hub's `CachedGemma3Attention` as our `GroupedQueryAttention`:
    Gemma's attention, with keras-hub's RMS norms of the projected queries
    and keys (`query_norm`, `key_norm`; built after the value's projection,
    in keras-hub's order of the weights), its rotary embedding with
    the layer's wavelength and scaling, keras-hub's cache layout (the pair
    `(keys, values)`) and `cache_update_mask`, and bidirectional attention.

    Args:
        head_dim, num_query_heads, num_key_value_heads, kernel_initializer,
        logit_soft_cap, use_sliding_window_attention, sliding_window_size,
        query_head_dim_normalize, use_query_key_norm, layer_norm_epsilon,
        rope_wavelength, rope_scaling_factor, use_bidirectional_attention,
        dropout: keras-hub's `CachedGemma3Attention`'s
            (`query_head_dim_normalize` must be True, as keras-hub's block
            always gives it).
        **kwargs: our options (see `KerasHubAttention`).
    """

    _norms_after_value = True

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        kernel_initializer="glorot_uniform",
        logit_soft_cap=None,
        use_sliding_window_attention=False,
        sliding_window_size=4096,
        query_head_dim_normalize=True,
        use_query_key_norm=False,
        layer_norm_epsilon=1e-6,
        rope_wavelength=10_000.0,
        rope_scaling_factor=1.0,
        use_bidirectional_attention=False,
        dropout=0,
        **kwargs,
    ):
        _scale_checked(query_head_dim_normalize, "CachedGemma3Attention")
        dtype = kwargs.get("dtype")
        norms = {}
        if use_query_key_norm:
            norms = query_key_norms(
                RMSNormalization, epsilon=layer_norm_epsilon, dtype=dtype
            )
        # keras-hub's bidirectional window is not symmetric (`w // 2` keys
        # after the query, `w - w // 2 - 1` before): `call` adds it to the
        # mask, and our layer's own (symmetric) window stays off.
        causal_window = use_sliding_window_attention and not use_bidirectional_attention
        super().__init__(
            keras_hub_arguments(Gemma3Attention.__init__, locals()),
            rotary_embedding=RotaryEmbedding(
                max_wavelength=rope_wavelength,
                scaling_factor=rope_scaling_factor,
                dtype=dtype,
            ),
            **norms,
            **_gemma_arguments(
                head_dim,
                num_query_heads,
                num_key_value_heads,
                kernel_initializer,
                logit_soft_cap,
                sliding_window_size if causal_window else None,
                dropout,
            ),
            **kwargs,
        )
        self.bidirectional_window = (
            sliding_window_size
            if use_sliding_window_attention and use_bidirectional_attention
            else None
        )

    def call(
        self,
        hidden_states,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        cache_update_mask=None,
        training=None,
    ):
        """keras-hub's call; `cache_update_mask` `(B, T)`: where False, the
        cache keeps its entries at the new positions (keras-hub's Gemma 3
        `generate` keeps the prefilled prompt's, in the rows still reading
        their prompt; their outputs there are not used)."""
        if self.bidirectional_window is not None and attention_mask is not None:
            attention_mask = _with_bidirectional_window(
                attention_mask, self.bidirectional_window
            )
        result = super().call(
            hidden_states,
            attention_mask=attention_mask,
            cache=cache,
            cache_update_index=cache_update_index,
            training=training,
        )
        if cache is None or cache_update_mask is None:
            return result
        output, new_cache = result
        start = 0 if cache_update_index is None else cache_update_index
        length = ops.shape(hidden_states)[1]
        return output, _keep_unmasked_updates(
            cache, new_cache, start, length, cache_update_mask
        )


def _with_bidirectional_window(mask, window):
    """keras-hub's dense `(B, T, T)` mask of a bidirectional layer and its
    window: query `i` attends to keys `j` with `-(window // 2) <= i - j <=
    window - window // 2 - 1`."""
    if isinstance(mask, DecoderMask):
        raise ValueError(
            "A bidirectional Gemma 3 layer takes keras-hub's dense mask; "
            "received a DecoderMask."
        )
    length = ops.shape(mask)[-1]
    positions = ops.arange(length, dtype="int32")
    distance = positions[:, None] - positions[None, :]
    right = window // 2
    band = ops.logical_and(distance <= window - right - 1, distance >= -right)
    return ops.logical_and(ops.cast(mask, "bool"), band[None])


def _keep_unmasked_updates(old, new, start, length, update_mask):
    """The cache `new` with the entries at `[start, start + length)` of the
    rows `update_mask` `(B, length)` holds False taken back from `old`:
    keras-hub's pair cache (keys, values) of `(B, S, N, H)` tensors, or the
    stacked `(B, 2, S, N, H)` one of its releases before 0.26."""
    keep = ops.cast(update_mask, "bool")
    if isinstance(new, (tuple, list)) and len(ops.shape(new[0])) == 4:
        mask = keep[:, :, None, None]
        return type(new)(
            _keep_slice(before, after, start, length, mask, axis=1)
            for before, after in zip(old, new, strict=True)
        )
    if not isinstance(new, (tuple, list)) and len(ops.shape(new)) == 5:
        mask = keep[:, None, :, None, None]
        return _keep_slice(old, new, start, length, mask, axis=2)
    raise ValueError(
        "`cache_update_mask` takes keras-hub's cache: the pair (keys, "
        "values) of (batch, max_length, num_key_value_heads, head_dim) "
        "tensors, or the stacked (batch, 2, max_length, num_key_value_heads, "
        "head_dim) tensor."
    )


def _keep_slice(before, after, start, length, keep, axis):
    """`after` with its `length` entries from `start` along `axis` taken from
    `before` where `keep` is False."""
    shape = ops.shape(after)
    corner = tuple(start if i == axis else 0 for i in range(len(shape)))
    size = tuple(length if i == axis else d for i, d in enumerate(shape))
    updated = ops.where(
        keep, ops.slice(after, corner, size), ops.slice(before, corner, size)
    )
    return ops.slice_update(after, corner, updated)


class GemmaDecoderBlock(gemma_decoder_block.GemmaDecoderBlock):
    """keras-hub's Gemma block, handing its attention the mask's parts."""

    def _compute_attention_mask(self, x, padding_mask, cache, cache_update_index):
        return decoder_mask(x, padding_mask)


class Gemma3DecoderBlock(gemma3_decoder_block.Gemma3DecoderBlock):
    """keras-hub's Gemma 3 block, handing its attention the mask's parts;
    keras-hub's dense mask where images attend both ways or the block is
    bidirectional (an embedding model)."""

    def _compute_attention_mask(
        self, x, padding_mask, vision_mask, cache, cache_update_index
    ):
        if vision_mask is not None or self.use_bidirectional_attention:
            return super()._compute_attention_mask(
                x, padding_mask, vision_mask, cache, cache_update_index
            )
        return decoder_mask(x, padding_mask)


FAMILIES = (
    block_family(
        "Gemma",
        "keras_hub.src.models.gemma.gemma_backbone:GemmaBackbone",
        GemmaDecoderBlock,
        {"CachedGemmaAttention": GemmaAttention},
    ),
    block_family(
        "Gemma 3",
        "keras_hub.src.models.gemma3.gemma3_backbone:Gemma3Backbone",
        Gemma3DecoderBlock,
        {"CachedGemma3Attention": Gemma3Attention},
    ),
)
