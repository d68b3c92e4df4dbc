"""T5's relative position bias: a learned scalar per head and per bucket of
the offset between a key and a query, added to the attention scores."""

import keras
import numpy as np
from keras import ops

from keras_attention._checks import check_length, check_positive_int, static_shape
from keras_attention.ops import relative_position_buckets
from keras_attention.ops.mods import relative_position_score_mod
from keras_attention.ops.positions import check_num_buckets


def _integer(value):
    """NumPy integers as Python ones, so that the config stays JSON."""
    return int(value) if isinstance(value, np.integer) else value


def _check_sequence(name, shape):
    if shape is not None and len(shape) < 2:
        raise ValueError(
            f"`{name}` must have rank 2 or more, `(batch, length, ...)`, with "
            f"the positions on axis 1; received a tensor of rank {len(shape)} "
            f"with shape {shape}."
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class RelativePositionBias(keras.layers.Layer):
    """T5's learned relative position bias, bucketed by offset.

    The score of query `i` and key `j` in head `h` gets the scalar
    `table[bucket(j - i), h]` added, from a trainable table of shape
    `(num_buckets, num_heads)`. The buckets are those of
    `keras_attention.ops.relative_position_buckets`: half of them (per
    direction, when bidirectional) hold one offset each, the nearest ones;
    the rest cover offsets up to `max_distance` on a logarithmic scale, and
    every farther offset shares the last bucket. The bias depends on the
    positions only through `j - i`, so the attention sees relative
    positions, with nothing added to the token embeddings.

    The layer returns the bias `(1, num_heads, T, S)`, not attended values:
    add it to the scores, for instance through the `bias` argument of
    `keras_attention.ops.dot_product_attention` or the `attention_bias`
    argument of `keras_attention.layers.MultiHeadAttention`. As in T5,
    compute it once per forward pass (one layer for the encoder's
    self-attention, one for the decoder's) and pass the same bias to the
    attention of every block: the blocks then share one table. T5 gives
    cross-attention no position bias.

    Args:
        num_heads: number of attention heads, one bias per head.
        num_buckets: number of buckets (even when bidirectional, at least 2
            per direction); 32 in T5.
        max_distance: the offset from which all share the last bucket; 128
            in T5.
        bidirectional: separate buckets for keys ahead of the query (an
            encoder's self-attention). False for a causal decoder: every key
            ahead of the query then falls in bucket 0, which the causal mask
            hides anyway.
        embeddings_initializer: initializer of the table. The default,
            `"random_normal"` (standard deviation 0.05), is close to T5's
            `d_model ** -0.5` for `d_model=512`.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        query: the query sequence `(batch, T, ...)`; only its length `T`
            (axis 1) is used.
        key: the key sequence `(batch, S, ...)`; only its length `S` is
            used. Defaults to `query` (self-attention).
        query_offset: the absolute position of the first query, an int or a
            scalar tensor. For cached decoding, where the query is one token
            at position `t` and the keys are a cache of `max_length`, pass
            `t`: the bias then equals row `t` of the full sequence's bias.

    Returns:
        The bias `(1, num_heads, T, S)` in the layer's compute dtype.

    Example:

    ```python
    x = keras.random.normal((2, 10, 64))  # (batch, T, features)
    q = k = v = keras.random.normal((2, 10, 4, 16))  # (batch, T, heads, head_dim)
    position_bias = keras_attention.layers.RelativePositionBias(num_heads=4)
    bias = position_bias(x)  # (1, 4, 10, 10), shared by every block
    outputs = keras_attention.ops.dot_product_attention(q, k, v, bias=bias)
    ```

    References:
        - [Raffel et al., 2020](https://arxiv.org/abs/1910.10683), "Exploring
          the Limits of Transfer Learning with a Unified Text-to-Text
          Transformer" (T5; the bucketed scalar bias).
        - [Shaw et al., 2018](https://arxiv.org/abs/1803.02155),
          "Self-Attention with Relative Position Representations" (relative
          positions in self-attention).
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        embeddings_initializer="random_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        num_heads = _integer(num_heads)
        num_buckets = _integer(num_buckets)
        max_distance = _integer(max_distance)
        check_positive_int("num_heads", num_heads)
        check_positive_int("num_buckets", num_buckets)
        check_positive_int("max_distance", max_distance)
        if not isinstance(bidirectional, (bool, np.bool_)):
            raise ValueError(
                f"`bidirectional` must be a bool; received {bidirectional!r}."
            )
        bidirectional = bool(bidirectional)
        check_num_buckets(num_buckets, bidirectional)
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, query_shape, key_shape=None):
        _check_sequence("query", tuple(query_shape))
        if key_shape is not None:
            _check_sequence("key", tuple(key_shape))
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.num_buckets, self.num_heads),
            initializer=self.embeddings_initializer,
            trainable=True,
        )

    def _lengths(self, query, key, query_offset):
        """Checks the call's arguments; returns the key tensor."""
        key = query if key is None else key
        _check_sequence("query", static_shape(query))
        _check_sequence("key", static_shape(key))
        check_length("query_offset", _integer(query_offset))
        return key

    def call(self, query, key=None, query_offset=0):
        key = self._lengths(query, key, query_offset)
        buckets = relative_position_buckets(
            ops.shape(query)[1],
            ops.shape(key)[1],
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
            bidirectional=self.bidirectional,
            offset=query_offset,
        )
        # (T, S, num_heads) -> (1, num_heads, T, S)
        values = ops.take(self.embeddings, buckets, axis=0)
        bias = ops.expand_dims(ops.transpose(values, (2, 0, 1)), 0)
        return ops.cast(bias, self.compute_dtype)

    def score_mod(self):
        """`(score_mod, score_mod_inputs)` for
        `keras_attention.ops.dot_product_attention`: the same bias added
        tile by tile (`ops.mods.relative_position_score_mod` over this
        layer's table), so that the memory-efficient path never builds the
        `(T, S)` bias and the table's gradient stays exact."""
        mod = relative_position_score_mod(
            self.num_buckets, self.max_distance, self.bidirectional
        )
        return mod, (self.embeddings,)

    def compute_mask(self, query, previous_mask=None):
        # The bias is not aligned with the query's positions: a padding mask
        # of the inputs applies to the attention, not to the bias.
        return None

    def compute_output_shape(self, query_shape, key_shape=None):
        query_shape = tuple(query_shape)
        key_shape = query_shape if key_shape is None else tuple(key_shape)
        _check_sequence("query", query_shape)
        _check_sequence("key", key_shape)
        return (1, self.num_heads, query_shape[1], key_shape[1])

    def compute_output_spec(self, query, key=None, query_offset=0):
        key = self._lengths(query, key, query_offset)
        shape = self.compute_output_shape(query.shape, key.shape)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "num_buckets": self.num_buckets,
                "max_distance": self.max_distance,
                "bidirectional": self.bidirectional,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
