"""The paths of `MultiHeadAttention._compute_attention` over projected
queries `(B, T, N, key_dim)` and keys and values `(B, S, N_kv, dim)`: the
attention op alone (a backend's fused kernel, the chunked or the standard
path, choosing which), the standard path that also gives the weights, and
Keras' einsum formulation over several attention axes."""

from keras import ops

from keras_attention.layers._segment_ids import merge_document_mask
from keras_attention.ops.attention import (
    apply_attention_weights,
    attention_path,
    attention_weights,
)
from keras_attention.ops.masks import causal_mask, merge_masks, sliding_window_mask
from keras_attention.ops.multi_axis import (
    apply_multi_axis_weights,
    multi_axis_attention_weights,
)


def op_path(
    query, key, value, *, flash_attention, chunk_size, own_bias, score_mod, **arguments
):
    """`(path, arguments)`: the path the attention op takes when the weights
    are not needed (`ops.plan.plan_kernel` decides), and the keyword
    arguments of `dot_product_attention` that take it.

    `arguments` are `dot_product_attention`'s masks and biases (`mask`,
    `is_causal`, `sliding_window`, `bias`, `alibi_slopes`, `segment_ids`,
    `attn_logits_soft_cap`, `sinks`, `dropout_rate`);
    `flash_attention` and `chunk_size` the layer's; `own_bias` whether `bias`
    holds a bias the layer made itself (T5's, or ALiBi's where the op cannot
    compute it), which keeps the `keras.ops` path standard: the chunked path
    never builds the `(T, S)` scores a bias adds to, and the layer's forced
    chunk size serves its other calls.
    """
    if own_bias:
        chunk_size = None
        flash_attention = False if flash_attention is False else None
    arguments.update(
        score_mod=score_mod, flash_attention=flash_attention, chunk_size=chunk_size
    )
    return attention_path(query, value, **arguments), arguments


def attend_with_weights(
    query,
    key,
    value,
    scale,
    dropout,
    *,
    mask,
    is_causal,
    sliding_window,
    bias,
    alibi_slopes,
    segment_ids,
    attn_logits_soft_cap,
    sinks,
):
    """`(output, weights)` on the standard path, every mask materialized
    (`mask`: None or `(B, N, T, S)`; the documents and the window added to
    it), the weights (with the `sinks`' share taken) passed through
    `dropout`."""
    if segment_ids is not None:
        mask = merge_document_mask(mask, segment_ids)
        if len(mask.shape) == 3:
            mask = ops.expand_dims(mask, 1)
    if sliding_window is not None:
        band = sliding_window_mask(
            ops.shape(query)[1], ops.shape(key)[1], sliding_window
        )
        mask = merge_masks(mask, band[None, None])
    weights = attention_weights(
        query,
        key,
        mask,
        is_causal,
        scale,
        bias=bias,
        alibi_slopes=alibi_slopes,
        attn_logits_soft_cap=attn_logits_soft_cap,
        sinks=sinks,
    )
    kept = dropout(weights)
    return apply_attention_weights(kept, value, mask, is_causal), weights


def attend_over_axes(query, key, value, mask, causal, axes, scale, dropout):
    """`(output, weights)` of Keras' einsum formulation over the attention
    `axes`, with a softmax over all of them that gives fully masked queries
    zeros; `causal` along the first attention axis, as in Keras."""
    if causal:
        mask = merge_masks(
            mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1])[None]
        )
    weights = multi_axis_attention_weights(query, key, mask, axes, scale)
    return apply_multi_axis_weights(dropout(weights), value, axes), weights
