"""`AttentionCall`, the `call` of `MultiHeadAttention` as the steps of one
call: its checks, one boolean mask of what the op does not generate, the
projections (rotary positions, the cache, another layer's shared keys and
values), positions on the scores, the attention, then the gate and the
output projection. It reads what the layer's constructor and `build` set and
uses the other bases' methods (`_plan`, `_attend`, `_project_query`,
`_apply_cache`, ...)."""

from keras import ops

from keras_attention._checks import check_attention_shapes, static_shape
from keras_attention.layers._attention_positions import add_position_bias
from keras_attention.layers._segment_ids import (
    check_call_segment_ids,
    document_positions,
    merge_document_mask,
)
from keras_attention.layers.key_value_cache import (
    cache_length,
    check_cache_arguments,
    keys_values_as_cache,
)
from keras_attention.ops.masks import (
    combine_attention_masks,
    hide_unattended_inputs,
    zero_masked_rows,
)
from keras_attention.utils import keras_internals


class AttentionCall:
    """`call` and its argument checks (see the module)."""

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        attention_bias=None,
        segment_ids=None,
        positions=None,
        shared_keys_values=None,
        return_keys_values=False,
    ):
        key = value if key is None else key
        shared = self._read_shared(
            shared_keys_values, cache, segment_ids, cache_update_index is not None
        )
        # Read like a cache: slots with the index, the inputs' positions without.
        slots = cache if shared is None or cache_update_index is None else shared
        self._check_call(
            query, value, key, slots, cache_update_index, attention_bias, positions
        )
        if segment_ids is not None:
            segment_ids = check_call_segment_ids(
                segment_ids,
                query,
                key,
                cache,
                len(self._attention_axes),
                self._options["cache_layout"],
            )
        if slots is not None:  # the new inputs' masks do not describe the cache
            value_mask = key_mask = None
        offset = 0 if cache_update_index is None else cache_update_index
        needs_weights = self._needs_weights(return_attention_scores, training)
        plan = self._plan(
            slots,
            use_causal_mask,
            segment_ids,
            attention_bias,
            needs_weights,
        )

        # 1. One boolean mask of everything that is not generated in the op
        # (a query mask zeroes the output's rows instead, where the plan says
        # so: padding then reaches the op as a mask over keys alone).
        query_length = ops.shape(query)[1]
        key_length = ops.shape(key)[1]
        if cache is not None or shared is not None:
            key_length = cache_length(
                shared_keys_values if cache is None else cache,
                self._options["cache_layout"],
            )
        row_mask = query_mask if plan.query_mask_on_rows else None
        mask = combine_attention_masks(
            None if plan.query_mask_on_rows else query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask=use_causal_mask and not plan.causal_in_op,
            sliding_window=None if plan.window_in_op else self._sliding_window,
            query_length=query_length,
            key_length=key_length,
            offset=offset,
            num_attention_axes=len(self._attention_axes),
        )
        if segment_ids is not None and not plan.segments_in_op:
            mask = merge_document_mask(mask, segment_ids)
        if cache is None and shared is None and not plan.multi_axis:
            key, value = hide_unattended_inputs(
                key,
                value,
                mask,
                query_length,
                key_length,
                plan.causal_in_op,
                query_mask=row_mask,
            )

        # 2. Projections, with rotary positions; the cache.
        with keras_internals.hidden_keras_masks(query, key, value):
            query_positions = key_positions = positions
            restart = segment_ids is not None and cache is None
            if self._rotary is not None and restart and positions is None:
                query_positions, key_positions = document_positions(segment_ids)
            projected_query, gate = self._project_query(query, offset, query_positions)
            if shared is not None:
                projected_key, projected_value = shared
            elif cache is None:
                projected_key, projected_value = self._project_keys_values(
                    key, value, positions=key_positions
                )
            else:
                cache, projected_key, projected_value = self._apply_cache(
                    cache, cache_update_index, key, value, key_positions
                )

        # 3. Positions on the scores, then attention.
        attention_bias = add_position_bias(
            attention_bias,
            plan,
            self._alibi_slopes,
            self._relative_bias,
            projected_query,
            projected_key,
            offset,
        )
        output, scores = self._attend(
            projected_query,
            projected_key,
            projected_value,
            mask,
            training,
            return_attention_scores,
            self._op_arguments(plan, attention_bias, segment_ids),
        )

        # 4. Gate and output projection.
        if row_mask is not None:
            output = zero_masked_rows(output, row_mask)
        if self._options["output_dropout"]:
            output = self.output_dropout(output, training=training)
        if gate is not None:
            output = output * ops.cast(gate, output.dtype)
        results = [self._output_dense(output)]
        if return_attention_scores:
            results.append(scores)
        if cache is not None:
            results.append(cache)
        elif return_keys_values:
            results.append(
                keys_values_as_cache(
                    projected_key, projected_value, self._options["cache_layout"]
                )
            )
        return results[0] if len(results) == 1 else tuple(results)

    def _check_call(
        self, query, value, key, cache, cache_update_index, bias, positions
    ):
        shapes = (static_shape(query), static_shape(value), static_shape(key))
        check_attention_shapes(*shapes)
        check_cache_arguments(query, cache, cache_update_index)
        if positions is not None and self._rotary is None:
            raise ValueError(
                "`positions` are the rotary encoding's: the layer needs one "
                "(`attention_positions='rotary'` or `rotary_embedding`)."
            )
        if self._options["use_sinks"] and (
            len(self._attention_axes) != 1 or self._custom_attention()
        ):
            raise ValueError(
                "`use_sinks=True` needs one attention axis and the layer's own "
                f"`_compute_attention`; received attention_axes="
                f"{self._attention_axes} in {type(self).__name__}."
            )
        if bias is not None and len(query.shape) != 3:
            raise ValueError(
                "`attention_bias` needs (batch, length, dim) inputs attending "
                f"over one sequence axis; received query shape {shapes[0]}."
            )
