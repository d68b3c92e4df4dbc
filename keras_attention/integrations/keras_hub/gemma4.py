"""Gemma 4 (keras-hub's `Gemma4Backbone`, and the multi-token-prediction
assistant drafts of `Gemma4AssistantCausalLM`, whose backbone it is too)
with our attention in the text decoder.

Gemma 4's attention, as keras-hub computes it, in our layer's options:
Gemma's kernels `(heads, dim, head_dim)` (`kernel_layout="heads_first"`),
RMS norms of the projected queries and keys (keras-hub's layers, with its
names and in its weight order: key norm, then query norm) and a norm of the
values without a scale (`value_norm`: `Gemma4VNorm`), scores scaled by 1
(`scale=1.0`; the norms keep them in range), an optional soft cap, a
sliding window of `sliding_window_size` keys (the query's own included) on
the local layers, dropout on the attention weights. The global layers have
their own head size (`global_head_dim`), rotary wavelength and a partial
rotary embedding (`Gemma4RotaryEmbedding`); with
`num_global_key_value_heads` they have that many key/value heads and take
the values from the key projection (`values_from_keys`, keras-hub's
`attention_k_eq_v`). The last `num_kv_shared_layers` layers, and every
layer of an assistant draft, project no keys or values: they attend to
those of an earlier layer (`shares_keys_values`), handed over by keras-hub's
blocks as `shared_kv` in training and as the source layer's cache when
decoding (for a draft, the target model's cache). keras-hub's decoding
cache is one stacked `(B, 2, S, N_kv, max_head_dim)` tensor per layer,
ours too; a global layer of other sizes reads and writes its corner of it.
With `cache_dtype="int8"` the cache is packed int8 (`gemma4_cache`).

The vision and audio encoders keep keras-hub's attention.

References:
    - [Gemma Team, 2025. Gemma 3 Technical Report](
      https://arxiv.org/abs/2503.19786)
    - [Google, 2026. Gemma 4 model card](
      https://ai.google.dev/gemma/docs/core/model_card_4)
"""

import contextlib

from keras import ops
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.gemma4 import gemma4_decoder_block
from keras_hub.src.models.gemma4.gemma4_layers import Gemma4VNorm, RMSNormalization

from keras_attention.integrations.keras_hub.attention import (
    KerasHubAttention,
    keras_hub_arguments,
)
from keras_attention.integrations.keras_hub.gemma import (
    _gemma_arguments,
    _keep_unmasked_updates,
    _KerasHubWindow,
)
from keras_attention.integrations.keras_hub.gemma4_cache import (
    is_packed_cache,
    unpack,
    write_corner,
)
from keras_attention.integrations.keras_hub.masks import (
    DecoderMask,
    attention_call_arguments,
    decoder_mask,
)
from keras_attention.integrations.keras_hub.swap import block_family


class Gemma4RotaryEmbedding(RotaryEmbedding):
    """keras-hub's rotary embedding as Gemma 4's attention applies it: over
    the whole head, or on a global layer over the first `rotary_dim // 2`
    features of each half of the head (the rest pass unrotated), with
    frequencies of denominator `head_dim` either way.

    Args:
        head_dim: the head size.
        rotary_dim: the features rotated (even; `head_dim` for all).
        **kwargs: `RotaryEmbedding`'s arguments.
    """

    def __init__(self, head_dim, rotary_dim, **kwargs):
        super().__init__(denominator_dim=head_dim, **kwargs)
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim

    def call(self, inputs, start_index=0, positions=None):
        if self.rotary_dim >= self.head_dim:
            return super().call(inputs, start_index=start_index, positions=positions)
        rotated, half = self.rotary_dim // 2, self.head_dim // 2
        first, second = inputs[..., :half], inputs[..., half:]
        parts = ops.concatenate([first[..., :rotated], second[..., :rotated]], axis=-1)
        parts = super().call(parts, start_index=start_index, positions=positions)
        first_rotated, second_rotated = ops.split(parts, 2, axis=-1)
        return ops.concatenate(
            [
                first_rotated,
                first[..., rotated:],
                second_rotated,
                second[..., rotated:],
            ],
            axis=-1,
        )


class Gemma4Attention(_KerasHubWindow, KerasHubAttention):
    """keras-hub's `Gemma4TextAttention` as our `GroupedQueryAttention`
    (see the module): called as keras-hub's, `layer(x, attention_mask,
    cache, cache_update_index, cache_update_mask, shared_kv, training,
    positions)`, returning `(output, keys and values)`: without a cache the
    keys and values it attended to, `(B, 2, T, N_kv, head_dim)`, which a
    layer sharing them takes as `shared_kv`; with one, its cache updated
    (a sharing layer's unchanged).

    Args:
        head_dim, num_query_heads, num_key_value_heads, kernel_initializer,
        logit_soft_cap, use_sliding_window_attention, sliding_window_size,
        layer_norm_epsilon, rope_wavelength, rope_scaling_factor,
        rope_partial_rotary_factor, use_bidirectional_attention,
        is_global_attention, is_kv_shared_layer, attention_k_eq_v,
        num_global_key_value_heads, dropout: keras-hub's
            `Gemma4TextAttention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    # keras-hub builds the key norm, the value norm, then the query norm.
    _norms_after_value = ("key", "query")

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        kernel_initializer="glorot_uniform",
        logit_soft_cap=None,
        use_sliding_window_attention=False,
        sliding_window_size=4096,
        layer_norm_epsilon=1e-6,
        rope_wavelength=10_000.0,
        rope_scaling_factor=1.0,
        rope_partial_rotary_factor=1.0,
        use_bidirectional_attention=False,
        is_global_attention=False,
        is_kv_shared_layer=False,
        attention_k_eq_v=False,
        num_global_key_value_heads=None,
        dropout=0,
        **kwargs,
    ):
        config = keras_hub_arguments(Gemma4Attention.__init__, locals())
        # keras-hub's layer takes keys as values on global layers only.
        keys_as_values = attention_k_eq_v and not use_sliding_window_attention
        config["attention_k_eq_v"] = keys_as_values
        kv_heads = num_key_value_heads
        if keys_as_values and num_global_key_value_heads is not None:
            kv_heads = num_global_key_value_heads
        dtype = kwargs.get("dtype")
        norms = {
            "query_norm": RMSNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="query_norm"
            )
        }
        if not is_kv_shared_layer:
            norms["key_norm"] = RMSNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="key_norm"
            )
            norms["value_norm"] = Gemma4VNorm(
                epsilon=layer_norm_epsilon, dtype=dtype, name="value_norm"
            )
        rotary_dim = int(rope_partial_rotary_factor * head_dim)
        # keras-hub's bidirectional layers (embedding models) have no window.
        window = use_sliding_window_attention and not use_bidirectional_attention
        super().__init__(
            config,
            scale=1.0,
            values_from_keys=keys_as_values and not is_kv_shared_layer,
            shares_keys_values=is_kv_shared_layer,
            rotary_embedding=Gemma4RotaryEmbedding(
                head_dim,
                max(2, rotary_dim - rotary_dim % 2),
                max_wavelength=rope_wavelength,
                scaling_factor=rope_scaling_factor,
                dtype=dtype,
            ),
            **norms,
            **_gemma_arguments(
                head_dim,
                num_query_heads,
                kv_heads,
                kernel_initializer,
                logit_soft_cap,
                sliding_window_size if window else None,
                dropout,
            ),
            **kwargs,
        )
        # keras-hub's assistant sets it on its layers after building them.
        self.is_kv_shared_layer = is_kv_shared_layer
        self.__dict__["_positions"] = None

    def call(
        self,
        x,
        attention_mask=None,
        cache=None,
        cache_update_index=0,
        cache_update_mask=None,
        shared_kv=None,
        training=None,
        positions=None,
    ):
        shared = shared_kv if self.is_kv_shared_layer else None
        if self.is_kv_shared_layer and shared is None:
            raise ValueError(
                f"KV-shared layer {self.name!r} was called without "
                "shared_kv. Check backbone KV-sharing configuration."
            )
        # keras-hub's block hands it a dense mask where images attend both
        # ways, with the window already inside (before the images' part).
        dense = attention_mask is not None and not isinstance(
            attention_mask, DecoderMask
        )
        with self._call_state(positions, without_window=dense):
            if cache is None:
                return self._attend_sequence(x, attention_mask, shared, training)
            if shared is not None:
                output = self._attend_shared(
                    x, attention_mask, self._corner(shared), cache_update_index
                )
                return output, cache
            return self._attend_with_cache(
                x, attention_mask, cache, cache_update_index, cache_update_mask
            )

    def _attend_sequence(self, x, mask, shared, training):
        """Training or a forward pass: `(output, keys and values)`."""
        arguments = attention_call_arguments(mask, x, None, self.packed)
        if shared is not None:
            output = super(KerasHubAttention, self).call(
                x, x, shared_keys_values=shared, training=training, **arguments
            )
            return output, shared
        return super(KerasHubAttention, self).call(
            x, x, return_keys_values=True, training=training, **arguments
        )

    def _attend_shared(self, x, mask, shared, cache_update_index):
        """A decoding step of a sharing layer over the source's cache."""
        arguments = attention_call_arguments(mask, x, shared)
        return super(KerasHubAttention, self).call(
            x,
            x,
            shared_keys_values=shared,
            cache_update_index=cache_update_index,
            **arguments,
        )

    def _attend_with_cache(self, x, mask, cache, index, update_mask):
        """A decoding step writing this layer's keys and values into its
        corner of keras-hub's cache (or of our packed int8 one)."""
        output, corner = super().call(
            x, attention_mask=mask, cache=self._corner(cache), cache_update_index=index
        )
        new_cache = self._write_corner(cache, corner)
        if update_mask is not None:
            new_cache = _keep_unmasked_updates(
                cache, new_cache, index, ops.shape(x)[1], update_mask
            )
        return output, new_cache

    def _corner(self, cache):
        """keras-hub's cache `(B, 2, S, N, H)`, allocated for the largest
        head size and key/value heads of any layer, cut to this layer's; of
        a packed int8 cache, the quantized pair of that corner."""
        heads, size = self.num_key_value_heads, self.key_dim
        if is_packed_cache(cache):
            return unpack(cache, heads, size)
        if tuple(cache.shape[3:]) == (heads, size):
            return cache
        return cache[:, :, :, :heads, :size]

    def _write_corner(self, cache, corner):
        """`cache` with this layer's corner (`_corner`) replaced."""
        if is_packed_cache(cache):
            return write_corner(cache, *corner)
        if tuple(corner.shape) == tuple(cache.shape):
            return corner
        return ops.slice_update(cache, (0, 0, 0, 0, 0), corner)

    @contextlib.contextmanager
    def _call_state(self, positions, without_window):
        """keras-hub's `positions` for the rotary embedding, and the window
        left to keras-hub's dense mask, while inside."""
        window = self._sliding_window
        self.__dict__["_positions"] = positions
        if without_window:
            self._sliding_window = None
        try:
            yield
        finally:
            self.__dict__["_positions"] = None
            self._sliding_window = window

    def _project_query(self, query, start_index=0, positions=None):
        if positions is None:
            positions = self._positions
        return super()._project_query(query, start_index, positions)

    def _project_keys_values(self, key, value, start_index=0, positions=None):
        if positions is None:
            positions = self._positions
        return super()._project_keys_values(key, value, start_index, positions)

    def compute_output_shape(self, input_shape):
        batch, length = input_shape[0], input_shape[1]
        heads, size = self.keras_hub_config["num_key_value_heads"], self.key_dim
        return input_shape, (batch, 2, length, heads, size)


class Gemma4TextDecoderBlock(gemma4_decoder_block.Gemma4TextDecoderBlock):
    """keras-hub's Gemma 4 block, handing its attention the mask's parts:
    causal with the padding, or the padding alone for a bidirectional
    model; keras-hub's dense mask where images attend both ways."""

    def _compute_attention_mask(
        self, x, padding_mask, vision_mask, cache, cache_update_index
    ):
        images_both_ways = (
            vision_mask is not None
            and cache is None
            and self.use_vision_bidirectional_attention
            and not self.is_global_attention
        )
        if images_both_ways and not self.use_bidirectional_attention:
            return super()._compute_attention_mask(
                x, padding_mask, vision_mask, cache, cache_update_index
            )
        return decoder_mask(
            x, padding_mask, causal=not self.use_bidirectional_attention
        )


FAMILIES = (
    block_family(
        "Gemma 4",
        "keras_hub.src.models.gemma4.gemma4_backbone:Gemma4Backbone",
        Gemma4TextDecoderBlock,
        {"Gemma4TextAttention": Gemma4Attention},
    ),
)
