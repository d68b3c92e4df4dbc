import math
import string

import keras
from keras import constraints, initializers, ops, regularizers, tree

from keras_attention._checks import (
    check_attention_shapes,
    check_positive_int,
    check_rate,
    static_shape,
)
from keras_attention.layers.attention_plan import plan_attention
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.key_value_cache import (
    cache_slots,
    check_cache,
    check_cache_dtype,
    empty_cache,
    read_cache,
    stored_keys_values,
    write_cache,
)
from keras_attention.layers.positions import ATTENTION_POSITIONS, positions_from_alias
from keras_attention.ops.attention import (
    apply_attention_weights,
    attention_path,
    attention_weights,
    dot_product_attention,
)
from keras_attention.ops.fused import KERNELS
from keras_attention.ops.masks import (
    causal_mask,
    combine_attention_masks,
    hide_unattended_inputs,
    merge_masks,
    sliding_window_mask,
)
from keras_attention.ops.multi_axis import (
    apply_multi_axis_weights,
    attention_equations,
    multi_axis_attention_weights,
)
from keras_attention.ops.positions import (
    alibi_bias,
    check_segment_ids,
    segment_positions,
)
from keras_attention.utils import keras_internals
from keras_attention.utils.initializers import clone_initializer


def check_key_value_heads(num_heads, num_key_value_heads):
    """Raises a ValueError for key/value heads that do not divide the query
    heads."""
    check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
    if num_key_value_heads is not None and num_heads % num_key_value_heads:
        raise ValueError(
            "`num_key_value_heads` must divide `num_heads` (each group of "
            f"query heads shares one key/value head); received num_heads="
            f"{num_heads}, num_key_value_heads={num_key_value_heads}."
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadAttention(
    keras_internals.KeepsKerasMasksWhenCast, keras.layers.MultiHeadAttention
):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    `MultiHead(Q, K, V) = Concat(head_1..head_h) W^O` with
    `head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V`.

    A subclass of `keras.layers.MultiHeadAttention` (as keras-hub's
    `CachedMultiHeadAttention` is) with Keras' constructor and call arguments,
    config, weights and sublayers (`_query_dense`, `_key_dense`,
    `_value_dense`, `_gate_dense`, `_output_dense`, which quantization, LoRA,
    constraints and dtype-policy maps reach); `_compute_attention` stays the
    place to customise the attention. It builds and calls itself, so every
    argument works on every Keras release from 3.11 (`sliding_window` and
    `use_gate` included, which Keras gained later). On top of Keras it adds:

    - **incremental decoding**: `cache` `(B, 2, S, num_key_value_heads,
      key_dim)` and `cache_update_index`, as in keras-hub's
      `CachedMultiHeadAttention`: with an index, the keys/values of the new
      query steps are written into the cache at that position; without one,
      the cache is used as the precomputed keys/values (cross-attention over
      a fixed encoder output). With a cache the call returns
      `(output, cache)` (or `(output, scores, cache)`). With
      `cache_dtype="int8"` the cache is stored quantized, about 4x smaller
      than float32.
    - **memory-efficient attention** for long sequences (online softmax over
      tiles of queries and keys, the tiles above a causal diagonal or outside
      a sliding window skipped, forward and backward, on every backend and on
      CPU): always with `chunk_size=N` or `flash_attention=True`, and by
      itself from 1024 x 1024 scores (queries x keys), 512 x 512 with a
      causal mask or a window, where it is measured to be faster, unless
      `flash_attention=False` (or `keras.config.disable_flash_attention()`)
      or the weights are needed (`return_attention_scores=True`, attention
      dropout in training). The choice is
      `layers.attention_plan.plan_attention`.
    - **fully masked query rows get zero weights**: a query that may attend
      to nothing (a padded position under the query's mask, a row of
      `attention_mask` all False) attends to nothing, so its output is the
      output projection's bias. This is the one place the layer differs from
      Keras', which gives such a row the mean of the values (its fused path)
      or attends it as if it were not masked (when it returns the weights);
      the output's Keras mask marks the row as padding in both.
    - **masked keys and values are never read**: padding or cache slots
      holding NaN or inf reach neither the output nor the gradients.
    - a 2-D `(T, S)` or 4-D `(B, num_heads, T, S)` `attention_mask` as well
      as Keras' `(B, T, S)`.
    - **packed sequences**: `segment_ids` (JAX's `SegmentIds` convention)
      keep each query within its document, on both paths; the chunked path
      skips the tiles between documents, and no `(T, S)` mask is built
      unless the weights are needed.
    - **grouped-query and multi-query attention** with `num_key_value_heads`
      below `num_heads` (see `GroupedQueryAttention`); the cache holds only
      the key/value heads.
    - **positions inside attention**: `attention_positions="rotary"` (RoPE)
      or `"alibi"` (on both paths and with the cache) or `"relative"` (T5's
      bucketed bias, a table of this layer, a score mod on both paths), and an
      `attention_bias` call argument for any `(B, N, T, S)` bias, such as
      one `RelativePositionBias` shared by the blocks of a stack as in T5.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        value_dim: size of each head for value (defaults to `key_dim`).
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        output_shape: shape of the output besides the batch and attention axes
            (an int or a tuple; defaults to the query's last axis).
        attention_axes: axes to attend over (default: every axis but the batch
            and feature axes). Several axes (images, video) take the standard
            path; the chunked path, positions and the cache need one.
        sliding_window: restrict each query to keys within
            `sliding_window - 1` positions (a symmetric band, as in Keras).
        flash_attention: True forces the chunked path (and, as in Keras,
            refuses attention dropout and `return_attention_scores`); False
            forbids the automatic switch; None chooses by length.
        chunk_size: tile size of the chunked path; setting it forces the
            chunked path whenever the weights are not needed and the layer
            adds no dense bias of its own (ALiBi's or T5's with a cache).
        kernel_initializer: as for `keras.layers.EinsumDense`.
        bias_initializer: as for `keras.layers.EinsumDense`.
        kernel_regularizer: as for `keras.layers.EinsumDense`.
        bias_regularizer: as for `keras.layers.EinsumDense`.
        activity_regularizer: as for `keras.layers.EinsumDense`.
        kernel_constraint: as for `keras.layers.EinsumDense`.
        bias_constraint: as for `keras.layers.EinsumDense`.
        use_gate: gate the attention output with `sigmoid(query W^G)` before
            the output projection (as in Keras).
        seed: dropout seed.
        num_key_value_heads: heads of the key and value projections, a divisor
            of `num_heads` (default `num_heads`; 1 is multi-query attention).
        attention_positions: None, `"rotary"`, `"alibi"` or `"relative"`:
            relative positions inside attention, counted from
            `cache_update_index` with a cache (the names of
            `keras_attention.layers.positions.ATTENTION_POSITIONS`).
            `"relative"` is T5's bias with its 32 buckets up to offsets of
            128, both directions, in a table of this layer.
            `position_encoding`, the earlier name, is read as a deprecated
            alias.
        max_wavelength: the rotary embedding's longest wavelength.
        alibi_bias_max: ALiBi's slopes run from `2^(-alibi_bias_max / N)` to
            `2^(-alibi_bias_max)` (keras-hub's name and default, 8).
        cache_dtype: the storage of the decoding cache that `initial_cache`
            makes: None (the compute dtype, one tensor) or `"int8"`, a
            quantized cache (`keras_attention.layers.key_value_cache`): the pair
            `(values, scales)`, int8 values `(B, 2, S, num_key_value_heads,
            key_dim)` and one scale per row of `key_dim` values (symmetric,
            `scale = max|x| / 127`), stored in 2 bytes as an int16 code of
            `log2(scale)` in steps of 1/1024 (`(B, 2, S,
            num_key_value_heads)`; within 0.034% of the scale, like a
            float16, but an integer, which Keras' autocasting of a layer's
            float inputs leaves alone). The new keys and values are
            quantized when written at `cache_update_index` and the whole
            cache dequantized to the compute dtype when read. That is `2 *
            num_key_value_heads * (key_dim + 2)` bytes per token, against
            `2 * num_key_value_heads * key_dim * 4` in float32:
            `(key_dim + 2) / (4 * key_dim)` of it, 0.28x at `key_dim=16`,
            0.26x at 64. Each value is off by at most half a step,
            `max|row| / 254` (and the scale's 0.034%).
        **kwargs: base layer arguments.

    Call arguments:
        query: `(B, T, dim)` (or `(B, ..., dim)` with `attention_axes`).
        value: `(B, S, dim)`.
        key: `(B, S, dim)`, defaults to `value`.
        query_mask, value_mask, key_mask: boolean `(B, T)` / `(B, S)` masks;
            taken from the Keras masks of the inputs when not given.
        attention_mask: boolean `(T, S)`, `(B, T, S)` or
            `(B, num_heads, T, S)`, True = attend.
        return_attention_scores: also return the weights `(B, N, T, S)`.
        training: whether dropout is active.
        use_causal_mask: query `t` attends to keys `<= t` (with a cache: keys
            `<= cache_update_index + t`).
        cache: `(B, 2, S, num_key_value_heads, key_dim)` keys and values,
            or a quantized cache `(values, scales)` (`cache_dtype="int8"`:
            int8 values of that shape, int16 scale codes `(B, 2, S,
            num_key_value_heads)`); the layer reads either, whatever its
            own `cache_dtype`, and returns the cache in the form it got.
        cache_update_index: where the new keys/values go in the cache.
        attention_bias: float, broadcastable to `(B, num_heads, T, S)`,
            added to the scaled scores; it keeps the layer on the standard
            path.
        segment_ids: packed sequences (several documents in one row): int
            `(B, T)` ids of the document of each position, for
            self-attention (`T == S`), or a pair `(query_ids (B, T),
            key_ids (B, S))`; a query attends only to the keys with its id
            (JAX's `SegmentIds`), as if each document were run alone. A
            rotary encoding then restarts its positions at each document
            (`ops.segment_positions`); ALiBi's and T5's biases, relative
            already, need nothing more. With a `cache` the keys are the
            cache's slots, so only the pair is accepted, `key_ids` covering
            the `max_length` slots (`(B, max_length)`), and the rotary
            positions stay the absolute ones of the cache. Needs one
            attention axis.

    Returns:
        `(B, T, output_dim)`; then the weights if requested; then the updated
        cache if one was passed.

    Example:

    ```python
    x = keras.Input((None, 64))
    y = keras_attention.layers.MultiHeadAttention(num_heads=4, key_dim=16)(
        x, x, use_causal_mask=True
    )
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Rabe & Staats, 2021](https://arxiv.org/abs/2112.05682)
        - [Ainslie et al., 2023. GQA](https://arxiv.org/abs/2305.13245)
        - [Su et al., 2021. RoFormer](https://arxiv.org/abs/2104.09864)
        - [Press et al., 2022. ALiBi](https://arxiv.org/abs/2108.12409)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        flash_attention=None,
        chunk_size=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        num_key_value_heads=None,
        attention_positions=None,
        max_wavelength=10000,
        alibi_bias_max=8,
        cache_dtype=None,
        **kwargs,
    ):
        keras_internals.require("get_keras_mask", "set_keras_mask")
        check_cache_dtype(cache_dtype)
        for name, value in (("num_heads", num_heads), ("key_dim", key_dim)):
            _check_size_argument(name, value)
        if value_dim is not None:
            _check_size_argument("value_dim", value_dim)
        check_rate("dropout", dropout)
        check_positive_int("sliding_window", sliding_window, allow_none=True)
        check_positive_int("chunk_size", chunk_size, allow_none=True)
        (attention_positions,) = positions_from_alias(
            kwargs,
            MultiHeadAttention.__init__,
            type(self).__name__,
            attention_positions=attention_positions,
        )
        check_key_value_heads(num_heads, num_key_value_heads)
        ATTENTION_POSITIONS.check(attention_positions)
        if flash_attention not in (None, True, False):
            raise ValueError(
                f"`flash_attention` must be None, True or False; received "
                f"{flash_attention!r}."
            )
        dense_arguments = {
            "kernel_initializer": initializers.get(kernel_initializer),
            "bias_initializer": initializers.get(bias_initializer),
            "kernel_regularizer": regularizers.get(kernel_regularizer),
            "bias_regularizer": regularizers.get(bias_regularizer),
            "activity_regularizer": regularizers.get(activity_regularizer),
            "kernel_constraint": constraints.get(kernel_constraint),
            "bias_constraint": constraints.get(bias_constraint),
        }
        # Keras' constructor gets the arguments every Keras 3 release takes
        # (the first seven keep their place in all); those it gained later
        # (`sliding_window`, `use_gate`) are this layer's own, since it builds
        # and calls itself.
        super().__init__(
            num_heads,
            key_dim,
            value_dim,
            dropout,
            use_bias,
            output_shape,
            attention_axes,
            flash_attention=flash_attention,
            seed=seed,
            **dense_arguments,
            **kwargs,
        )
        self._dense_arguments = dense_arguments
        self._output_dims = _output_dims(output_shape)
        self._use_gate = use_gate
        self._sliding_window = sliding_window
        # False stays False (Keras' `flash_attention or ...` turns it into
        # the global setting, None by default: the automatic choice).
        self._flash_attention = (
            keras.config.is_flash_attention_enabled()
            if flash_attention is None
            else flash_attention
        )
        self._flash_attention_argument = flash_attention
        self._chunk_size = chunk_size
        self._num_key_value_heads = num_key_value_heads or num_heads
        self._attention_positions = attention_positions
        self._max_wavelength = max_wavelength
        self._alibi_bias_max = alibi_bias_max
        self._cache_dtype = cache_dtype
        self._rotary, self._alibi_slopes, self._relative_bias = (
            ATTENTION_POSITIONS.build(
                attention_positions,
                num_heads=num_heads,
                max_wavelength=max_wavelength,
                alibi_bias_max=alibi_bias_max,
                dtype=self.dtype_policy,
            )
        )

    @property
    def chunk_size(self):
        return self._chunk_size

    @property
    def attention_path(self):
        """How the last call attended: `"torch_sdpa"` or `"jax_cudnn"` (a
        backend's fused kernel, see `keras_attention.ops.attention_path`),
        `"chunked"`, `"standard"` (where the weights are needed too) or
        `"multi_axis"`; None before the first call. In a compiled function,
        the path of the call that was traced."""
        return self.__dict__.get("_attention_path")

    def _record_path(self, path):
        # Past Keras' attribute tracking: a string, set while tracing too.
        self.__dict__["_attention_path"] = path

    @property
    def num_key_value_heads(self):
        return self._num_key_value_heads

    @property
    def attention_positions(self):
        return self._attention_positions

    @property
    def cache_dtype(self):
        return self._cache_dtype

    # -- build -------------------------------------------------------------

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_attention_shapes(query_shape, value_shape, key_shape)
        heads, kv_heads = self.num_heads, self._num_key_value_heads
        # Keras' order of the weights: query, key, gate, value, output.
        self._query_dense = self._projection("query", query_shape, heads, self.key_dim)
        self._key_dense = self._projection("key", key_shape, kv_heads, self.key_dim)
        if self._use_gate:
            self._gate_dense = self._projection(
                "gate", query_shape, heads, self.value_dim, activation="sigmoid"
            )
        self._value_dense = self._projection(
            "value", value_shape, kv_heads, self.value_dim
        )
        self._build_attention(len(query_shape) + 1)
        if self._relative_bias is not None:
            self._relative_bias.build(query_shape, key_shape)
        output_dims = self._output_dims or (query_shape[-1],)
        self._output_dense = self._dense(
            _projection_equation(len(query_shape) - 1, 2, len(output_dims)),
            output_dims,
            "attention_output",
        )
        self._output_dense.build((*query_shape[:-1], heads, self.value_dim))

    def _projection(self, name, input_shape, heads, size, activation=None):
        """`(B, ..., dim)` -> `(B, ..., heads, size)`."""
        equation = _projection_equation(len(input_shape) - 1, 1, 2)
        dense = self._dense(equation, (heads, size), name, activation)
        dense.build(input_shape)
        return dense

    def _dense(self, equation, output_dims, name, activation=None):
        free = len(equation.split("->")[1]) - len(output_dims)
        arguments = dict(self._dense_arguments)
        # Each projection gets its own initializers: a seeded one shared by
        # several would give them all the same values.
        for key in ("kernel_initializer", "bias_initializer"):
            arguments[key] = clone_initializer(arguments[key])
        return keras.layers.EinsumDense(
            equation,
            output_shape=(None,) * (free - 1) + tuple(output_dims),
            bias_axes=equation[-len(output_dims) :] if self.use_bias else None,
            activation=activation,
            name=name,
            dtype=self.dtype_policy,
            **arguments,
        )

    def _build_attention(self, rank):
        """The attention axes, einsum equations and dropout for projected
        tensors of `rank` `(B, ..., heads, dim)` (Keras' hook, and names)."""
        axes = self.attention_axes
        if axes is None:
            axes = tuple(range(1, rank - 2))
        self._attention_axes = tuple(a if a >= 0 else rank - 1 + a for a in axes)
        if len(self._attention_axes) != 1:
            for option, value in (
                ("num_key_value_heads", self._num_key_value_heads != self.num_heads),
                ("attention_positions", self._attention_positions),
            ):
                if value:
                    raise ValueError(
                        f"`{option}` needs one attention axis; received "
                        f"attention_axes={self._attention_axes}."
                    )
        self._dot_product_equation, self._combine_equation = attention_equations(
            rank, self._attention_axes
        )
        self._dropout_layer = Dropout(
            rate=self.dropout, dtype=self.dtype_policy, seed=self.seed
        )

    # -- shapes --------------------------------------------------------------

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        check_attention_shapes(query_shape, value_shape, key_shape)
        return (*query_shape[:-1], *(self._output_dims or (query_shape[-1],)))

    def _scores_shape(self, query_shape, key_shape):
        """`(B, <other axes>, num_heads, <query attention axes>, <key ones>)`."""
        axes = self._attention_axes  # the same indices in inputs and projections
        others = [query_shape[i] for i in range(len(query_shape) - 1) if i not in axes]
        return (
            *others,
            self.num_heads,
            *(query_shape[a] for a in axes),
            *(key_shape[a] for a in axes),
        )

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        return_attention_scores=False,
        cache=None,
        **kwargs,
    ):
        key_shape = value.shape if key is None else key.shape
        shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        results = [keras.KerasTensor(shape, dtype=self.compute_dtype)]
        if return_attention_scores:
            if cache is not None:
                slots = cache_slots(cache)
                key_shape = (key_shape[0], slots, *key_shape[2:])
            scores_shape = self._scores_shape(query.shape, key_shape)
            results.append(keras.KerasTensor(scores_shape, dtype=self.compute_dtype))
        if cache is not None:
            results.append(
                tree.map_structure(
                    lambda part: keras.KerasTensor(part.shape, dtype=part.dtype),
                    cache,
                )
            )
        return results[0] if len(results) == 1 else tuple(results)

    # -- call ----------------------------------------------------------------

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
    ):
        key = value if key is None else key
        self._check_call(query, value, key, cache, cache_update_index, attention_bias)
        if segment_ids is not None:
            segment_ids = self._check_segment_ids(segment_ids, query, key, cache)
        offset = 0 if cache_update_index is None else cache_update_index
        if cache is not None:  # the new inputs' masks do not describe the cache
            value_mask = key_mask = None
        query_length = ops.shape(query)[1]
        key_length = (
            ops.shape(key)[1]
            if cache is None
            else ops.shape(stored_keys_values(cache))[2]
        )
        plan = plan_attention(
            num_attention_axes=len(self._attention_axes),
            cached=cache is not None,
            custom_attention=self._custom_attention(),
            use_causal_mask=use_causal_mask,
            sliding_window=self._sliding_window,
            alibi=self._alibi_slopes is not None,
            segment_ids=segment_ids is not None,
            relative=self._relative_bias is not None,
            dense_bias=attention_bias is not None,
            needs_weights=self._needs_weights(return_attention_scores, training),
            flash_attention=self._flash_attention,
            chunk_size=self._chunk_size,
            key_length=key.shape[1] if cache is None else cache_slots(cache),
            query_length=query.shape[1],
        )

        # 1. One boolean mask of everything that is not generated in the op.
        mask = combine_attention_masks(
            query_mask,
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
            mask = _merge_document_mask(mask, segment_ids)
        if cache is None and not plan.multi_axis:
            key, value = hide_unattended_inputs(
                key, value, mask, query_length, key_length, plan.causal_in_op
            )

        # 2. Projections (and rotary positions, and the cache).
        with keras_internals.hidden_keras_masks(query, key, value):
            projected_query = self._query_dense(query)
            gate = self._gate_dense(query) if self._use_gate else None
            query_positions = key_positions = None
            if self._rotary is not None and segment_ids is not None and cache is None:
                query_positions, key_positions = map(
                    segment_positions, _segment_pair(segment_ids)
                )
            if self._rotary is not None:
                projected_query = self._rotary(
                    projected_query, start_index=offset, positions=query_positions
                )
            if cache is None:
                projected_key = self._project_key(key, positions=key_positions)
                projected_value = self._value_dense(value)
            else:
                cache = self._update_cache(cache, cache_update_index, key, value)
                keys_values = read_cache(cache, self.compute_dtype)
                projected_key, projected_value = keys_values[:, 0], keys_values[:, 1]

        # 3. Attention.
        extra = {}
        if plan.causal_in_op:
            extra["use_causal_mask"] = True
        if plan.window_in_op:
            extra["sliding_window"] = self._sliding_window
        if plan.alibi_in_op:
            extra["alibi_slopes"] = self._alibi_slopes
        elif self._alibi_slopes is not None:
            bias = alibi_bias(self._alibi_slopes, query_length, key_length, offset)
            attention_bias = _add(attention_bias, bias[None])
        if plan.relative_in_op:
            extra["score_mod"], extra["score_mod_inputs"] = (
                self._relative_bias.score_mod()
            )
        elif self._relative_bias is not None:
            bias = self._relative_bias(
                projected_query, projected_key, query_offset=offset
            )
            attention_bias = _add(attention_bias, bias)
        if attention_bias is not None:
            extra["attention_bias"] = attention_bias
        if plan.segments_in_op:
            extra["segment_ids"] = segment_ids
        output, scores = self._attend(
            projected_query,
            projected_key,
            projected_value,
            mask,
            training,
            return_attention_scores,
            extra,
        )

        # 4. Gate and output projection.
        if gate is not None:
            output = output * ops.cast(gate, output.dtype)
        output = self._output_dense(output)
        results = [output]
        if return_attention_scores:
            results.append(scores)
        if cache is not None:
            results.append(cache)
        return results[0] if len(results) == 1 else tuple(results)

    def _check_call(self, query, value, key, cache, cache_update_index, bias):
        shapes = (static_shape(query), static_shape(value), static_shape(key))
        check_attention_shapes(*shapes)
        if cache_update_index is not None and cache is None:
            raise ValueError(
                "`cache_update_index` needs a `cache` to update; received "
                f"cache=None, cache_update_index={cache_update_index}."
            )
        for name, given in (("A cache", cache), ("`attention_bias`", bias)):
            if given is not None and len(query.shape) != 3:
                raise ValueError(
                    f"{name} needs (batch, length, dim) inputs attending over "
                    f"one sequence axis; received query shape "
                    f"{static_shape(query)}."
                )

    def _check_segment_ids(self, segment_ids, query, key, cache):
        """`segment_ids` checked against the queries and the keys (the
        cache's slots with a cache): one int32 `(B, T)` tensor, or a pair."""
        if len(self._attention_axes) != 1 or len(query.shape) != 3:
            raise ValueError(
                "`segment_ids` need (batch, length, dim) inputs attending over "
                f"one sequence axis; received query shape {static_shape(query)}."
            )
        query_length = query.shape[1]
        key_length = key.shape[1] if cache is None else cache_slots(cache)
        # A sequence of tensors is a pair; nested Python lists are one tensor.
        if isinstance(segment_ids, (tuple, list)) and any(
            hasattr(ids, "shape") for ids in segment_ids
        ):
            if len(segment_ids) != 2:
                raise ValueError(
                    "`segment_ids` must be one tensor (batch, T) or a pair "
                    "(query_ids (batch, T), key_ids (batch, S)); received a "
                    f"sequence of {len(segment_ids)}."
                )
            return (
                check_segment_ids(segment_ids[0], query_length, "query segment_ids"),
                check_segment_ids(
                    segment_ids[1],
                    key_length,
                    "key segment_ids",
                    expected=None if cache is None else "(batch, cache slots)",
                ),
            )
        if cache is not None:
            raise ValueError(
                "With a `cache` the keys are the cache's slots, not the new "
                "tokens: pass `segment_ids` as a pair (query_ids (batch, T), "
                "key_ids (batch, max_length)); received one tensor of shape "
                f"{static_shape(segment_ids)}."
            )
        if (
            query_length is not None
            and key_length is not None
            and query_length != key_length
        ):
            raise ValueError(
                "One `segment_ids` tensor serves self-attention, with as many "
                f"keys as queries; received {query_length} queries and "
                f"{key_length} keys: pass (query_ids, key_ids)."
            )
        return check_segment_ids(segment_ids, query_length)

    def _custom_attention(self):
        """Whether a subclass overrides `_compute_attention` (then it gets
        every mask materialized, as from Keras' layer)."""
        own = MultiHeadAttention._compute_attention
        return type(self)._compute_attention is not own

    def _needs_weights(self, return_attention_scores, training):
        """Whether the `(T, S)` weights must exist: returned, or dropped out."""
        return return_attention_scores or (bool(training) and self.dropout > 0)

    def _attend(self, query, key, value, mask, training, return_scores, extra):
        """Calls `_compute_attention` the way Keras' layer calls it, for the
        subclasses that override it."""
        return self._compute_attention(
            query, key, value, mask, training, return_scores, **extra
        )

    def _project_key(self, key, start_index=0, positions=None):
        """The key projection, rotated by position with a rotary encoding
        (at `positions` `(B, S)` when given)."""
        projected = self._key_dense(key)
        if self._rotary is not None:
            projected = self._rotary(
                projected, start_index=start_index, positions=positions
            )
        return projected

    def _update_cache(self, cache, cache_update_index, key, value):
        """`cache` after writing the projected `key` and `value` at
        `cache_update_index` (unchanged without an index)."""
        check_cache(cache, self._num_key_value_heads, self.key_dim, self.value_dim)
        if cache_update_index is None:
            return cache
        new_entries = ops.stack(
            (
                self._project_key(key, start_index=cache_update_index),
                self._value_dense(value),
            ),
            axis=1,
        )
        return write_cache(cache, cache_update_index, new_entries)

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
        if len(query.shape) != 4:
            self._record_path("multi_axis")
            return self._compute_multi_axis_attention(
                query, key, value, attention_mask, training, use_causal_mask
            )
        if attention_mask is not None and len(attention_mask.shape) == 3:
            attention_mask = ops.expand_dims(attention_mask, 1)
        needs_weights = self._needs_weights(return_attention_scores, training)
        scale = 1.0 / math.sqrt(self.key_dim)
        if not needs_weights:
            # The layer's own bias, already in `attention_bias`: T5's, or
            # ALiBi's when `call` could not leave it to the op.
            own_bias = (self._relative_bias is not None and score_mod is None) or (
                self._alibi_slopes is not None and alibi_slopes is None
            )
            plan = plan_attention(
                use_causal_mask=use_causal_mask,
                sliding_window=sliding_window,
                alibi=alibi_slopes is not None,
                own_bias=own_bias,
                dense_bias=attention_bias is not None,
                flash_attention=self._flash_attention,
                chunk_size=self._chunk_size,
                key_length=key.shape[1],
                query_length=query.shape[1],
            )
            arguments = {
                "mask": attention_mask,
                "is_causal": use_causal_mask,
                # False: the standard path, as asked (no fused kernel either).
                "flash_attention": False if self._flash_attention is False else None,
                "chunk_size": self._chunk_size,
                "sliding_window": sliding_window,
                "bias": attention_bias,
                "alibi_slopes": alibi_slopes,
                "segment_ids": segment_ids,
                "score_mod": score_mod,
            }
            # A backend's fused kernel, where one serves, before the
            # chunked path the plan would switch to by itself.
            path = attention_path(query, value, **arguments)
            if path not in KERNELS:
                arguments["chunk_size"] = plan.chunk_size
                path = "standard" if plan.chunk_size is None else "chunked"
            self._record_path(path)
            output = dot_product_attention(
                query,
                key,
                value,
                scale=scale,
                score_mod_inputs=score_mod_inputs,
                **arguments,
            )
            return output, None
        self._record_path("standard")
        if segment_ids is not None:
            attention_mask = _merge_document_mask(attention_mask, segment_ids)
            if len(attention_mask.shape) == 3:
                attention_mask = ops.expand_dims(attention_mask, 1)
        if sliding_window is not None:
            band = sliding_window_mask(
                ops.shape(query)[1], ops.shape(key)[1], sliding_window
            )
            attention_mask = merge_masks(attention_mask, band[None, None])
        weights = attention_weights(
            query,
            key,
            attention_mask,
            use_causal_mask,
            scale,
            bias=attention_bias,
            alibi_slopes=alibi_slopes,
        )
        kept = self._dropout_layer(weights, training=training)
        output = apply_attention_weights(kept, value, attention_mask, use_causal_mask)
        return output, weights

    def _compute_multi_axis_attention(
        self, query, key, value, attention_mask, training, use_causal_mask
    ):
        """Keras' einsum formulation over several attention axes, with a
        softmax over all of them that gives fully masked queries zeros."""
        if use_causal_mask:  # along the first attention axis, as in Keras
            causal = causal_mask(ops.shape(query)[1], ops.shape(key)[1])[None]
            attention_mask = merge_masks(attention_mask, causal)
        scale = 1.0 / math.sqrt(self.key_dim)
        axes = self._attention_axes
        weights = multi_axis_attention_weights(query, key, attention_mask, axes, scale)
        kept = self._dropout_layer(weights, training=training)
        return apply_multi_axis_weights(kept, value, axes), weights

    # -- cache helpers -------------------------------------------------------

    def initial_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache
        `(B, 2, max_length, num_key_value_heads, key_dim)` in `dtype`
        (default: the layer's `cache_dtype`, else its compute dtype); with
        `"int8"` the quantized pair `(values, scales)` (see `cache_dtype`)."""
        dtype = dtype or self._cache_dtype or self.compute_dtype
        return empty_cache(
            batch_size, max_length, self._num_key_value_heads, self.key_dim, dtype
        )

    def compute_key_value_cache(self, value, key=None):
        """Keys and values of a fixed sequence (e.g. the encoder output) as a
        cache to pass with `cache_update_index=None`."""
        key = value if key is None else key
        return ops.stack((self._project_key(key), self._value_dense(value)), axis=1)

    # -- Keras interop -------------------------------------------------------

    def load_keras_weights(self, keras_layer):
        """Copies the weights of a built `keras.layers.MultiHeadAttention` or
        `keras.layers.GroupQueryAttention`.

        The two layers must agree on the heads, head sizes, use_bias and
        use_gate; this layer is built to the Keras layer's input sizes if
        needed.
        """
        if not keras_layer.built:
            raise ValueError(
                f"The Keras {type(keras_layer).__name__} must be built first."
            )
        theirs, ours = _attention_sizes(keras_layer), _attention_sizes(self)
        for name, value in ours.items():
            if theirs[name] != value:
                raise ValueError(
                    f"Cannot load weights: the Keras layer has {name}="
                    f"{theirs[name]}, this layer has {name}={value}."
                )
        if not self.built:
            self.build(**keras_layer.get_build_config()["shapes_dict"])
        self.set_weights(keras_layer.get_weights())
        return self

    @classmethod
    def from_keras(cls, keras_layer, **kwargs):
        """A new layer with the config and weights of a Keras
        `MultiHeadAttention` (or, for `GroupedQueryAttention`, a Keras
        `GroupQueryAttention`), its dtype policy and trainability included."""
        config = keras_layer.get_config()
        config.pop("name", None)
        # The policy object itself: its config is a dict on some releases.
        config["dtype"] = keras_layer.dtype_policy
        config.update(kwargs)
        layer = cls(**config).load_keras_weights(keras_layer)
        layer.trainable = keras_layer.trainable
        return layer

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "use_gate": self._use_gate,
                "sliding_window": self._sliding_window,
                "flash_attention": self._flash_attention_argument,
                "chunk_size": self._chunk_size,
                "num_key_value_heads": self._num_key_value_heads,
                "attention_positions": self._attention_positions,
                "max_wavelength": self._max_wavelength,
                "alibi_bias_max": self._alibi_bias_max,
                "cache_dtype": self._cache_dtype,
            }
        )
        return config


def _check_size_argument(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a "
            f"positive integer. Received: {name}={value!r}"
        )


def _output_dims(output_shape):
    """`output_shape` as a tuple (an int is one axis), or None."""
    if not output_shape:
        return None
    if isinstance(output_shape, int):
        return (output_shape,)
    return tuple(output_shape)


def _projection_equation(free_dims, bound_dims, output_dims):
    """An einsum equation keeping `free_dims` input axes, contracting the
    last `bound_dims` with the kernel and adding `output_dims` axes."""
    letters = iter(string.ascii_lowercase)
    free = "".join(next(letters) for _ in range(free_dims))
    bound = "".join(next(letters) for _ in range(bound_dims))
    output = "".join(next(letters) for _ in range(output_dims))
    return f"{free}{bound},{bound}{output}->{free}{output}"


def _segment_pair(segment_ids):
    """`(query_ids, key_ids)` of checked `segment_ids` (one tensor serves
    both)."""
    if isinstance(segment_ids, tuple):
        return segment_ids
    return segment_ids, segment_ids


def _merge_document_mask(mask, segment_ids):
    """`mask` (None, `(B, T, S)` or `(B, N, T, S)`) ANDed with the dense
    `(B, T, S)` mask of `segment_ids`, for the paths that need every mask
    materialized (the weights, a subclass's `_compute_attention`)."""
    query_ids, key_ids = _segment_pair(segment_ids)
    documents = ops.equal(query_ids[:, :, None], key_ids[:, None, :])
    if mask is not None and len(mask.shape) == 4:
        documents = documents[:, None]
    return merge_masks(mask, documents)


def _add(bias, extra):
    return extra if bias is None else ops.cast(bias, "float32") + extra


def _attention_sizes(layer):
    """Heads, head sizes and options of a multi-head or grouped-query
    attention layer, ours or Keras', under one set of names (from its
    config)."""
    config = layer.get_config()
    heads = config.get("num_query_heads", config.get("num_heads"))
    key_dim = config.get("head_dim", config.get("key_dim"))
    return {
        "num_heads": heads,
        "num_key_value_heads": config.get("num_key_value_heads") or heads,
        "key_dim": key_dim,
        "value_dim": config.get("value_dim") or key_dim,
        "use_bias": config["use_bias"],
        "use_gate": config.get("use_gate", False),
    }
