"""Gemma 3n (keras-hub's `Gemma3nBackbone`) with our attention in its text
decoder.

keras-hub's `Gemma3nTextAttention`, in our layer's options: `Dense`
projections `q_proj`, `k_proj`, `v_proj` and `o_proj` with flat kernels
(`kernel_layout="flat"`: `(dim, heads * head_dim)`, `(heads * head_dim,
dim)`), RMS norms of the projected queries and keys (`q_norm`, `k_norm`,
each with a scale) and of the values (`v_norm`, without one), the scores
unscaled (`scale=1`, the norms stand in for `1 / sqrt(head_dim)`), keras-hub's
rotary embedding (the layer's wavelength), dropout on the attention weights,
a window on the `"sliding_attention"` layers of `sliding_window` keys, the
query's own included (as Hugging Face's Gemma 3n), and keras-hub's decoding
cache `(B, 2, N_kv, S, head_dim)`, heads first (`cache_layout=
"heads_first"`). keras-hub makes the norms after the projections, so their
weights come after the output's (`_norms_after_output`).

The last `num_kv_shared_layers` layers share keys and values: each attends
to those of the last earlier layer of its type (`is_kv_shared_layer`),
which keras-hub's text model hands it as its `cache`, and projects none of
its own, though it keeps keras-hub's (unused) key and value weights. Ours
returns its keys and values without a cache too, for them.

keras-hub's audio tower (chunked local attention with a learned relative
position bias and a logit cap) and its vision tower (MobileNet V5) keep
their attention.

References:
    - [Gemma Team, 2025. Gemma 3n model card](
      https://ai.google.dev/gemma/docs/gemma-3n/model_card)
    - [Gemma Team, 2025. Gemma 3 Technical Report](
      https://arxiv.org/abs/2503.19786)
"""

from keras import ops
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.gemma3n import gemma3n_text_decoder
from keras_hub.src.models.gemma3n.rms_normalization import Gemma3nRMSNorm

from keras_attention.integrations.keras_hub.attention import (
    PROJ_NAMES,
    KerasHubAttention,
    keras_hub_arguments,
    ported_arguments,
)
from keras_attention.integrations.keras_hub.gemma import _keep_slice
from keras_attention.integrations.keras_hub.masks import (
    attention_call_arguments,
    decoder_mask,
)
from keras_attention.integrations.keras_hub.swap import Family
from keras_attention.layers.grouped_query_attention import GroupedQueryAttention


class Gemma3nAttention(KerasHubAttention):
    """keras-hub's `Gemma3nTextAttention` as our `GroupedQueryAttention`
    (see the module): called as keras-hub's, `layer(hidden_states,
    attention_mask, cache=None, cache_update_index=0,
    cache_update_mask=None, training=False)`, it returns `(output, None,
    cache)`, the cache `(B, 2, N_kv, S, head_dim)` being, without one given,
    this call's keys and values (for the layers that share them). A layer
    with `is_kv_shared_layer` attends to the `cache` it is given (another
    layer's) and returns it as it came.

    Args:
        hidden_size, num_attention_heads, num_key_value_heads, head_dim,
        attention_dropout, attention_bias, rms_norm_eps,
        rope_max_wavelength, rope_scaling_factor, sliding_window,
        is_kv_shared_layer: keras-hub's `Gemma3nTextAttention`'s.
        **kwargs: our options (see `KerasHubAttention`).
    """

    _projection_names = PROJ_NAMES
    _norms_after_output = True

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        attention_dropout,
        attention_bias,
        rms_norm_eps,
        rope_max_wavelength=10000,
        rope_scaling_factor=1.0,
        sliding_window=None,
        is_kv_shared_layer=False,
        **kwargs,
    ):
        config = keras_hub_arguments(Gemma3nAttention.__init__, locals())
        dtype = kwargs.get("dtype")
        norms = {
            f"{name}_norm": Gemma3nRMSNorm(
                dim=head_dim,
                eps=rms_norm_eps,
                with_scale=name != "value",
                name=f"{name[0]}_norm",
                dtype=dtype,
            )
            for name in ("query", "key", "value")
        }
        super().__init__(
            config,
            **ported_arguments(
                num_attention_heads, num_key_value_heads, attention_bias
            ),
            head_dim=head_dim,
            dropout=attention_dropout,
            sliding_window=sliding_window,
            scale=1.0,
            cache_layout="heads_first",
            rotary_embedding=RotaryEmbedding(
                max_wavelength=rope_max_wavelength,
                scaling_factor=rope_scaling_factor or 1.0,
                dtype=dtype,
            ),
            **norms,
            **kwargs,
        )
        self.is_kv_shared_layer = is_kv_shared_layer

    def __call__(self, hidden_states, *args, **kwargs):
        # keras-hub's block passes the mask second, positionally, where
        # Keras takes tensors only: ours is a `DecoderMask`.
        if args:
            kwargs["attention_mask"], args = args[0], args[1:]
        return super().__call__(hidden_states, *args, **kwargs)

    def build(self, inputs_shape, value_shape=None, key_shape=None):
        if len(inputs_shape) == 2:
            # keras-hub's text model builds its blocks with `(B, dim)`
            # (its input ids' shape less its last axis, plus `dim`).
            inputs_shape = (inputs_shape[0], None, inputs_shape[1])
        super().build(inputs_shape)

    def call(
        self,
        hidden_states,
        attention_mask=None,
        cache=None,
        cache_update_index=0,
        cache_update_mask=None,
        training=False,
    ):
        if self.is_kv_shared_layer:
            return self._call_shared(
                hidden_states, attention_mask, cache, cache_update_index, training
            )
        if cache is None:
            output, keys_values = self._call_ours(
                hidden_states, attention_mask, training, return_keys_values=True
            )
            return output, None, keys_values
        output, new_cache = self._call_ours(
            hidden_states,
            attention_mask,
            training,
            cache=cache,
            cache_update_index=cache_update_index,
        )
        if cache_update_mask is not None:
            new_cache = _keep_unmasked_updates(
                cache,
                new_cache,
                cache_update_index,
                ops.shape(hidden_states)[1],
                cache_update_mask,
            )
        return output, None, new_cache

    def _call_shared(self, hidden_states, mask, shared, index, training):
        """keras-hub's call of a layer attending to another's keys and values
        `shared` `(B, 2, N_kv, S, head_dim)`: as the inputs' own keys (their
        padding a mask of keys, no dense mask) where they are as many and
        start at 0 (a call without a cache, or the prompt's), else as cache
        slots with the queries from `index`. `shared` is returned as it
        came."""
        length = hidden_states.shape[1]
        as_inputs = (
            isinstance(index, int)
            and index == 0
            and length is not None
            and length == shared.shape[3]
        )
        output = self._call_ours(
            hidden_states,
            mask,
            training,
            slots=None if as_inputs else shared,
            shared_keys_values=shared,
            cache_update_index=None if as_inputs else index,
        )
        return output, None, shared

    def _call_ours(self, hidden_states, mask, training, slots=None, **arguments):
        """Our layer's call on `hidden_states` with keras-hub's `mask` (a
        `DecoderMask` or a dense one) over `slots` (a cache's, or the
        inputs' without one) and our call's other `arguments`."""
        slots = arguments.get("cache") if slots is None else slots
        return GroupedQueryAttention.call(
            self,
            hidden_states,
            hidden_states,
            training=training,
            **attention_call_arguments(mask, hidden_states, slots, self.packed),
            **arguments,
        )

    def compute_output_spec(self, hidden_states, attention_mask=None, cache=None, **kw):
        output = super().compute_output_spec(hidden_states)
        return output, None, cache


def _keep_unmasked_updates(old, new, start, length, update_mask):
    """The heads-first cache `new` `(B, 2, N, S, H)` with its entries at
    `[start, start + length)` of the rows `update_mask` `(B, length)` holds
    False taken back from `old` (keras-hub's `generate` keeps the prompt's
    entries in the rows still reading their prompt)."""
    keep = ops.cast(update_mask, "bool")[:, None, None, :, None]
    return _keep_slice(old, new, start, length, keep, axis=3)


class Gemma3nDecoderBlock(gemma3n_text_decoder.Gemma3nTextDecoderBlock):
    """keras-hub's Gemma 3n block, handing its attention the mask's parts
    (the padding; the attention adds the causal mask and its window)."""

    def _compute_attention_mask(self, x, padding_mask, cache, cache_update_index):
        return decoder_mask(x, padding_mask)


FAMILIES = (
    Family(
        name="Gemma 3n",
        backbones=("keras_hub.src.models.gemma3n.gemma3n_backbone:Gemma3nBackbone",),
        replacements={
            "keras_hub.src.models.gemma3n.gemma3n_text_decoder:Gemma3nTextAttention": (
                Gemma3nAttention
            ),
            "keras_hub.src.models.gemma3n.gemma3n_text_model:Gemma3nTextDecoderBlock": (
                Gemma3nDecoderBlock
            ),
        },
    ),
)
