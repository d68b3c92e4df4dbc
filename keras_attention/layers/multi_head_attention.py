import math

import keras
from keras import ops

from keras_attention._checks import (
    check_dims_match,
    check_positive_int,
    check_rank,
    check_rate,
    static_shape,
)
from keras_attention.ops.attention import (
    apply_attention_weights,
    attention_weights,
    dot_product_attention,
)
from keras_attention.ops.masks import causal_mask, merge_masks

# Above this many keys the layer switches to the chunked (memory-efficient) path
# by itself, with blocks of AUTO_CHUNK_SIZE keys. Below it the standard path is
# as fast or faster and keeps the weights available.
AUTO_CHUNK_MIN_LENGTH = 2048
AUTO_CHUNK_SIZE = 512


def clone_initializer(initializer):
    """A new instance with the same config: stateless initializers would
    otherwise give every sublayer that shares one the same values."""
    return initializer.__class__.from_config(initializer.get_config())


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    `MultiHead(Q, K, V) = Concat(head_1..head_h) W^O` with
    `head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V`.

    Takes the constructor and call arguments of `keras.layers.MultiHeadAttention`
    (replacing the import is enough) and has the same weights, so
    `load_keras_weights` / `from_keras` copy a trained Keras layer into it.
    It adds:

    - **incremental decoding**: `cache` `(B, 2, S, num_heads, key_dim)` and
      `cache_update_index`, following keras-hub's `CachedMultiHeadAttention`:
      with an index, the keys/values of the new query steps are written into
      the cache at that position; without one, the cache is used as the
      precomputed keys/values (cross-attention over a fixed encoder output).
      With a cache the call returns `(output, cache)`.
    - **memory-efficient attention** for long sequences (online softmax over
      blocks of keys, O(T * chunk) memory in the forward and backward pass):
      always with `chunk_size=N` or `flash_attention=True`, and by itself when
      there are at least 2048 keys (`AUTO_CHUNK_MIN_LENGTH`), unless
      `flash_attention=False`. The chunked path is skipped when the weights are
      needed: `return_attention_scores=True` or attention dropout in training.
    - fully masked query rows give zero attention (never NaN).

    Inputs are `(B, T, dim)` sequences (`attention_axes` may only name the
    sequence axis).

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        value_dim: size of each head for value (defaults to `key_dim`).
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        output_shape: size of the output (defaults to the query's last axis).
        attention_axes: None or the sequence axis (1 or -2).
        sliding_window: restrict each query to keys within
            `sliding_window - 1` positions (a symmetric band, as in Keras).
        flash_attention: True forces the chunked path, False forbids the
            automatic switch, None lets the layer choose by length.
        chunk_size: block size of the chunked path; setting it forces the
            chunked path.
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
        **kwargs: base layer arguments.

    Call arguments:
        query: `(B, T, dim)`.
        value: `(B, S, dim)`.
        key: `(B, S, dim)`, defaults to `value`.
        query_mask, value_mask, key_mask: boolean `(B, T)` / `(B, S)` masks;
            taken from the Keras masks of the inputs when not given.
        attention_mask: boolean `(B, T, S)`, True = attend.
        return_attention_scores: also return the weights `(B, N, T, S)`.
        training: whether dropout is active.
        use_causal_mask: query `t` attends to keys `<= t` (with a cache: keys
            `<= cache_update_index + t`).
        cache: `(B, 2, S, num_heads, key_dim)` keys and values.
        cache_update_index: where the new keys/values go in the cache.

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
        **kwargs,
    ):
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim)
        check_positive_int("value_dim", value_dim, allow_none=True)
        check_positive_int("sliding_window", sliding_window, allow_none=True)
        check_positive_int("chunk_size", chunk_size, allow_none=True)
        check_rate("dropout", dropout)
        if isinstance(output_shape, (list, tuple)):
            if len(output_shape) != 1:
                raise ValueError(
                    "`output_shape` must be an int or a 1-tuple for sequence "
                    f"inputs; received {output_shape}."
                )
            output_shape = output_shape[0]
        check_positive_int("output_shape", output_shape, allow_none=True)
        if isinstance(attention_axes, int):
            attention_axes = (attention_axes,)
        if attention_axes is not None and tuple(attention_axes) not in ((1,), (-2,)):
            raise ValueError(
                "This MultiHeadAttention attends over the sequence axis of "
                "(batch, length, dim) inputs: `attention_axes` must be None, 1 or "
                f"-2; received {attention_axes}."
            )
        if flash_attention not in (None, True, False):
            raise ValueError(
                f"`flash_attention` must be None, True or False; received "
                f"{flash_attention!r}."
            )
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_shape
        self.attention_axes = None if attention_axes is None else tuple(attention_axes)
        self.sliding_window = sliding_window
        self.flash_attention = flash_attention
        self.chunk_size = chunk_size
        self.use_gate = use_gate
        self.seed = seed
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.supports_masking = True
        self.dropout_layer = keras.layers.Dropout(
            dropout, seed=seed, dtype=self.dtype_policy
        )

    # -- building --------------------------------------------------------

    def _projection(self, name, heads_dim, activation=None):
        return keras.layers.EinsumDense(
            "abc,cde->abde",
            output_shape=(None, self.num_heads, heads_dim),
            bias_axes="de" if self.use_bias else None,
            activation=activation,
            name=name,
            **self._sublayer_kwargs(),
        )

    def _sublayer_kwargs(self):
        return {
            "kernel_initializer": clone_initializer(self.kernel_initializer),
            "bias_initializer": clone_initializer(self.bias_initializer),
            "kernel_regularizer": self.kernel_regularizer,
            "bias_regularizer": self.bias_regularizer,
            "kernel_constraint": self.kernel_constraint,
            "bias_constraint": self.bias_constraint,
            "dtype": self.dtype_policy,
        }

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        self._check_shapes(query_shape, value_shape, key_shape)
        for name, shape in (("query", query_shape), ("value", value_shape)):
            if shape[-1] is None:
                raise ValueError(
                    f"The feature size (last axis) of `{name}` must be known; "
                    f"received shape {tuple(shape)}."
                )
        # Same sublayers, names and creation order as keras.layers.
        # MultiHeadAttention, so that its weights can be copied over.
        self.query_dense = self._projection("query", self.key_dim)
        self.query_dense.build(query_shape)
        self.key_dense = self._projection("key", self.key_dim)
        self.key_dense.build(key_shape)
        self.gate_dense = None
        if self.use_gate:
            self.gate_dense = self._projection("gate", self.value_dim, "sigmoid")
            self.gate_dense.build(query_shape)
        self.value_dense = self._projection("value", self.value_dim)
        self.value_dense.build(value_shape)
        self.output_dense = keras.layers.EinsumDense(
            "abcd,cde->abe",
            output_shape=(None, self.output_dim or query_shape[-1]),
            bias_axes="e" if self.use_bias else None,
            name="attention_output",
            **self._sublayer_kwargs(),
        )
        self.output_dense.build((None, None, self.num_heads, self.value_dim))

    def _check_shapes(self, query_shape, value_shape, key_shape):
        check_rank("query", tuple(query_shape), 3)
        check_rank("value", tuple(value_shape), 3)
        check_rank("key", tuple(key_shape), 3)
        check_dims_match("query", query_shape[0], "value", value_shape[0], "batch size")
        check_dims_match(
            "key", key_shape[1], "value", value_shape[1], "sequence length (axis 1)"
        )

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
    ):
        key_input = value if key is None else key
        self._check_shapes(
            static_shape(query), static_shape(value), static_shape(key_input)
        )
        gate = self.gate_dense(query) if self.gate_dense is not None else None
        projected_query = self.query_dense(query)
        if cache is None:
            projected_key = self.key_dense(key_input)
            projected_value = self.value_dense(value)
            offset = 0
        else:
            projected_key, projected_value, cache = self._use_cache(
                cache, cache_update_index, key_input, value
            )
            # The masks of the new inputs do not describe the cached keys.
            value_mask = key_mask = None
            offset = 0 if cache_update_index is None else cache_update_index

        query_length = ops.shape(projected_query)[1]
        key_length = ops.shape(projected_key)[1]
        mask = self._merge_masks(
            query_mask, value_mask, key_mask, attention_mask, query_length, key_length
        )
        # A plain causal mask is generated inside the attention op (never
        # materialized on the chunked path); an offset one is built here.
        is_causal = use_causal_mask and cache is None
        if use_causal_mask and cache is not None:
            mask = merge_masks(mask, causal_mask(query_length, key_length, offset))
        if mask is not None:
            mask = ops.expand_dims(mask, 1) if len(mask.shape) == 3 else mask

        dropout_active = bool(training) and self.dropout > 0
        scale = 1.0 / math.sqrt(self.key_dim)
        weights = None
        chunk = self._chunk_size(
            projected_key.shape[1], return_attention_scores or dropout_active
        )
        if chunk is not None:
            output = dot_product_attention(
                projected_query,
                projected_key,
                projected_value,
                mask=mask,
                is_causal=is_causal,
                scale=scale,
                chunk_size=chunk,
            )
        else:
            weights = attention_weights(
                projected_query, projected_key, mask, is_causal, scale
            )
            kept = self.dropout_layer(weights, training=training)
            output = apply_attention_weights(kept, projected_value)
        if gate is not None:
            output = output * ops.cast(gate, output.dtype)
        output = self.output_dense(output)

        results = [output]
        if return_attention_scores:
            results.append(weights)
        if cache is not None:
            results.append(cache)
        return results[0] if len(results) == 1 else tuple(results)

    def _use_cache(self, cache, cache_update_index, key, value):
        if self.key_dim != self.value_dim:
            raise ValueError(
                "A cache stacks keys and values, so it needs key_dim == value_dim; "
                f"this layer has key_dim={self.key_dim}, value_dim={self.value_dim}."
            )
        shape = static_shape(cache)
        expected = (None, 2, None, self.num_heads, self.key_dim)
        if (
            len(shape) != 5
            or shape[1] != 2
            or shape[3] != self.num_heads
            or shape[4] != self.key_dim
        ):
            raise ValueError(
                f"`cache` must have shape (batch, 2, max_length, num_heads="
                f"{self.num_heads}, key_dim={self.key_dim}) = {expected}; "
                f"received {shape}."
            )
        key_cache, value_cache = cache[:, 0], cache[:, 1]
        if cache_update_index is None:
            return key_cache, value_cache, cache
        start = (0, cache_update_index, 0, 0)
        key_cache = ops.slice_update(
            key_cache, start, ops.cast(self.key_dense(key), key_cache.dtype)
        )
        value_cache = ops.slice_update(
            value_cache, start, ops.cast(self.value_dense(value), value_cache.dtype)
        )
        return key_cache, value_cache, ops.stack((key_cache, value_cache), axis=1)

    def _merge_masks(
        self, query_mask, value_mask, key_mask, attention_mask, query_length, key_length
    ):
        masks = []
        if query_mask is not None:
            masks.append(ops.expand_dims(ops.cast(query_mask, "bool"), -1))
        for m in (value_mask, key_mask):
            if m is not None:
                masks.append(ops.expand_dims(ops.cast(m, "bool"), -2))
        if self.sliding_window is not None:
            rows = ops.arange(query_length)[:, None]
            cols = ops.arange(key_length)[None, :]
            masks.append(ops.less(ops.abs(rows - cols), self.sliding_window))
        if attention_mask is not None:
            attention_mask = ops.convert_to_tensor(attention_mask)
            got = static_shape(attention_mask)
            if len(got) not in (3, 4):
                raise ValueError(
                    "`attention_mask` must have shape (batch, query_length, "
                    f"key_length) (or with a heads axis); received {got}."
                )
            masks.append(ops.cast(attention_mask, "bool"))
        return merge_masks(*masks)

    def _chunk_size(self, key_length, needs_weights):
        if needs_weights or self.flash_attention is False and self.chunk_size is None:
            return None
        if self.chunk_size is not None:
            return self.chunk_size
        if self.flash_attention:
            return AUTO_CHUNK_SIZE
        if key_length is not None and key_length >= AUTO_CHUNK_MIN_LENGTH:
            return AUTO_CHUNK_SIZE
        return None

    # -- cache helpers ---------------------------------------------------

    def initial_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache `(B, 2, max_length, heads, key_dim)`."""
        return ops.zeros(
            (batch_size, 2, max_length, self.num_heads, self.key_dim),
            dtype=dtype or self.compute_dtype,
        )

    def compute_key_value_cache(self, value, key=None):
        """Keys and values of a fixed sequence (e.g. the encoder output) as a
        cache to pass with `cache_update_index=None`."""
        key = value if key is None else key
        return ops.stack((self.key_dense(key), self.value_dense(value)), axis=1)

    # -- Keras interop ---------------------------------------------------

    def load_keras_weights(self, keras_layer):
        """Copies the weights of a built `keras.layers.MultiHeadAttention`.

        The two layers must agree on num_heads, key_dim, value_dim, use_bias and
        use_gate; this layer is built to the Keras layer's input sizes if needed.
        """
        if not keras_layer.built:
            raise ValueError("The Keras MultiHeadAttention must be built first.")
        theirs = keras_layer.get_config()
        for name in ("num_heads", "key_dim", "use_bias"):
            if theirs[name] != getattr(self, name):
                raise ValueError(
                    f"Cannot load weights: keras layer has {name}={theirs[name]}, "
                    f"this layer has {name}={getattr(self, name)}."
                )
        their_value_dim = theirs.get("value_dim") or theirs["key_dim"]
        if their_value_dim != self.value_dim or bool(
            theirs.get("use_gate", False)
        ) != bool(self.use_gate):
            raise ValueError(
                "Cannot load weights: value_dim/use_gate differ "
                f"({their_value_dim}, {theirs.get('use_gate', False)}) vs "
                f"({self.value_dim}, {self.use_gate})."
            )
        if not self.built:
            dims = [
                keras_layer._query_dense.kernel.shape[0],
                keras_layer._value_dense.kernel.shape[0],
                keras_layer._key_dense.kernel.shape[0],
            ]
            self.build(*[(None, None, d) for d in dims])
        self.set_weights(keras_layer.get_weights())
        return self

    @classmethod
    def from_keras(cls, keras_layer, **kwargs):
        """A new layer with the config and weights of a Keras MultiHeadAttention."""
        config = keras_layer.get_config()
        for name in ("name", "trainable", "dtype"):
            config.pop(name, None)
        config.update(kwargs)
        return cls(**config).load_keras_weights(keras_layer)

    # -- shapes and config -----------------------------------------------

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

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
    ):
        key_shape = value.shape if key is None else key.shape
        self._check_shapes(query.shape, value.shape, key_shape)
        results = [
            keras.KerasTensor(
                self.compute_output_shape(query.shape, value.shape),
                dtype=self.compute_dtype,
            )
        ]
        if return_attention_scores:
            key_length = key_shape[1] if cache is None else cache.shape[2]
            results.append(
                keras.KerasTensor(
                    (query.shape[0], self.num_heads, query.shape[1], key_length),
                    dtype=self.compute_dtype,
                )
            )
        if cache is not None:
            results.append(keras.KerasTensor(cache.shape, dtype=cache.dtype))
        return results[0] if len(results) == 1 else tuple(results)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_shape": self.output_dim,
                "attention_axes": self.attention_axes,
                "sliding_window": self.sliding_window,
                "flash_attention": self.flash_attention,
                "chunk_size": self.chunk_size,
                "use_gate": self.use_gate,
                "seed": self.seed,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(
                    self.kernel_regularizer
                ),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "kernel_constraint": keras.constraints.serialize(
                    self.kernel_constraint
                ),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
            }
        )
        return config
