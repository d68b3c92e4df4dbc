from operator import attrgetter

import keras
from keras import constraints, initializers, ops, regularizers

from keras_attention.layers._attention_options import options_config
from keras_attention.layers.multi_head_attention import MultiHeadAttention

_SERIALIZERS = {
    "initializer": initializers.serialize,
    "regularizer": regularizers.serialize,
    "constraint": constraints.serialize,
}


def _dense_argument(name):
    """A read-only attribute holding the projections' argument `name`."""
    return property(lambda self: self._dense_arguments[name])


@keras.saving.register_keras_serializable(package="keras_attention")
class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention, a drop-in for `keras.layers.GroupQueryAttention`.

    The queries have `num_query_heads` heads; the keys and values only
    `num_key_value_heads`, each shared by a group of
    `num_query_heads / num_key_value_heads` query heads (1 key/value head is
    multi-query attention, as many as the queries multi-head attention).
    Keras' constructor, call arguments, config and weights (copy them with
    `load_keras_weights` or `from_keras`); the computation is our
    `MultiHeadAttention` with `num_key_value_heads`: the key/value heads are
    never copied per group on the standard path, the chunked path serves long
    sequences on every backend and on CPU, and the decoding cache holds only
    the key/value heads, `num_query_heads / num_key_value_heads` times
    smaller than a multi-head cache.

    Args:
        head_dim: size of each head.
        num_query_heads: heads of the queries.
        num_key_value_heads: heads of the keys and values, a divisor of
            `num_query_heads`.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        sliding_window: restrict each query to keys within
            `sliding_window - 1` positions (a symmetric band, as in Keras).
        flash_attention: as in `MultiHeadAttention`: True forces the chunked
            path, False forbids it, None chooses by length.
        kernel_initializer: as for `keras.layers.Dense`.
        bias_initializer: as for `keras.layers.Dense`.
        kernel_regularizer: as for `keras.layers.Dense`.
        bias_regularizer: as for `keras.layers.Dense`.
        activity_regularizer: as for `keras.layers.Dense`.
        kernel_constraint: as for `keras.layers.Dense`.
        bias_constraint: as for `keras.layers.Dense`.
        use_gate: gate the attention output with `sigmoid(query W^G)`.
        seed: dropout seed.
        **kwargs: `MultiHeadAttention`'s other arguments (`chunk_size`,
            `attention_positions`, `max_wavelength`, `alibi_bias_max`,
            `cache_dtype`: `"int8"` for a quantized decoding cache, about 4x
            smaller than float32, `2 * num_key_value_heads * (head_dim + 2)`
            bytes per token; the options pretrained models need: `scale`,
            `soft_cap`, `query_norm`, `key_norm`, `value_norm`, `rotary_embedding`,
            `output_dropout`, `use_output_bias`, `kernel_layout` (`"flat"`:
            `Dense` kernels `(dim, heads * head_dim)`), `use_sinks`,
            `packed_gate`, `cache_layout` (`"heads_first"`: a cache `(B, 2,
            num_key_value_heads, max_length, head_dim)`), `values_from_keys`,
            `shares_keys_values`) and the
            base layer arguments. `head_dim=None` settles the head size in
            `build` (the input's width divided by `num_query_heads`).

    Call arguments:
        Those of `MultiHeadAttention`: `query`, `value`, `key`, the masks,
        `return_attention_scores`, `training`, `use_causal_mask`, the
        `cache` `(B, 2, max_length, num_key_value_heads, head_dim)` (or the
        quantized pair `(values, scales)` of `cache_dtype="int8"`) with its
        `cache_update_index`, `segment_ids` (packed sequences: int
        `(B, T)` document ids, or a pair `(query_ids, key_ids)`, the only
        form with a cache), `positions` (the rotary encoding's, as it
        takes them, e.g. `(B, 4, T)` multi-axis ones), `shared_keys_values`
        (another layer's keys and values, with `shares_keys_values=True`)
        and `return_keys_values`.

    Returns:
        `(B, T, dim)`; then the weights `(B, num_query_heads, T, S)` if
        requested; then the updated cache if one was passed.

    Example:

    ```python
    x = keras.Input((None, 64))
    y = keras_attention.layers.GroupedQueryAttention(
        head_dim=16, num_query_heads=8, num_key_value_heads=2
    )(x, x, use_causal_mask=True)
    ```

    References:
        - [Ainslie et al., 2023. GQA: Training Generalized Multi-Query
          Transformer Models from Multi-Head Checkpoints](
          https://arxiv.org/abs/2305.13245)
        - [Shazeer, 2019. Fast Transformer Decoding: One Write-Head is All You
          Need](https://arxiv.org/abs/1911.02150)
    """

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        dropout=0.0,
        use_bias=True,
        sliding_window=None,
        flash_attention=None,
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
        super().__init__(
            num_heads=num_query_heads,
            key_dim=head_dim,
            num_key_value_heads=num_key_value_heads,
            dropout=dropout,
            use_bias=use_bias,
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

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        if query_shape[-1] != value_shape[-1]:
            raise ValueError(
                "The last dimension of `query_shape` and `value_shape` must be "
                f"equal (the output projection maps back to it); received "
                f"query_shape={query_shape}, value_shape={value_shape}."
            )
        return super().compute_output_shape(query_shape, value_shape, key_shape)

    def _attend(self, query, key, value, mask, training, return_scores, extra):
        if not self._custom_attention():
            return super()._attend(
                query, key, value, mask, training, return_scores, extra
            )
        # A subclass written for Keras' layer overrides `_compute_attention`
        # with its signature and receives, as there, the key/value heads
        # repeated to one per query head.
        self._return_attention_scores = return_scores
        repeats = self.num_repeats
        key, value = ops.repeat(key, repeats, 2), ops.repeat(value, repeats, 2)
        return self._compute_attention(
            query, key, value, attention_mask=mask, training=training, **extra
        )

    # Keras' GroupQueryAttention attribute names.
    head_dim = property(attrgetter("key_dim"))
    num_query_heads = property(attrgetter("num_heads"))
    use_gate = property(attrgetter("_use_gate"))
    sliding_window = property(attrgetter("_sliding_window"))
    kernel_initializer = _dense_argument("kernel_initializer")
    bias_initializer = _dense_argument("bias_initializer")
    kernel_regularizer = _dense_argument("kernel_regularizer")
    bias_regularizer = _dense_argument("bias_regularizer")
    kernel_constraint = _dense_argument("kernel_constraint")
    bias_constraint = _dense_argument("bias_constraint")

    @property
    def num_repeats(self):
        return self.num_heads // self._num_key_value_heads

    def get_config(self):
        serialized = {
            name: _SERIALIZERS[name.rsplit("_", 1)[1]](value)
            for name, value in self._dense_arguments.items()
        }
        config = {
            **keras.layers.Layer.get_config(self),
            "head_dim": self.key_dim,
            "num_query_heads": self.num_heads,
            "num_key_value_heads": self._num_key_value_heads,
            "use_bias": self.use_bias,
            "use_gate": self._use_gate,
            "sliding_window": self._sliding_window,
            "dropout": self.dropout,
            **serialized,
            "seed": self.seed,
        }
        # Our additions (and Keras' argument it does not save), only where
        # set: Keras' config stays Keras' otherwise.
        if self._flash_attention_argument is not None:
            config["flash_attention"] = self._flash_attention_argument
        if self._chunk_size is not None:
            config["chunk_size"] = self._chunk_size
        if self._cache_dtype is not None:
            config["cache_dtype"] = self._cache_dtype
        if self._attention_positions is not None:
            config["attention_positions"] = self._attention_positions
            config["max_wavelength"] = self._max_wavelength
            config["alibi_bias_max"] = self._alibi_bias_max
        config.update(options_config(self._options))
        return config
