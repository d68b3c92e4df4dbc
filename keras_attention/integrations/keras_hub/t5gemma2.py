"""T5Gemma 2 (keras-hub's `T5Gemma2Backbone`) with our attention.

T5Gemma 2 is an encoder-decoder adapted from Gemma 3: every attention
normalizes its projected queries and keys (Gemma 3's RMS norms), rotates
them (per layer wavelength and scaling) and scales the scores by
`query_pre_attn_scalar ** -0.5`. The encoder attends both ways within a
window on its sliding layers (keras-hub's, as the reference: `(w + 1) // 2`
keys up to the query, `w // 2` after it). The decoder's one attention is
*merged*: a single softmax over its own keys (causal, a window of `w` keys
on the sliding layers) and the encoder's keys together, with the key and
value projections shared (the encoder's keys normalized, not rotated).

keras-hub concatenates the two sets of keys and one dense `(B, 1, T, S +
S_enc)` additive mask. Here the decoder attends over each set apart, each
call on its own memory-efficient path or fused kernel with its mask in parts
(causal, window, padding), and merges the two through their log-sum-exps
(`ops.merge_attention`): the same softmax, without a `(T, S)` tensor. The
encoder's window is a `mask_mod`, which the chunked path skips tiles by.
The caches are keras-hub's: per decoder layer the pair `(self_cache,
cross_cache)` of `(B, 2, S, N_kv, head_dim)` tensors.

References:
    - [Zhang et al., 2025. T5Gemma 2: Seeing, Reading, and Understanding
      Longer](https://arxiv.org/abs/2512.14856)
    - [Gemma Team, 2025. Gemma 3 Technical Report](
      https://arxiv.org/abs/2503.19786)
    - [Milakov & Gimelshein, 2018. Online normalizer calculation for
      softmax](https://arxiv.org/abs/1805.02867)
"""

from keras import ops
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.gemma3.gemma3_layers import RMSNormalization
from keras_hub.src.models.t5gemma2 import t5gemma2_decoder, t5gemma2_encoder

from keras_attention.integrations.keras_hub.attention import (
    KerasHubAttention,
    keras_hub_arguments,
    query_key_norms,
)
from keras_attention.integrations.keras_hub.masks import DecoderMask
from keras_attention.integrations.keras_hub.swap import Family
from keras_attention.integrations.keras_hub.t5gemma import (
    CacheShapes,
    gemma_arguments,
)
from keras_attention.layers._attention_options import attention_scale
from keras_attention.layers._attention_paths import op_path
from keras_attention.ops.attention import dot_product_attention
from keras_attention.ops.masks import zero_unattended
from keras_attention.ops.merge import merge_attention


def bidirectional_window(window):
    """keras-hub's (and the reference's) bidirectional window as a
    `mask_mod`: query `i` attends to keys `j` with `-(w // 2) <= i - j <=
    (w + 1) // 2 - 1`."""
    before, after = (window + 1) // 2, window // 2

    def mask_mod(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        return ops.logical_and(distance < before, distance >= -after)

    return mask_mod


def _padding(padding_mask, length=None):
    """A `(B, S)` padding mask as the op's key mask `(B, 1, 1, S)` (its first
    `length` keys), or None."""
    if padding_mask is None:
        return None
    padding = ops.cast(padding_mask, "bool")
    if length is not None:
        padding = padding[:, :length]
    return padding[:, None, None, :]


def _hide_padding(hidden_states, padding_mask):
    """`hidden_states` `(B, S, dim)` with zeros at the padding of
    `padding_mask` `(B, S)` (unchanged without one): no query reads those
    keys, but their projections' gradients would, and `0 * NaN` is NaN
    (`ops.masks.hide_unattended_inputs`)."""
    if padding_mask is None:
        return hidden_states
    return zero_unattended(hidden_states, ops.cast(padding_mask, "bool"))


class _T5Gemma2Attention(CacheShapes, KerasHubAttention):
    """What T5Gemma 2's two attention layers share: keras-hub's options as
    ours (query/key norms built after the output projection, in keras-hub's
    weight order; rotary embedding, scale, soft cap), and attention over one
    set of keys on the op's memory-efficient path, with its log-sum-exp."""

    _norms_after_output = True

    def __init__(self, constructor, arguments, **kwargs):
        dtype = kwargs.get("dtype")
        norms = {}
        if arguments["use_query_key_norm"]:
            norms = query_key_norms(
                RMSNormalization, epsilon=arguments["rms_norm_eps"], dtype=dtype
            )
        super().__init__(
            keras_hub_arguments(constructor, arguments),
            **gemma_arguments(
                arguments["head_dim"],
                arguments["num_attention_heads"],
                arguments["num_key_value_heads"],
                arguments["query_pre_attn_scalar"],
                arguments["attention_bias"],
                arguments["initializer_range"],
                arguments["attention_dropout"],
                arguments["attn_logit_softcapping"],
            ),
            rotary_embedding=RotaryEmbedding(
                max_wavelength=arguments["rope_max_wavelength"],
                scaling_factor=arguments["rope_scaling_factor"],
                sequence_axis=1,
                feature_axis=3,
                name="rotary_embedding",
                dtype=dtype,
            ),
            **norms,
            **kwargs,
        )
        # The block's window (keras-hub gives it to the block, not here).
        self.window = None

    def build(self, input_shape, value_shape=None, key_shape=None):
        if isinstance(input_shape[0], (list, tuple)):
            input_shape = input_shape[0]  # keras-hub's [decoder, encoder]
        super().build(input_shape, input_shape)

    def _self_keys(self, hidden_states, padding_mask, cache, cache_update_index):
        """`(cache, keys, values)` of `hidden_states`, rotated from
        `cache_update_index`: written into `cache` there if given, else
        stacked as keras-hub's cache, the padding of `padding_mask` zeroed
        first (`_hide_padding`)."""
        if cache is not None:
            if cache_update_index is None:
                raise ValueError(
                    "Both `cache` and `cache_update_index` must be passed for "
                    "self-attention caching."
                )
            return self._apply_cache(
                cache, cache_update_index, hidden_states, hidden_states
            )
        hidden_states = _hide_padding(hidden_states, padding_mask)
        keys = self._project_key(hidden_states)
        values = self._project_value(hidden_states)
        return ops.stack((keys, values), axis=1), keys, values

    def _attend_over(self, query, key, value, training, **masks):
        """`(output, lse)`: attention of the projected `query` over `key`
        and `value` under `masks` (`dot_product_attention`'s `mask`,
        `is_causal`, `query_offset`, `sliding_window`, `mask_mod`), on the
        path the op chooses with this layer's `flash_attention` and
        `chunk_size` (recorded as `attention_path`)."""
        rate = self.dropout if training else 0.0
        path, arguments = op_path(
            query,
            key,
            value,
            flash_attention=self._flash_attention,
            chunk_size=self._chunk_size,
            own_bias=False,
            score_mod=None,
            attn_logits_soft_cap=self._options["soft_cap"],
            dropout_rate=rate,
            return_lse=True,
            **masks,
        )
        self._record_path(path)
        return dot_product_attention(
            query,
            key,
            value,
            scale=attention_scale(self._options, self.key_dim),
            seed=self._dropout_layer.seed_generator if rate else None,
            **arguments,
        )


class T5Gemma2Attention(_T5Gemma2Attention):
    """keras-hub's `T5Gemma2Attention` (the encoder's self-attention) as our
    `GroupedQueryAttention`: called as keras-hub's, `layer(inputs,
    attention_mask=None, cache=None, cache_update_index=None,
    training=None)`, returning `(output, cache)`; `attention_mask` is the
    block's `DecoderMask` (the padding over the keys, `causal=False`) and
    the block's window a `mask_mod`.

    Args:
        hidden_size, num_attention_heads, num_key_value_heads,
        query_pre_attn_scalar, attention_bias, head_dim, initializer_range,
        attention_dropout, attn_logit_softcapping, rope_max_wavelength,
        rope_scaling_factor, use_query_key_norm, rms_norm_eps: keras-hub's
            `T5Gemma2Attention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        num_key_value_heads,
        query_pre_attn_scalar,
        attention_bias,
        head_dim,
        initializer_range=0.02,
        attention_dropout=0.0,
        attn_logit_softcapping=None,
        rope_max_wavelength=10000.0,
        rope_scaling_factor=1.0,
        use_query_key_norm=True,
        rms_norm_eps=1e-6,
        **kwargs,
    ):
        super().__init__(T5Gemma2Attention.__init__, locals(), **kwargs)

    def call(
        self,
        inputs,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        start = 0 if cache_update_index is None else cache_update_index
        query, _ = self._project_query(inputs, start)  # (no gate)
        padding_mask = None if attention_mask is None else attention_mask.padding_mask
        cache, keys, values = self._self_keys(
            inputs, padding_mask, cache, cache_update_index
        )
        padding = _padding(padding_mask, ops.shape(keys)[1])
        output, _ = self._attend_over(
            query,
            keys,
            values,
            training,
            mask=padding,
            query_offset=start,
            mask_mod=None if self.window is None else bidirectional_window(self.window),
        )
        return self._output_dense(output), cache

    def compute_output_shape(self, input_shape):
        return input_shape, self._cache_shape(input_shape[0], input_shape[1])

    def compute_output_spec(self, inputs, cache=None, **kwargs):
        output = super().compute_output_spec(inputs)
        if cache is None:
            return output, self._cache_spec(inputs.shape[0], inputs.shape[1])
        return output, self._cache_spec(inputs.shape[0], cache.shape[2])


class T5Gemma2MergedAttention(_T5Gemma2Attention):
    """keras-hub's `T5Gemma2MergedAttention` (the decoder's attention) as our
    `GroupedQueryAttention`: one softmax over the decoder's own keys and the
    encoder's, computed as two attention calls merged through their
    log-sum-exps (`ops.merge_attention`).

    Called as keras-hub's: `layer(inputs, encoder_hidden_states,
    attention_mask=None, cache=None, cache_update_index=None,
    training=None)` returns `(output, (self_cache, cross_cache))`;
    `attention_mask` is the block's `MergedMask`. The encoder's keys and
    values come from `cross_cache` where given, else from the shared
    projections of `encoder_hidden_states` (keys normalized, not rotated).

    Args:
        hidden_size, num_attention_heads, num_key_value_heads,
        query_pre_attn_scalar, attention_bias, head_dim,
        cross_attention_hidden_size, initializer_range, attention_dropout,
        attn_logit_softcapping, rope_max_wavelength, rope_scaling_factor,
        use_query_key_norm, rms_norm_eps: keras-hub's
            `T5Gemma2MergedAttention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        num_key_value_heads,
        query_pre_attn_scalar,
        attention_bias,
        head_dim,
        cross_attention_hidden_size=None,
        initializer_range=0.02,
        attention_dropout=0.0,
        attn_logit_softcapping=None,
        rope_max_wavelength=10000.0,
        rope_scaling_factor=1.0,
        use_query_key_norm=True,
        rms_norm_eps=1e-6,
        **kwargs,
    ):
        super().__init__(T5Gemma2MergedAttention.__init__, locals(), **kwargs)

    def call(
        self,
        inputs,
        encoder_hidden_states,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        self_cache, cross_cache = (None, None) if cache is None else cache
        mask = MergedMask() if attention_mask is None else attention_mask
        cached = self_cache is not None
        start = cache_update_index if cached else 0
        query, _ = self._project_query(inputs, start)  # (no gate)
        self_cache, keys, values = self._self_keys(
            inputs, mask.padding_mask, self_cache, start
        )
        if cross_cache is None:
            encoder_hidden_states = _hide_padding(
                encoder_hidden_states, mask.encoder_padding_mask
            )
            cross_keys = self._key_dense(encoder_hidden_states)
            if self._options["key_norm"] is not None:
                cross_keys = self.key_norm(cross_keys)
            cross_values = self._project_value(encoder_hidden_states)
            cross_cache = ops.stack((cross_keys, cross_values), axis=1)
        else:
            cross_keys, cross_values = cross_cache[:, 0], cross_cache[:, 1]
        own = self._attend_over(
            query,
            keys,
            values,
            training,
            mask=_padding(mask.padding_mask, ops.shape(keys)[1]),
            is_causal=True,
            query_offset=start,
            sliding_window=self.window,
        )
        encoder = self._attend_over(
            query,
            cross_keys,
            cross_values,
            training,
            mask=_padding(mask.encoder_padding_mask),
        )
        output, _ = merge_attention((own[0], encoder[0]), (own[1], encoder[1]))
        return self._output_dense(output), (self_cache, cross_cache)

    def compute_output_shape(self, input_shape):
        decoder_shape, encoder_shape = input_shape
        batch = decoder_shape[0]
        return decoder_shape, (
            self._cache_shape(batch, decoder_shape[1]),
            self._cache_shape(batch, encoder_shape[1]),
        )

    def compute_output_spec(self, inputs, encoder_hidden_states, cache=None, **kw):
        output = super().compute_output_spec(inputs)
        batch = inputs.shape[0]
        self_length = inputs.shape[1] if cache is None else cache[0].shape[2]
        return output, (
            self._cache_spec(batch, self_length),
            self._cache_spec(batch, encoder_hidden_states.shape[1]),
        )


class MergedMask:
    """The parts of T5Gemma 2's merged mask: the decoder's padding over its
    own keys (the causal mask and the window are the attention's) and the
    encoder's padding.

    Args:
        padding_mask: None or `(B, S)`, nonzero = a real decoder token.
        encoder_padding_mask: None or `(B, S_enc)`, nonzero = a real
            encoder token.
    """

    def __init__(self, padding_mask=None, encoder_padding_mask=None):
        self.padding_mask = padding_mask
        self.encoder_padding_mask = encoder_padding_mask


class T5Gemma2EncoderLayer(t5gemma2_encoder.T5Gemma2EncoderLayer):
    """keras-hub's T5Gemma 2 encoder block, handing its attention the padding
    over the keys and its window as such (no dense mask)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.attention_type == "sliding_attention":
            self.self_attn.window = self.sliding_window

    def _make_attention_mask(self, hidden_states, padding_mask):
        return DecoderMask(padding_mask, causal=False)


class T5Gemma2DecoderLayer(t5gemma2_decoder.T5Gemma2DecoderLayer):
    """keras-hub's T5Gemma 2 decoder block, handing its merged attention the
    mask's parts (`MergedMask`) instead of the concatenated dense mask."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.attention_type == "sliding_attention":
            # keras-hub's `i - (w - 1) <= j <= i`: `w` keys, as ours.
            self.merged_attn.window = self.sliding_window

    def call(
        self,
        inputs,
        self_attention_padding_mask=None,
        cross_attention_padding_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        hidden_states, encoder_hidden_states = inputs
        residual = hidden_states
        hidden_states = self.pre_self_attn_layernorm(hidden_states)
        hidden_states, updated_cache = self.merged_attn(
            inputs=hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            attention_mask=MergedMask(
                self_attention_padding_mask, cross_attention_padding_mask
            ),
            cache=(None, None) if cache is None else cache,
            cache_update_index=cache_update_index,
            training=training,
        )
        hidden_states = self.post_self_attn_layernorm(hidden_states)
        hidden_states = residual + self.dropout(hidden_states, training=training)
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states, training=training)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + self.dropout(hidden_states, training=training)
        return hidden_states, updated_cache


FAMILIES = (
    Family(
        name="T5Gemma 2",
        backbones=("keras_hub.src.models.t5gemma2.t5gemma2_backbone:T5Gemma2Backbone",),
        replacements={
            "keras_hub.src.models.t5gemma2.t5gemma2_encoder:T5Gemma2Attention": (
                T5Gemma2Attention
            ),
            "keras_hub.src.models.t5gemma2.t5gemma2_decoder:"
            "T5Gemma2MergedAttention": T5Gemma2MergedAttention,
            "keras_hub.src.models.t5gemma2.t5gemma2_backbone:T5Gemma2EncoderLayer": (
                T5Gemma2EncoderLayer
            ),
            "keras_hub.src.models.t5gemma2.t5gemma2_backbone:T5Gemma2DecoderLayer": (
                T5Gemma2DecoderLayer
            ),
        },
    ),
)
