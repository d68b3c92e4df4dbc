"""Qwen 3.5 (keras-hub's `Qwen3_5Backbone`, `Qwen3_5MoeBackbone`) with our
attention in its full-attention layers.

Qwen 3.5 is a hybrid: three layers of four (by default) are Gated DeltaNet
linear attention, which stays keras-hub's; the others are grouped-query
attention, which becomes ours. keras-hub's full attention, as our layer's
options: the query and key normalized per head by keras-hub's `(1 + w)` RMS
norm (`query_norm`, `key_norm`), rotary positions on the first
`partial_rotary_factor` of each head (`rotary_embedding`, the rest passed
through), multi-axis rotary positions `(B, 4, T)` where the backbone has an
`mrope_section` (the `positions` call argument), and a sigmoid output gate
packed in the query kernel `(dim, heads, 2 * head_dim)` (`packed_gate`).

keras-hub 0.32 applies its `sliding_window_size` (32,768 by default) only on
its unfused path: on TensorFlow. On JAX and PyTorch its attention takes
`ops.dot_product_attention` first and attends to every earlier key, as
Hugging Face's Qwen 3.5 does (its full-attention layers have no window). The
adapter matches the unfused path by default (`sliding_window_keys=
"keras_hub"`: the last `sliding_window_size` keys) and takes every earlier key
with `sliding_window_keys="paper"`.

A swapped `Qwen3_5CausalLM` (`swap_attention(causal_lm)`) builds its decoding
cache for the full-attention layers only (keras-hub's holds keys and values
for every layer, the DeltaNet ones included, and DeltaNet states for every
layer): see `AttentionOnlyCache`.

References:
    - [Qwen Team, 2026. Qwen3.5: Towards Native Multimodal Agents](
      https://qwen.ai/blog?id=qwen3.5)
    - [Yang et al., 2024. Gated Delta Networks: Improving Mamba2 with Delta
      Rule](https://arxiv.org/abs/2412.06464)
    - [Qiu et al., 2025. Gated Attention for Large Language Models](
      https://arxiv.org/abs/2505.06708)
"""

import threading

from keras import ops, tree
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding
from keras_hub.src.models.qwen3_5 import qwen3_5_attention, qwen3_5_decoder
from keras_hub.src.models.qwen3_5.qwen3_5_layers import Qwen3_5LayerNorm
from keras_hub.src.models.qwen3_5_moe import qwen3_5_moe_decoder

from keras_attention._checks import check_choice
from keras_attention.integrations.keras_hub.attention import (
    KerasHubRotaryAttention,
    query_key_norms,
)
from keras_attention.integrations.keras_hub.masks import HandsMaskParts
from keras_attention.integrations.keras_hub.swap import (
    block_family,
    registered_subclass,
)

# keras-hub's unfused window (`sliding_window_size` keys), or every earlier
# key (its fused path's and Hugging Face's).
SLIDING_WINDOW_KEYS = ("keras_hub", "paper")
FULL_ATTENTION = "full_attention"


class Qwen3_5RotaryEmbedding(RotaryEmbedding):
    """keras-hub's rotary embedding as its Qwen 3.5 attention applies it: on
    the first `rotary_dim` features of each head only (the rest passed
    through), and, where the backbone has an `mrope_section` and the call
    gets `(B, 4, T)` positions (text, temporal, height, width), keras-hub's
    interleaved multi-axis rotary (`_apply_mrope`) at those positions.

    Called as our attention calls a rotary layer. `(B, 4, T)` positions
    without an `mrope_section` are ignored, as keras-hub ignores them (the
    positions from `start_index` then); `(B, T)` positions (our packed
    documents') rotate the whole batch at them.

    Args:
        rotary_dim: the rotated features of each head, `int(head_dim *
            partial_rotary_factor)`.
        mrope_section: keras-hub's `[s_t, s_h, s_w]` (pairs of rotated
            features per axis), or None.
        **kwargs: `RotaryEmbedding`'s arguments.
    """

    def __init__(self, rotary_dim, mrope_section=None, **kwargs):
        super().__init__(**kwargs)
        self.rotary_dim = rotary_dim
        self.mrope_section = mrope_section

    def call(self, inputs, start_index=0, positions=None):
        rotated = inputs[..., : self.rotary_dim]
        if positions is not None and len(positions.shape) == 3:
            if self.mrope_section is not None:
                rotated = qwen3_5_attention._apply_mrope(
                    rotated, self, positions, self.mrope_section, self.rotary_dim
                )
                return self._with_rest(rotated, inputs)
            positions = None
        rotated = super().call(rotated, start_index=start_index, positions=positions)
        return self._with_rest(rotated, inputs)

    def _with_rest(self, rotated, inputs):
        if self.rotary_dim == inputs.shape[-1]:
            return rotated
        return ops.concatenate([rotated, inputs[..., self.rotary_dim :]], axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(rotary_dim=self.rotary_dim, mrope_section=self.mrope_section)
        return config


class Qwen3_5Attention(KerasHubRotaryAttention):
    """keras-hub's `Qwen3_5Attention` (Qwen 3.5 and its MoE) as our
    `GroupedQueryAttention`: no biases, the query and key normalized by
    keras-hub's `Qwen3_5LayerNorm` (`query_norm`, `key_norm`), partial and
    multi-axis rotary positions (`Qwen3_5RotaryEmbedding`), the sigmoid gate
    packed in the query kernel (`packed_gate`), dropout on the attention
    output, scores scaled by `1 / sqrt(head_dim)`, and keras-hub's unfused
    window by default. The weights keep keras-hub's order and paths: query,
    its norm, key, its norm, value, output.

    keras-hub's block calls it with `position_ids` (`(B, 4, T)` or None),
    which reach the rotary embedding (`positions`).

    Args:
        num_query_heads, num_key_value_heads, head_dim,
        partial_rotary_factor, rope_max_wavelength, rope_scaling_factor,
        kernel_initializer, dropout, layer_norm_epsilon, sliding_window_size,
        mrope_section: keras-hub's `Qwen3_5Attention`'s.
        **kwargs: `sliding_window_keys`: `"keras_hub"` (the default:
            keras-hub's unfused path, TensorFlow's, the last
            `sliding_window_size` keys) or `"paper"` (every earlier key:
            keras-hub's fused path on JAX and PyTorch, and Hugging Face's);
            our other options (see `KerasHubAttention`).
    """

    def __init__(
        self,
        num_query_heads,
        num_key_value_heads,
        head_dim,
        partial_rotary_factor=0.25,
        rope_max_wavelength=10000,
        rope_scaling_factor=1.0,
        kernel_initializer="glorot_uniform",
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        sliding_window_size=None,
        mrope_section=None,
        **kwargs,
    ):
        keys = kwargs.pop("sliding_window_keys", "keras_hub")
        check_choice("sliding_window_keys", keys, SLIDING_WINDOW_KEYS)
        dtype = kwargs.get("dtype")
        window = sliding_window_size if keys == "keras_hub" else None
        norms = query_key_norms(
            Qwen3_5LayerNorm, head_dim=head_dim, epsilon=layer_norm_epsilon, dtype=dtype
        )
        rotary = Qwen3_5RotaryEmbedding(
            rotary_dim=int(head_dim * partial_rotary_factor),
            mrope_section=mrope_section,
            max_wavelength=rope_max_wavelength,
            scaling_factor=rope_scaling_factor,
            dtype=dtype,
        )
        super().__init__(
            Qwen3_5Attention.__init__,
            locals(),
            rotary_embedding=rotary,
            head_dim=head_dim,
            packed_gate=True,
            sliding_window=window or None,
            **norms,
            **kwargs,
        )
        if keys != "keras_hub":
            self.keras_hub_config["sliding_window_keys"] = keys

    def __call__(self, *args, position_ids=None, **kwargs):
        # keras-hub's block names the rotary positions `position_ids`; our
        # call (`KerasHubAttention`'s) takes them as `positions`.
        if position_ids is not None:
            kwargs["positions"] = position_ids
        return super().__call__(*args, **kwargs)


class Qwen3_5TransformerDecoder(
    HandsMaskParts, qwen3_5_decoder.Qwen3_5TransformerDecoder
):
    """keras-hub's Qwen 3.5 block, handing its full attention the mask's
    parts (its DeltaNet layers take the padding mask, as in keras-hub)."""


class Qwen3_5MoeTransformerDecoder(
    HandsMaskParts, qwen3_5_moe_decoder.Qwen3_5MoeTransformerDecoder
):
    """keras-hub's Qwen 3.5 MoE block, handing its full attention the mask's
    parts (its experts and DeltaNet layers take the padding mask, as in
    keras-hub)."""


class AttentionOnlyCache:
    """`_build_cache` and `call_with_cache` of a swapped Qwen 3.5 causal LM:
    the cache `(keys_values, conv, recurrent)` holds the keys and values of
    the full-attention layers alone, `(B, attention layers, 2, S, N, H)` (or
    our int8 pair with `cache_dtype="int8"`), and the DeltaNet states of the
    DeltaNet layers alone (`(B, DeltaNet layers, ...)`, keras-hub's shapes
    otherwise). keras-hub's holds all three for every layer: with three
    DeltaNet layers of four, four times the keys and values."""

    def _build_cache(
        self,
        token_ids,
        padding_mask=None,
        img_embeddings=None,
        vision_indices=None,
        position_ids=None,
    ):
        batch_size, max_length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        cache = empty_cache(self, batch_size, max_length)
        _, hidden_states, cache = self.call_with_cache(
            token_ids,
            cache,
            0,
            padding_mask=padding_mask,
            img_embeddings=img_embeddings,
            vision_indices=vision_indices,
            position_ids=position_ids,
        )
        return hidden_states, cache

    def call_with_cache(
        self,
        token_ids,
        cache,
        cache_update_index,
        padding_mask=None,
        img_embeddings=None,
        vision_indices=None,
        position_ids=None,
    ):
        backbone = self.backbone
        x = backbone.token_embedding(token_ids)
        if img_embeddings is not None and vision_indices is not None:
            if hasattr(backbone, "interleave_embeddings"):
                x = backbone.interleave_embeddings(
                    image_embeddings=img_embeddings,
                    text_embeddings=x,
                    vision_indices=vision_indices,
                )
        keys_values, conv, recurrent = cache
        new_keys_values, new_conv, new_recurrent = [], [], []
        for block in backbone.transformer_layers:
            if block.layer_type == FULL_ATTENTION:
                i = len(new_keys_values)
                x, layer_cache, _, _ = block.call_and_update_cache(
                    x,
                    kv_cache=_layer(keys_values, i),
                    conv_cache=None,
                    recurrent_cache=None,
                    cache_update_index=cache_update_index,
                    decoder_padding_mask=padding_mask,
                    position_ids=position_ids,
                )
                new_keys_values.append(layer_cache)
            else:
                i = len(new_conv)
                x, _, layer_conv, layer_recurrent = block.call_and_update_cache(
                    x,
                    kv_cache=None,
                    conv_cache=_layer(conv, i),
                    recurrent_cache=_layer(recurrent, i),
                    cache_update_index=cache_update_index,
                    decoder_padding_mask=padding_mask,
                )
                new_conv.append(layer_conv)
                new_recurrent.append(layer_recurrent)
        cache = (
            _stacked(new_keys_values, keys_values),
            _stacked(new_conv, conv),
            _stacked(new_recurrent, recurrent),
        )
        hidden_states = x = backbone.layer_norm(x)
        logits = backbone.token_embedding(x, reverse=True)
        return logits, hidden_states, cache


def _layer(cache, i):
    """Layer `i` of a cache stacked on axis 1 (a tensor or our int8 pair)."""
    return tree.map_structure(lambda part: part[:, i, ...], cache)


def _stacked(parts, empty):
    """The layers' caches stacked on axis 1, or `empty` where there are
    none (a model without layers of that kind)."""
    if not parts:
        return empty
    return tree.map_structure(lambda *layers: ops.stack(layers, axis=1), *parts)


def empty_cache(causal_lm, batch_size, max_length, dtype=None):
    """The empty cache of a swapped Qwen 3.5 causal LM (`AttentionOnlyCache`):
    our attention layers' own (`initial_cache`, in `dtype` or their
    `cache_dtype`) stacked over the full-attention layers, and keras-hub's
    DeltaNet states over the DeltaNet layers."""
    backbone = causal_lm.backbone
    blocks = backbone.transformer_layers
    attention = [b._self_attention_layer for b in blocks if _is_attention(b)]
    linear = len(blocks) - len(attention)
    caches = [a.initial_cache(batch_size, max_length, dtype=dtype) for a in attention]
    keys_values = _stacked(caches, ops.zeros((batch_size, 0), causal_lm.compute_dtype))
    key_dim = backbone.linear_num_key_heads * backbone.linear_key_head_dim
    value_dim = backbone.linear_num_value_heads * backbone.linear_value_head_dim
    conv = ops.zeros(
        (
            batch_size,
            linear,
            2 * key_dim + value_dim,
            backbone.linear_conv_kernel_dim - 1,
        ),
        dtype=causal_lm.compute_dtype,
    )
    recurrent = ops.zeros(
        (
            batch_size,
            linear,
            backbone.linear_num_value_heads,
            backbone.linear_key_head_dim,
            backbone.linear_value_head_dim,
        ),
        dtype="float32",
    )
    return keys_values, conv, recurrent


def _is_attention(block):
    return block.layer_type == FULL_ATTENTION


_LOCK = threading.Lock()
# keras-hub's task class -> its subclass with `AttentionOnlyCache`.
_TASKS = {}


def attention_only_cache_class(task_class):
    """The registered subclass of keras-hub's Qwen 3.5 causal LM class whose
    `generate` decodes over `AttentionOnlyCache`'s cache (float, or int8
    with `cache_dtype="int8"`): the task class `swap_attention` builds."""
    task_class = getattr(task_class, "keras_hub_task_class", task_class)
    with _LOCK:
        if task_class in _TASKS:
            return _TASKS[task_class]
        _TASKS[task_class] = registered_subclass(
            task_class,
            {
                "_build_cache": AttentionOnlyCache._build_cache,
                "call_with_cache": AttentionOnlyCache.call_with_cache,
                "__module__": __name__,
                "__doc__": (
                    f"keras-hub's `{task_class.__name__}` with keras_attention's "
                    "attention, its decoding cache for the full-attention layers "
                    "only (`keras_attention.integrations.keras_hub.qwen3_5."
                    "AttentionOnlyCache`)."
                ),
                "keras_hub_task_class": task_class,
            },
        )
    return _TASKS[task_class]


def _family(name, backbone, package, block):
    """The family of keras-hub's `backbone` class in `keras_hub.src.models.
    {package}`: our attention in its decoder module, `block` in its
    backbone module, its causal LM with `AttentionOnlyCache`."""
    return block_family(
        name,
        f"keras_hub.src.models.{package}.{package}_backbone:{backbone}",
        block,
        {"Qwen3_5Attention": Qwen3_5Attention},
        task_class=attention_only_cache_class,
    )


FAMILIES = (
    _family("Qwen 3.5", "Qwen3_5Backbone", "qwen3_5", Qwen3_5TransformerDecoder),
    _family(
        "Qwen 3.5 MoE",
        "Qwen3_5MoeBackbone",
        "qwen3_5_moe",
        Qwen3_5MoeTransformerDecoder,
    ),
)
