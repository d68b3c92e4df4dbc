import contextlib

import keras
from keras import ops
from keras.src.backend import get_keras_mask, set_keras_mask

from keras_attention._checks import (
    broadcastable,
    check_positive_int,
    check_rate,
    static_shape,
)
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.rotary_embedding import RotaryEmbedding
from keras_attention.ops.attention import (
    apply_attention_weights,
    attention_weights,
    dot_product_attention,
)
from keras_attention.ops.masks import (
    attended_keys,
    causal_mask,
    merge_masks,
    sliding_window_mask,
    zero_unattended,
)
from keras_attention.ops.positions import alibi_bias, alibi_slopes

POSITION_ENCODINGS = (None, "rotary", "alibi")

# From this many keys the layer switches to the chunked (memory-efficient) path
# by itself, with tiles of AUTO_CHUNK_SIZE queries and keys; below it the
# standard path is as fast or faster and keeps the weights available. The
# crossovers were measured (XLA, forward + backward, width 256, 4096 tokens per
# batch, 2-core CPU): causal, chunked/standard is 0.82 at T=512 and 0.63 at
# 1024 (it skips the tiles above the diagonal); not causal, 1.05 at 512 and
# 0.94 at 1024. Tiles of 256 beat 128 and 512 at every length measured.
AUTO_CHUNK_MIN_LENGTH = 1024
AUTO_CHUNK_MIN_LENGTH_CAUSAL = 512
AUTO_CHUNK_SIZE = 256


def check_heads_and_positions(num_heads, num_key_value_heads, position_encoding):
    """Raises a ValueError for key/value heads that do not divide the query
    heads, or an unknown position encoding."""
    check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
    if num_key_value_heads is not None and num_heads % num_key_value_heads:
        raise ValueError(
            "`num_key_value_heads` must divide `num_heads` (each group of "
            f"query heads shares one key/value head); received num_heads="
            f"{num_heads}, num_key_value_heads={num_key_value_heads}."
        )
    if position_encoding not in POSITION_ENCODINGS:
        raise ValueError(
            f"`position_encoding` must be one of {POSITION_ENCODINGS}; "
            f"received {position_encoding!r}."
        )


@contextlib.contextmanager
def _without_keras_masks(*tensors):
    """Hides the Keras masks of `tensors` while inside (then restores them).

    The masks are consumed by the attention mask; the projections do not
    support masking and would warn that they drop them.
    """
    masks = [get_keras_mask(t) for t in tensors]
    for t in tensors:
        set_keras_mask(t, None)
    try:
        yield
    finally:
        for t, mask in zip(tensors, masks, strict=True):
            if mask is not None:
                set_keras_mask(t, mask)


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadAttention(keras.layers.MultiHeadAttention):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    `MultiHead(Q, K, V) = Concat(head_1..head_h) W^O` with
    `head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V`.

    A subclass of `keras.layers.MultiHeadAttention` (as keras-hub's
    `CachedMultiHeadAttention` is): constructor and call arguments, weights,
    sublayers (`_query_dense`, ... which quantization, LoRA, constraints and
    dtype-policy maps reach), `attention_axes` over several axes and
    serialization are Keras' own. The attention itself is computed by
    `_compute_attention`, which stays the place to customise it. On top of
    Keras, the layer adds:

    - **incremental decoding**: `cache` `(B, 2, S, num_heads, key_dim)` and
      `cache_update_index`, as in keras-hub's `CachedMultiHeadAttention`:
      with an index, the keys/values of the new query steps are written into
      the cache at that position; without one, the cache is used as the
      precomputed keys/values (cross-attention over a fixed encoder output).
      With a cache the call returns `(output, cache)` (or
      `(output, scores, cache)`).
    - **memory-efficient attention** for long sequences (online softmax over
      tiles of queries and keys, O(chunk^2) memory per head for the scores in
      the forward and backward pass, the tiles above a causal diagonal skipped,
      on every backend and on CPU): always with `chunk_size=N` or
      `flash_attention=True`, and by itself from 1024 keys, 512 with a causal
      mask (`AUTO_CHUNK_MIN_LENGTH`, `AUTO_CHUNK_MIN_LENGTH_CAUSAL`: where it
      is measured to be faster), unless `flash_attention=False` (or
      `keras.config.disable_flash_attention()`). The automatic switch is
      skipped when the weights are needed: `return_attention_scores=True` or
      attention dropout in training.
    - **fully masked query rows give zero attention** (Keras gives them the
      mean of the values, and NaN-free only by a large negative bias).
    - **masked keys and values are never read**: a key/value position that
      no query may attend to (padding, cache slots past the decoded steps)
      can hold NaN or inf without reaching the output or the gradients
      (Keras and PyTorch multiply it by a zero weight, and 0 * NaN is NaN).
    - a 2-D `(T, S)` or 4-D `(B, num_heads, T, S)` `attention_mask` as well
      as Keras' `(B, T, S)`, and `query_mask`/`value_mask`/`key_mask`
      arguments that are honoured when passed explicitly.
    - **grouped-query and multi-query attention**: with
      `num_key_value_heads` below `num_heads`, each group of query heads
      shares one key/value head (Ainslie et al. 2023; keras'
      `GroupQueryAttention` with the same weights, see
      `GroupedQueryAttention`), and the cache holds only those heads.
    - **positions inside attention**: `position_encoding="rotary"` rotates
      the queries and keys by their positions (RoPE, Su et al. 2021),
      `"alibi"` subtracts `slope_h * |i - j|` from the scores of head `h`
      (Press et al. 2022), on both paths and with the cache; an
      `attention_bias` call argument adds any `(B, N, T, S)` bias, such as
      T5's `RelativePositionBias`.

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
            softmax path; the chunked path and the cache need one sequence
            axis.
        sliding_window: restrict each query to keys within
            `sliding_window - 1` positions (a symmetric band, as in Keras).
            On the chunked path the tiles wholly outside the band are never
            computed, so the time grows as T * sliding_window.
        flash_attention: True forces the chunked path (and, as in Keras,
            refuses attention dropout and `return_attention_scores`); False
            forbids the automatic switch; None lets the layer choose by length.
        chunk_size: block size of the chunked path; setting it forces the
            chunked path whenever the weights are not needed.
        kernel_initializer: as for `keras.layers.Dense`.
        bias_initializer: as for `keras.layers.Dense`.
        kernel_regularizer: as for `keras.layers.Dense`.
        bias_regularizer: as for `keras.layers.Dense`.
        activity_regularizer: as for `keras.layers.Dense`.
        kernel_constraint: as for `keras.layers.Dense`.
        bias_constraint: as for `keras.layers.Dense`.
        use_gate: gate the attention output with `sigmoid(query W^G)` before
            the output projection (as in Keras).
        seed: dropout seed.
        num_key_value_heads: heads of the key and value projections, a divisor
            of `num_heads` (default `num_heads`; 1 is multi-query attention).
        position_encoding: None, `"rotary"` or `"alibi"`: relative positions
            inside attention, over one sequence axis, counted from
            `cache_update_index` with a cache.
        max_wavelength: the rotary embedding's longest wavelength.
        alibi_bias_max: ALiBi's slopes run from `2^(-alibi_bias_max / N)` to
            `2^(-alibi_bias_max)` (keras-hub's name and default, 8).
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
        cache: `(B, 2, S, num_key_value_heads, key_dim)` keys and values.
        cache_update_index: where the new keys/values go in the cache.
        attention_bias: float, broadcastable to `(B, num_heads, T, S)`,
            added to the scaled scores (e.g. `RelativePositionBias`); it keeps
            the layer on the standard path.

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
        position_encoding=None,
        max_wavelength=10000,
        alibi_bias_max=8,
        **kwargs,
    ):
        check_positive_int("chunk_size", chunk_size, allow_none=True)
        check_rate("dropout", dropout)
        check_heads_and_positions(num_heads, num_key_value_heads, position_encoding)
        if flash_attention not in (None, True, False):
            raise ValueError(
                f"`flash_attention` must be None, True or False; received "
                f"{flash_attention!r}."
            )
        super().__init__(
            num_heads=num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            dropout=dropout,
            use_bias=use_bias,
            output_shape=output_shape,
            attention_axes=attention_axes,
            sliding_window=sliding_window,
            flash_attention=flash_attention,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            use_gate=use_gate,
            seed=seed,
            **kwargs,
        )
        self._flash_attention_argument = flash_attention
        self._chunk_size = chunk_size
        self._num_key_value_heads = num_key_value_heads or num_heads
        self._position_encoding = position_encoding
        self._max_wavelength = max_wavelength
        self._alibi_bias_max = alibi_bias_max
        self._rotary = None
        if position_encoding == "rotary":
            self._rotary = RotaryEmbedding(
                max_wavelength=max_wavelength, dtype=self.dtype_policy, name="rotary"
            )
        self._alibi_slopes = None
        if position_encoding == "alibi":
            self._alibi_slopes = alibi_slopes(num_heads, alibi_bias_max)

    @property
    def chunk_size(self):
        return self._chunk_size

    @property
    def num_key_value_heads(self):
        return self._num_key_value_heads

    @property
    def position_encoding(self):
        return self._position_encoding

    # -- shapes ----------------------------------------------------------

    def _check_shapes(self, query_shape, value_shape, key_shape=None):
        query_shape, value_shape = tuple(query_shape), tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        if value_shape[1:-1] != key_shape[1:-1]:
            raise ValueError(
                "`key` and `value` must be equal in every axis but the last "
                f"(their positions); received key shape {key_shape} and value "
                f"shape {value_shape}."
            )
        if len(query_shape) < 3 or len(query_shape) != len(value_shape):
            raise ValueError(
                "`query` and `value` must have the same rank, at least 3 "
                "(batch, positions..., features); received query shape "
                f"{query_shape} and value shape {value_shape}."
            )
        if None not in (query_shape[0], value_shape[0]) and (
            query_shape[0] != value_shape[0]
        ):
            raise ValueError(
                f"`query` and `value` must have the same batch size; received "
                f"query shape {query_shape} and value shape {value_shape}."
            )
        for name, shape in (("query", query_shape), ("value", value_shape)):
            if shape[-1] is None:
                raise ValueError(
                    f"The feature size (last axis) of `{name}` must be known; "
                    f"received shape {shape}."
                )

    def build(self, query_shape, value_shape, key_shape=None):
        self._check_shapes(query_shape, value_shape, key_shape)
        super().build(query_shape, value_shape, key_shape)

    def _build_attention(self, rank):
        super()._build_attention(rank)
        # Keras builds a `keras.layers.Dropout` for the weights; ours draws the
        # same kind of mask many times faster under XLA on a CPU (see
        # `keras_attention.ops.dropout`). Untracked first, so that the layer
        # keeps one dropout sublayer and one seed generator, as Keras' has.
        self._tracker.untrack(self._dropout_layer)
        self._dropout_layer = Dropout(
            rate=self._dropout, dtype=self.dtype_policy, seed=self.seed
        )
        if self._num_key_value_heads != self._num_heads:
            self._group_key_value_projections()
        if self._position_encoding is not None and len(self._attention_axes) != 1:
            raise ValueError(
                f"`position_encoding={self._position_encoding!r}` needs one "
                f"attention axis; received attention_axes={self._attention_axes}."
            )

    def _group_key_value_projections(self):
        """Rebuilds the key and value projections with `num_key_value_heads`.

        Keras builds them with `num_heads` just before the attention (whose
        hook this runs in); they are rebuilt, and the gate between them
        re-tracked after the key, so that the weights keep Keras' order (that
        of its `GroupQueryAttention` too)."""
        if len(self._attention_axes) != 1:
            raise ValueError(
                "`num_key_value_heads` needs one attention axis; received "
                f"attention_axes={self._attention_axes}."
            )
        gate = self._gate_dense if self._use_gate else None
        for sublayer in (self._key_dense, gate, self._value_dense):
            if sublayer is not None:
                self._tracker.untrack(sublayer)
        for name in ("_key_dense", "_gate", "_value_dense"):
            if name == "_gate":
                if gate is not None:
                    self._gate_dense = gate
                continue
            dense = getattr(self, name)
            config = dense.get_config()
            output_shape = list(config["output_shape"])
            output_shape[-2] = self._num_key_value_heads
            grouped = keras.layers.EinsumDense.from_config(
                {**config, "output_shape": output_shape}
            )
            grouped.build(_input_shape(dense))
            setattr(self, name, grouped)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        self._check_shapes(query_shape, value_shape, key_shape)
        return super().compute_output_shape(query_shape, value_shape, key_shape)

    def _scores_shape(self, query_shape, key_shape):
        """`(B, <other axes>, num_heads, <query attention axes>, <key ones>)`."""
        rank = len(query_shape)
        axes = self._attention_axes
        if axes is None:
            axes = tuple(range(1, rank - 1))
        axes = tuple(a if a >= 0 else rank + a for a in axes)
        others = [query_shape[i] for i in range(rank - 1) if i not in axes]
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
    ):
        key_shape = value.shape if key is None else key.shape
        results = [
            keras.KerasTensor(
                self.compute_output_shape(query.shape, value.shape, key_shape),
                dtype=self.compute_dtype,
            )
        ]
        if return_attention_scores:
            if cache is not None:
                key_shape = (key_shape[0], cache.shape[2], *key_shape[2:])
            results.append(
                keras.KerasTensor(
                    self._scores_shape(query.shape, key_shape),
                    dtype=self.compute_dtype,
                )
            )
        if cache is not None:
            results.append(keras.KerasTensor(cache.shape, dtype=cache.dtype))
        return results[0] if len(results) == 1 else tuple(results)

    # -- call ------------------------------------------------------------

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
    ):
        key = value if key is None else key
        self._check_shapes(static_shape(query), static_shape(value), static_shape(key))
        if cache_update_index is not None and cache is None:
            raise ValueError(
                "`cache_update_index` needs a `cache` to update; received "
                f"cache=None, cache_update_index={cache_update_index}."
            )
        if cache is not None and len(query.shape) != 3:
            raise ValueError(
                "A cache needs (batch, length, dim) inputs attending over one "
                f"sequence axis; received query shape {static_shape(query)}."
            )
        with _without_keras_masks(query, value, key):
            projected_query = self._query_dense(query)
            gate = self._gate_dense(query) if self._use_gate else None
        offset = 0 if cache_update_index is None else cache_update_index
        if self._rotary is not None:
            projected_query = self._rotary(projected_query, start_index=offset)
        if cache is not None:
            # The masks of the new inputs do not describe the cached keys.
            value_mask = key_mask = None

        standard = len(projected_query.shape) == 4
        # A plain causal mask is generated inside the attention op (never
        # materialized on the chunked path). A subclass that overrides
        # `_compute_attention` receives it in `attention_mask`, as in Keras.
        in_op = (
            cache is None
            and standard
            and type(self)._compute_attention is MultiHeadAttention._compute_attention
        )
        causal_in_op = use_causal_mask and in_op
        # So is the sliding window, where the weights are not asked for: the
        # chunked path then skips the tiles outside it.
        without_weights = in_op and not self._needs_weights(
            return_attention_scores, training
        )
        window_in_op = self._sliding_window is not None and without_weights
        if attention_bias is not None and not standard:
            raise ValueError(
                "`attention_bias` needs (batch, length, dim) inputs attending "
                f"over one sequence axis; received query shape "
                f"{static_shape(query)}."
            )
        # ALiBi's slopes go to the op, which computes the bias tile by tile on
        # the chunked path, where the positions start at 0 and no weights are
        # asked for; elsewhere the bias is built whole.
        alibi_in_op = (
            self._alibi_slopes is not None
            and without_weights
            and attention_bias is None
        )
        if standard:
            query_length = ops.shape(query)[1]
            key_length = ops.shape(key)[1] if cache is None else ops.shape(cache)[2]
            if self._alibi_slopes is not None and not alibi_in_op:
                bias = alibi_bias(self._alibi_slopes, query_length, key_length, offset)
                attention_bias = (
                    bias[None]
                    if attention_bias is None
                    else ops.cast(attention_bias, "float32") + bias[None]
                )
            mask = self._sequence_attention_mask(
                query_mask,
                value_mask,
                key_mask,
                attention_mask,
                use_causal_mask and not causal_in_op,
                None if window_in_op else self._sliding_window,
                query_length,
                key_length,
                offset,
            )
            if cache is None:
                # The attention op never reads the unattended keys and values,
                # but the projections would: the gradients of their kernels
                # sum `input * gradient` over every position, and 0 * NaN is
                # NaN.
                attended = attended_keys(mask, query_length, key_length, causal_in_op)
                if attended is not None and len(attended.shape) == 3:
                    attended = ops.any(attended, axis=1)  # over the heads
                hidden_key = zero_unattended(key, attended)
                value = hidden_key if key is value else zero_unattended(value, attended)
                key = hidden_key
        else:
            mask = self._compute_attention_mask(
                query,
                value,
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )
        with _without_keras_masks(key, value):
            if cache is None:
                projected_key = self._project_key(key)
                projected_value = self._value_dense(value)
            else:
                projected_key, projected_value, cache = self._use_cache(
                    cache, cache_update_index, key, value
                )

        extra = {"use_causal_mask": True} if causal_in_op else {}
        if window_in_op:
            extra["sliding_window"] = self._sliding_window
        if alibi_in_op:
            extra["alibi_slopes"] = self._alibi_slopes
        if attention_bias is not None:
            extra["attention_bias"] = attention_bias
        output, scores = self._attend(
            projected_query,
            projected_key,
            projected_value,
            mask,
            training,
            return_attention_scores,
            extra,
        )
        if gate is not None:
            output = output * ops.cast(gate, output.dtype)
        output = self._output_dense(output)

        results = [output]
        if return_attention_scores:
            results.append(scores)
        if cache is not None:
            results.append(cache)
        return results[0] if len(results) == 1 else tuple(results)

    def _attend(self, query, key, value, mask, training, return_scores, extra):
        """Calls `_compute_attention` the way Keras' layer calls it, for the
        subclasses that override it."""
        return self._compute_attention(
            query, key, value, mask, training, return_scores, **extra
        )

    def _sequence_attention_mask(
        self,
        query_mask,
        value_mask,
        key_mask,
        attention_mask,
        use_causal_mask,
        sliding_window,
        query_length,
        key_length,
        offset,
    ):
        """All masks of `(B, T, dim)` inputs merged into one boolean mask.

        `(B, T, S)` as Keras passes it to `_compute_attention`, or
        `(B, num_heads, T, S)` when `attention_mask` has a heads axis; None
        when there is no mask at all.
        """
        with_heads = False
        if attention_mask is not None:
            attention_mask = ops.cast(ops.convert_to_tensor(attention_mask), "bool")
            got = static_shape(attention_mask)
            lengths = tuple(
                d if isinstance(d, int) else None for d in (query_length, key_length)
            )
            if len(got) not in (2, 3, 4) or not broadcastable(got[-2:], lengths):
                raise ValueError(
                    "`attention_mask` must have shape (query_length, key_length), "
                    "(batch, query_length, key_length) or (batch, num_heads, "
                    f"query_length, key_length), with (query_length, key_length) "
                    f"= {lengths}; received {got}."
                )
            with_heads = len(got) == 4
        masks = []
        if query_mask is not None:
            masks.append(ops.expand_dims(ops.cast(query_mask, "bool"), -1))
        for m in (value_mask, key_mask):
            if m is not None:
                masks.append(ops.expand_dims(ops.cast(m, "bool"), -2))
        if use_causal_mask:
            masks.append(causal_mask(query_length, key_length, offset)[None])
        if sliding_window is not None:
            masks.append(
                sliding_window_mask(query_length, key_length, sliding_window, offset)[
                    None
                ]
            )
        if with_heads:
            masks = [ops.expand_dims(m, 1) for m in masks]
        if attention_mask is not None:
            masks.append(attention_mask)
        return merge_masks(*masks)

    def _use_cache(self, cache, cache_update_index, key, value):
        if self._key_dim != self._value_dim:
            raise ValueError(
                "A cache stacks keys and values, so it needs key_dim == value_dim; "
                f"this layer has key_dim={self._key_dim}, "
                f"value_dim={self._value_dim}."
            )
        shape = static_shape(cache)
        heads = self._num_key_value_heads
        expected = (None, 2, None, heads, self._key_dim)
        if (
            len(shape) != 5
            or shape[1] != 2
            or shape[3] != heads
            or shape[4] != self._key_dim
        ):
            raise ValueError(
                f"`cache` must have shape (batch, 2, max_length, "
                f"num_key_value_heads={heads}, key_dim={self._key_dim}) = "
                f"{expected}; received {shape}."
            )
        if cache_update_index is not None:
            # One in-place write of the new positions into the stacked cache:
            # updating the key and value halves apart and stacking them again
            # would copy the whole buffer at every decoding step.
            new_entries = ops.stack(
                (
                    self._project_key(key, start_index=cache_update_index),
                    self._value_dense(value),
                ),
                axis=1,
            )
            cache = ops.slice_update(
                cache,
                (0, 0, cache_update_index, 0, 0),
                ops.cast(new_entries, cache.dtype),
            )
        return cache[:, 0], cache[:, 1], cache

    def _project_key(self, key, start_index=0):
        """The key projection, rotated by position with a rotary encoding."""
        projected = self._key_dense(key)
        if self._rotary is not None:
            projected = self._rotary(projected, start_index=start_index)
        return projected

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
    ):
        """Attention of projected `query` `(B, T, N, key_dim)` over `key` and
        `value` `(B, S, N_kv, dim)`; returns `(output (B, T, N, value_dim),
        weights (B, N, T, S) or None)`.

        Keras' override point, with its signature: `attention_mask` is
        `(B, T, S)` (or `(T, S)`, `(B, N, T, S)`), True = attend, and
        `use_causal_mask` adds the causal mask without materializing it;
        so does `sliding_window` its band, where no weights are asked for,
        and `alibi_slopes` ALiBi's bias. `attention_bias` is added to the
        scaled scores.
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
            return self._compute_multi_axis_attention(
                query, key, value, attention_mask, training, use_causal_mask
            )
        if attention_mask is not None and len(attention_mask.shape) == 3:
            attention_mask = ops.expand_dims(attention_mask, 1)
        if not self._needs_weights(return_attention_scores, training):
            # Chunked, or normalized last: neither materializes the weights.
            output = dot_product_attention(
                query,
                key,
                value,
                mask=attention_mask,
                is_causal=use_causal_mask,
                scale=self._inverse_sqrt_key_dim,
                chunk_size=self._chunk_size_for(
                    key.shape[1],
                    use_causal_mask or sliding_window is not None,
                    attention_bias is not None,
                ),
                sliding_window=sliding_window,
                bias=attention_bias,
                alibi_slopes=alibi_slopes,
            )
            return output, None
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
            self._inverse_sqrt_key_dim,
            bias=attention_bias,
            alibi_slopes=alibi_slopes,
        )
        kept = self._dropout_layer(weights, training=training)
        output = apply_attention_weights(kept, value, attention_mask, use_causal_mask)
        return output, weights

    def _compute_multi_axis_attention(
        self, query, key, value, attention_mask, training, use_causal_mask
    ):
        """Keras' einsum path for several attention axes, with our softmax."""
        if use_causal_mask:
            causal = self._compute_causal_mask(query, value)
            attention_mask = merge_masks(attention_mask, causal)
        query = query * ops.cast(self._inverse_sqrt_key_dim, query.dtype)
        scores = ops.einsum(self._dot_product_equation, key, query)
        num_axes = len(self._attention_axes)
        if attention_mask is not None:
            # Masks come without the heads axis (and maybe without the
            # non-attention axes): insert them in front of the attention axes.
            while len(attention_mask.shape) < len(scores.shape):
                attention_mask = ops.expand_dims(attention_mask, -2 * num_axes - 1)
        norm_axes = tuple(range(len(scores.shape) - num_axes, len(scores.shape)))
        weights = _masked_softmax_over_axes(scores, attention_mask, norm_axes)
        kept = self._dropout_layer(weights, training=training)
        output = ops.einsum(self._combine_equation, kept, ops.cast(value, kept.dtype))
        return output, weights

    def _needs_weights(self, return_attention_scores, training):
        """Whether the `(T, S)` weights must exist: returned, or dropped out."""
        return return_attention_scores or (bool(training) and self._dropout > 0)

    def _chunk_size_for(self, key_length, skips_tiles, has_bias=False):
        """The chunk size of the no-weights path, None for the standard one.
        `skips_tiles`: a causal mask or a sliding window lets the chunked
        path skip tiles, which moves its crossover down. A dense bias keeps
        the standard path unless the chunked one is forced (and refuses it)."""
        if self._chunk_size is not None:
            return self._chunk_size
        if self._flash_attention:
            return AUTO_CHUNK_SIZE
        if self._flash_attention is False or has_bias:
            return None
        threshold = (
            AUTO_CHUNK_MIN_LENGTH_CAUSAL if skips_tiles else AUTO_CHUNK_MIN_LENGTH
        )
        if key_length is not None and key_length >= threshold:
            return AUTO_CHUNK_SIZE
        return None

    # -- cache helpers ---------------------------------------------------

    def initial_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache
        `(B, 2, max_length, num_key_value_heads, key_dim)`."""
        return ops.zeros(
            (batch_size, 2, max_length, self._num_key_value_heads, self._key_dim),
            dtype=dtype or self.compute_dtype,
        )

    def compute_key_value_cache(self, value, key=None):
        """Keys and values of a fixed sequence (e.g. the encoder output) as a
        cache to pass with `cache_update_index=None`."""
        key = value if key is None else key
        return ops.stack((self._project_key(key), self._value_dense(value)), axis=1)

    # -- Keras interop ---------------------------------------------------

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
            shapes = [
                _input_shape(dense)
                for dense in (
                    keras_layer._query_dense,
                    keras_layer._value_dense,
                    keras_layer._key_dense,
                )
            ]
            self.build(*shapes)
        self.set_weights(keras_layer.get_weights())
        return self

    @classmethod
    def from_keras(cls, keras_layer, **kwargs):
        """A new layer with the config and weights of a Keras
        `MultiHeadAttention` (or, for `GroupedQueryAttention`, a Keras
        `GroupQueryAttention`)."""
        config = keras_layer.get_config()
        for name in ("name", "trainable", "dtype"):
            config.pop(name, None)
        config.update(kwargs)
        return cls(**config).load_keras_weights(keras_layer)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "flash_attention": self._flash_attention_argument,
                "chunk_size": self._chunk_size,
                "num_key_value_heads": self._num_key_value_heads,
                "position_encoding": self._position_encoding,
                "max_wavelength": self._max_wavelength,
                "alibi_bias_max": self._alibi_bias_max,
            }
        )
        return config


def _attention_sizes(layer):
    """Heads, head sizes and options of a multi-head or grouped-query
    attention layer, ours or Keras', under one set of names."""
    if hasattr(layer, "num_query_heads"):  # Keras' GroupQueryAttention
        heads, key_dim, value_dim = layer.num_query_heads, layer.head_dim, None
        key_value_heads = layer.num_key_value_heads
    else:
        heads, key_dim, value_dim = layer.num_heads, layer.key_dim, layer.value_dim
        key_value_heads = getattr(layer, "num_key_value_heads", heads)
    return {
        "num_heads": heads,
        "num_key_value_heads": key_value_heads,
        "key_dim": key_dim,
        "value_dim": value_dim or key_dim,
        "use_bias": layer.use_bias,
        "use_gate": layer._use_gate if hasattr(layer, "_use_gate") else layer.use_gate,
    }


def _input_shape(einsum_dense):
    """An input shape that builds a projection like `einsum_dense`: its rank
    from the equation, its feature size from the kernel."""
    rank = len(einsum_dense.equation.split(",")[0])
    return (None,) * (rank - 1) + (einsum_dense.kernel.shape[0],)


def _masked_softmax_over_axes(scores, mask, axes):
    """Softmax over several `axes` at once (TensorFlow's kernel takes one
    axis of at most 5-D tensors); masked positions get 0, fully masked
    slices all zeros."""
    dtype = scores.dtype
    logits = ops.cast(scores, "float32")
    if mask is not None:
        logits = ops.where(mask, logits, -1e9)
    exps = ops.exp(logits - ops.max(logits, axis=axes, keepdims=True))
    if mask is not None:
        exps = ops.where(mask, exps, 0.0)
    totals = ops.sum(exps, axis=axes, keepdims=True)
    weights = exps / ops.where(totals > 0, totals, 1.0)
    return ops.cast(weights, dtype)
