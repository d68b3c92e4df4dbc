"""How `MultiHeadAttention` attends over its projected queries
`(B, T, N, key_dim)` and keys and values `(B, S, N_kv, dim)`.

`AttentionPaths` holds the layer's side: `_plan` (what a call passes to the
op, `layers.attention_plan`), `_op_arguments`, `_needs_weights`,
`_custom_attention`, and `_compute_attention`, Keras' override point, which
takes one of the paths below (`_attend` calls it as Keras' layer does, for
the subclasses that override it). It reads what the layer's constructor sets
(`_options`, `_attention_axes`, `_sliding_window`, `_alibi_slopes`,
`_relative_bias`, `_flash_attention`, `_chunk_size`, `_dropout_layer`) and
records the path taken (`_record_path`, read as `attention_path`).

The paths: the attention op alone (a backend's fused kernel, the chunked or
the standard path, choosing which), the standard path that also gives the
weights, and Keras' einsum formulation over several attention axes."""

import functools

from keras import ops

from keras_attention.layers import _attention_options
from keras_attention.layers._attention_positions import positions_in_op
from keras_attention.layers._segment_ids import merge_document_mask
from keras_attention.layers.attention_plan import plan_attention
from keras_attention.ops.attention import (
    apply_attention_weights,
    attention_path,
    attention_weights,
    dot_product_attention,
)
from keras_attention.ops.masks import causal_mask, merge_masks, sliding_window_mask
from keras_attention.ops.multi_axis import (
    apply_multi_axis_weights,
    multi_axis_attention_weights,
)


class AttentionPaths:
    """`_compute_attention` of `MultiHeadAttention` and what decides its path
    (see the module)."""

    def _plan(self, cache, causal, segment_ids, bias, needs_weights):
        """What this call passes to the op (`layers.attention_plan`)."""
        return plan_attention(
            num_attention_axes=len(self._attention_axes),
            cached=cache is not None,
            custom_attention=self._custom_attention(),
            use_causal_mask=causal,
            sliding_window=self._sliding_window,
            alibi=self._alibi_slopes is not None,
            segment_ids=segment_ids is not None,
            relative=self._relative_bias is not None,
            dense_bias=bias is not None,
            needs_weights=needs_weights,
        )

    def _op_arguments(self, plan, attention_bias, segment_ids):
        """The arguments of `_compute_attention` beyond Keras': the bias,
        and what the plan leaves to the op."""
        arguments = positions_in_op(plan, self._alibi_slopes, self._relative_bias)
        if plan.causal_in_op:
            arguments["use_causal_mask"] = True
        if plan.window_in_op:
            arguments["sliding_window"] = self._sliding_window
        if attention_bias is not None:
            arguments["attention_bias"] = attention_bias
        if plan.segments_in_op:
            arguments["segment_ids"] = segment_ids
        return arguments

    def _custom_attention(self):
        """Whether a subclass overrides `_compute_attention` (then it gets
        every mask materialized, as from Keras' layer)."""
        # MultiHeadAttention's own, inherited from this class.
        own = AttentionPaths._compute_attention
        return type(self)._compute_attention is not own

    def _needs_weights(self, return_attention_scores, training):
        """Whether the `(T, S)` weights must exist: returned, or dropped out
        by a subclass's `_compute_attention` or over several axes (the op
        drops them out inside every path, fused kernels included)."""
        if return_attention_scores:
            return True
        dropped_out = bool(training) and self.dropout > 0
        return dropped_out and (
            self._custom_attention() or len(self._attention_axes) != 1
        )

    def _attend(self, query, key, value, mask, training, return_scores, extra):
        """Calls `_compute_attention` the way Keras' layer calls it, for the
        subclasses that override it."""
        return self._compute_attention(
            query, key, value, mask, training, return_scores, **extra
        )

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
        sliding_window=None,
        attention_bias=None,
        alibi_slopes=None,
        segment_ids=None,
        score_mod=None,
        score_mod_inputs=(),
    ):
        """Attention of projected `query` `(B, T, N, key_dim)` over `key` and
        `value` `(B, S, N_kv, dim)`; returns `(output (B, T, N, value_dim),
        weights (B, N, T, S) or None)`.

        Keras' override point, with its signature: `attention_mask` is
        `(B, T, S)` (or `(T, S)`, `(B, N, T, S)`), True = attend, and
        `use_causal_mask` adds the causal mask without materializing it;
        so do `sliding_window` its band, `alibi_slopes` ALiBi's bias and
        `segment_ids` the documents of packed sequences and `score_mod` (with
        `score_mod_inputs`) T5's bias from the layer's table (passed only to
        this class's own method; a subclass's gets them inside the mask and
        the bias).
        `attention_bias` is added to the scaled scores.
        """
        if self._flash_attention and return_attention_scores:
            # The first sentence is Keras' own, which code may match on.
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Please disable flash attention to access"
                " attention scores. (flash_attention=True takes the chunked "
                "path, which never materializes the weights; flash_attention="
                "None keeps the automatic choice and gives them.)"
            )
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        scale = _attention_options.attention_scale(self._options, self.key_dim)
        dropout = functools.partial(self._dropout_layer, training=training)
        if len(query.shape) != 4:
            self._record_path("multi_axis")
            axes = self._attention_axes
            return attend_over_axes(
                query, key, value, attention_mask, use_causal_mask, axes, scale, dropout
            )
        if attention_mask is not None and len(attention_mask.shape) == 3:
            attention_mask = ops.expand_dims(attention_mask, 1)
        options = {
            "mask": attention_mask,
            "is_causal": use_causal_mask,
            "sliding_window": sliding_window,
            "bias": attention_bias,
            "alibi_slopes": alibi_slopes,
            "segment_ids": segment_ids,
            "attn_logits_soft_cap": self._options["soft_cap"],
            "sinks": self.sinks if self._options["use_sinks"] else None,
        }
        if self._needs_weights(return_attention_scores, training):
            self._record_path("standard")
            return attend_with_weights(query, key, value, scale, dropout, **options)
        # The layer's own bias, already in `attention_bias`: T5's, or ALiBi's
        # when `call` could not leave it to the op.
        own_bias = (self._relative_bias is not None and score_mod is None) or (
            self._alibi_slopes is not None and alibi_slopes is None
        )
        # Dropout inside the op, on whichever path serves the call.
        options["dropout_rate"] = self.dropout if training else 0.0
        path, arguments = op_path(
            query,
            key,
            value,
            flash_attention=self._flash_attention,
            chunk_size=self._chunk_size,
            own_bias=own_bias,
            score_mod=score_mod,
            **options,
        )
        self._record_path(path)
        output = dot_product_attention(
            query,
            key,
            value,
            scale=scale,
            score_mod_inputs=score_mod_inputs,
            seed=self._dropout_layer.seed_generator
            if arguments["dropout_rate"]
            else None,
            **arguments,
        )
        return output, None


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
