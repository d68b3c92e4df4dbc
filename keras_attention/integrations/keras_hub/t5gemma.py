"""T5Gemma (keras-hub's `T5GemmaBackbone`) with our attention.

T5Gemma is an encoder-decoder adapted from Gemma 2: the encoder attends
both ways over its padding, the decoder causally over its own tokens and
then, in a second attention, over the encoder's output (cross-attention,
grouped queries). Every attention scales its scores by
`query_pre_attn_scalar ** -0.5` and soft-caps them (`soft_cap`); the self-
attentions rotate the queries and keys (keras-hub's `RotaryEmbedding`), the
cross-attention does not. keras-hub's kernels are `(dim, heads, head_dim)`,
our layer's default layout.

The blocks hand the attention the mask's parts (`masks.DecoderMask`): the
padding over the keys, the causal mask and the window, never keras-hub's
dense `(B, 1, T, S)` additive mask, so long inputs take the chunked path or
a fused kernel. The caches are keras-hub's: `(B, 2, S, N_kv, head_dim)` per
attention, the cross-attention's filled from the encoder output once.

Windows: keras-hub's decoder keeps the keys `i - w <= j <= i` (`w + 1`
keys) and its encoder has no window. The reference implementation (Hugging
Face's) keeps `w` keys in the decoder and `|i - j| < w` in the encoder's
sliding layers. The adapter matches keras-hub by default
(`sliding_window_keys="keras_hub"`) and the reference with
`sliding_window_keys="paper"`.

References:
    - [Zhang et al., 2025. Encoder-Decoder Gemma: Improving the
      Quality-Efficiency Trade-Off via Adaptation](
      https://arxiv.org/abs/2504.06225)
    - [Gemma Team, 2024. Gemma 2: Improving Open Language Models at a
      Practical Size](https://arxiv.org/abs/2408.00118)
"""

import keras
from keras import ops
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.t5gemma import t5gemma_decoder, t5gemma_encoder

from keras_attention._checks import check_choice
from keras_attention.integrations.keras_hub.attention import (
    KerasHubAttention,
    keras_hub_arguments,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask
from keras_attention.integrations.keras_hub.swap import Family
from keras_attention.layers.multi_head_attention import MultiHeadAttention

# keras-hub's windows, or the reference implementation's.
SLIDING_WINDOW_KEYS = ("keras_hub", "paper")


def window_keys(window, causal, convention):
    """Our layer's `sliding_window` for a keras-hub layer of window
    `window` (None: a global layer): causal, keras-hub's `w + 1` keys or
    the reference's `w`; bidirectional (an encoder), none in keras-hub's
    T5Gemma or `|i - j| < w` in the reference's."""
    if window is None:
        return None
    if causal:
        return window + 1 if convention == "keras_hub" else window
    return None if convention == "keras_hub" else window


def key_padding(mask, cache):
    """`MultiHeadAttention.call`'s mask arguments for a bidirectional
    attention over the keys `mask` (a `DecoderMask` of `causal=False`, or
    None) pads: the padding over the keys, `(B, 1, S)` where the keys come
    from a cache (never a `(B, T, S)` tensor)."""
    if mask is None or mask.padding_mask is None:
        return {}
    padding = ops.cast(mask.padding_mask, "bool")
    if cache is None:
        return {"key_mask": padding}
    return {"attention_mask": padding[:, None, :]}


class CacheShapes:
    """keras-hub's output shapes of an attention that returns its cache:
    `(output, (B, 2, S, N_kv, head_dim))`."""

    def _cache_shape(self, batch, length):
        return (batch, 2, length, self.num_key_value_heads, self.head_dim)

    def _cache_spec(self, batch, length):
        return keras.KerasTensor(
            self._cache_shape(batch, length), dtype=self.compute_dtype
        )


class T5GemmaAttention(CacheShapes, KerasHubAttention):
    """keras-hub's `T5GemmaAttention` (self- or cross-attention) as our
    `GroupedQueryAttention`.

    Called as keras-hub's: `layer(inputs, attention_mask=None, cache=None,
    cache_update_index=None, training=None)` returns `(output, cache)`.
    Self-attention takes `hidden_states` and writes its keys and values into
    `cache` at `cache_update_index`; cross-attention takes
    `[hidden_states, encoder_hidden_states]` and reads the keys and values
    from `cache` (without one, it projects the encoder states and returns
    them as the cache). Without a cache, self-attention returns its keys and
    values as keras-hub does (a compiled function that does not use them
    leaves them out).

    Args:
        hidden_size, num_attention_heads, num_key_value_heads,
        query_pre_attn_scalar, attention_bias, head_dim, attention_type,
        cross_attention_hidden_size, initializer_range, attention_dropout,
        attn_logit_softcapping, rope_max_wavelength: keras-hub's
            `T5GemmaAttention`'s.
        **kwargs: `sliding_window_keys`: `"keras_hub"` (the default) or
            `"paper"`, the window convention (see the module); our other
            options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        num_key_value_heads,
        query_pre_attn_scalar,
        attention_bias,
        head_dim,
        attention_type="self",
        cross_attention_hidden_size=None,
        initializer_range=0.02,
        attention_dropout=0.0,
        attn_logit_softcapping=None,
        rope_max_wavelength=10000.0,
        **kwargs,
    ):
        check_choice("attention_type", attention_type, ("self", "cross"))
        keys = kwargs.pop("sliding_window_keys", "keras_hub")
        check_choice("sliding_window_keys", keys, SLIDING_WINDOW_KEYS)
        rotary = None
        if attention_type == "self":
            rotary = RotaryEmbedding(
                max_wavelength=rope_max_wavelength,
                sequence_axis=1,
                feature_axis=3,
                name="rotary_embedding",
                dtype=kwargs.get("dtype"),
            )
        super().__init__(
            keras_hub_arguments(T5GemmaAttention.__init__, locals()),
            **gemma_arguments(
                head_dim,
                num_attention_heads,
                num_key_value_heads,
                query_pre_attn_scalar,
                attention_bias,
                initializer_range,
                attention_dropout,
                attn_logit_softcapping,
            ),
            rotary_embedding=rotary,
            **kwargs,
        )
        self.attention_type = attention_type
        self.sliding_window_keys = keys
        if keys != "keras_hub":
            self.keras_hub_config["sliding_window_keys"] = keys

    def use_keras_hub_window(self, window, causal):
        """Sets the window of keras-hub's block (`sliding_window` of a
        `"sliding_attention"` layer, else None), in this layer's
        convention; called by the block before the layer is built."""
        self._sliding_window = window_keys(window, causal, self.sliding_window_keys)

    def build(self, input_shape, value_shape=None, key_shape=None):
        if self.attention_type == "cross" and value_shape is None:
            input_shape, value_shape = input_shape
        super().build(input_shape, value_shape, key_shape)

    def call(
        self,
        inputs,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        if self.attention_type == "self":
            result = super().call(
                inputs,
                attention_mask=attention_mask,
                cache=cache,
                cache_update_index=cache_update_index,
                training=training,
            )
            if cache is not None:
                return result
            return result, self._keys_values(inputs, inputs)
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError(
                "For cross-attention, `inputs` must be a list or tuple of "
                "two tensors: `[hidden_states, encoder_hidden_states]`."
            )
        if cache_update_index is not None:
            raise ValueError(
                "`cache_update_index` should not be set for cross-attention caching."
            )
        hidden_states, encoder_states = inputs
        if cache is None:
            cache = self.compute_key_value_cache(encoder_states)
        return MultiHeadAttention.call(
            self,
            hidden_states,
            encoder_states,
            cache=cache,
            training=training,
            **key_padding(attention_mask, cache),
        )

    def compute_output_shape(self, input_shape):
        if self.attention_type == "cross":
            query_shape, states_shape = input_shape
        else:
            query_shape = states_shape = input_shape
        return query_shape, self._cache_shape(query_shape[0], states_shape[1])

    def compute_output_spec(self, inputs, cache=None, **kwargs):
        query, states = inputs if self.attention_type == "cross" else (inputs,) * 2
        output = keras.KerasTensor(query.shape, dtype=self.compute_dtype)
        if cache is not None:
            return output, keras.KerasTensor(cache.shape, dtype=cache.dtype)
        return output, self._cache_spec(query.shape[0], states.shape[1])


def gemma_arguments(
    head_dim,
    num_query_heads,
    num_key_value_heads,
    query_pre_attn_scalar,
    attention_bias,
    initializer_range,
    attention_dropout,
    soft_cap,
):
    """Our `GroupedQueryAttention`'s arguments for the attention of
    keras-hub's T5Gemma and T5Gemma 2."""
    return {
        "head_dim": head_dim,
        "num_query_heads": num_query_heads,
        "num_key_value_heads": num_key_value_heads,
        "use_bias": attention_bias,
        "kernel_initializer": keras.initializers.RandomNormal(
            mean=0.0, stddev=initializer_range
        ),
        "scale": query_pre_attn_scalar**-0.5,
        "soft_cap": soft_cap,
        "dropout": attention_dropout,
    }


class T5GemmaEncoderLayer(t5gemma_encoder.T5GemmaEncoderLayer):
    """keras-hub's T5Gemma encoder block, handing its attention the padding
    over the keys (no causal mask) instead of a dense mask."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        sliding = self.layer_type == "sliding_attention"
        window = self.sliding_window if sliding else None
        self.self_attn.use_keras_hub_window(window, causal=False)

    def _make_attention_mask(self, hidden_states, padding_mask):
        return DecoderMask(padding_mask, causal=False)


class T5GemmaDecoderLayer(t5gemma_decoder.T5GemmaDecoderLayer):
    """keras-hub's T5Gemma decoder block, handing its attentions the mask's
    parts: the causal mask, the window and the padding to the
    self-attention, the encoder's padding to the cross-attention."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        sliding = self.layer_type == "sliding_attention"
        window = self.sliding_window if sliding else None
        self.self_attn.use_keras_hub_window(window, causal=True)

    def _make_self_attention_mask(
        self, hidden_states, padding_mask, cache=None, cache_update_index=None
    ):
        return DecoderMask(padding_mask)

    def _make_cross_attention_mask(self, hidden_states, padding_mask):
        if padding_mask is None:
            return None
        return DecoderMask(padding_mask, causal=False)


FAMILIES = (
    Family(
        name="T5Gemma",
        backbones=("keras_hub.src.models.t5gemma.t5gemma_backbone:T5GemmaBackbone",),
        replacements={
            "keras_hub.src.models.t5gemma.t5gemma_encoder:T5GemmaAttention": (
                T5GemmaAttention
            ),
            "keras_hub.src.models.t5gemma.t5gemma_decoder:T5GemmaAttention": (
                T5GemmaAttention
            ),
            "keras_hub.src.models.t5gemma.t5gemma_backbone:T5GemmaEncoderLayer": (
                T5GemmaEncoderLayer
            ),
            "keras_hub.src.models.t5gemma.t5gemma_backbone:T5GemmaDecoderLayer": (
                T5GemmaDecoderLayer
            ),
        },
    ),
)
