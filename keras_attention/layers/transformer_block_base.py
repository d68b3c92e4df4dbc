"""What the Transformer encoder and decoder blocks share."""

from operator import attrgetter

import keras
from keras import ops

from keras_attention._checks import check_positive_int, check_rate
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.feed_forward import FeedForward
from keras_attention.layers.multi_head_attention import (
    MultiHeadAttention,
    check_key_value_heads,
)
from keras_attention.layers.positions import ATTENTION_POSITIONS, positions_from_alias
from keras_attention.utils import keras_internals
from keras_attention.utils.initializers import clone_initializer


class TransformerBlockBase(keras_internals.KeepsKerasMasksWhenCast, keras.layers.Layer):
    """Residual sub-layers with layer normalization, post-norm (the paper:
    `LayerNorm(x + Dropout(Sublayer(x)))`) or pre-norm with `normalize_first=True`
    (`x + Dropout(Sublayer(LayerNorm(x)))`, which trains deep stacks more
    stably). Arguments follow keras-hub's `TransformerEncoder` /
    `TransformerDecoder`; `norm_first`, this package's earlier name for
    `normalize_first`, is still read from saved configs, and so is
    `position_encoding`, its earlier name for `attention_positions`.
    """

    def __init__(
        self,
        intermediate_dim,
        num_heads,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        normalize_first=False,
        key_dim=None,
        chunk_size=None,
        num_key_value_heads=None,
        attention_positions=None,
        **kwargs,
    ):
        if "norm_first" in kwargs:
            normalize_first = kwargs.pop("norm_first")
        (attention_positions,) = positions_from_alias(
            kwargs,
            TransformerBlockBase.__init__,
            type(self).__name__,
            attention_positions=attention_positions,
        )
        super().__init__(**kwargs)
        keras_internals.require("get_keras_mask", "set_keras_mask")
        check_positive_int("intermediate_dim", intermediate_dim)
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim, allow_none=True)
        check_positive_int("chunk_size", chunk_size, allow_none=True)
        check_rate("dropout", dropout)
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = normalize_first
        self.key_dim = key_dim
        self.chunk_size = chunk_size
        check_key_value_heads(num_heads, num_key_value_heads)
        self.num_key_value_heads = num_key_value_heads
        self.attention_positions = ATTENTION_POSITIONS.check(attention_positions)
        self.supports_masking = True

    def _head_size(self, hidden_dim):
        """keras-hub's rule: `hidden_dim // num_heads` (floored, so a width
        that `num_heads` does not divide still builds, as in keras-hub), or
        `key_dim` when given."""
        if self.key_dim is not None:
            return self.key_dim
        if hidden_dim is None:
            raise ValueError(
                "The model width (last axis of the input) must be known to "
                "size the attention heads, or pass key_dim explicitly."
            )
        head_size = hidden_dim // self.num_heads
        if head_size == 0:
            raise ValueError(
                f"The head size hidden_dim // num_heads is 0: the model width "
                f"({hidden_dim}) must be at least num_heads ({self.num_heads}), "
                "or pass key_dim explicitly."
            )
        return head_size

    def _build_attention_sublayer(
        self,
        name,
        query_shape,
        value_shape,
        attention_positions=None,
        cache_dtype=None,
    ):
        """The attention `name` from `query_shape` to `value_shape`, with its
        layer normalization `{name}_layer_norm` and dropout `{name}_dropout`,
        built."""
        attention = MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self._head_size(query_shape[-1]),
            num_key_value_heads=self.num_key_value_heads,
            attention_positions=attention_positions,
            cache_dtype=cache_dtype,
            dropout=self.dropout,
            chunk_size=self.chunk_size,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build(query_shape, value_shape)
        norm = self._norm(f"{name}_layer_norm")
        norm.build(query_shape)
        dropout = Dropout(self.dropout, dtype=self.dtype_policy, name=f"{name}_dropout")
        return attention, norm, dropout

    def _build_self_attention(self, input_shape):
        """Builds the first sub-layer: `self_attention`, with the positions
        inside it, and its layer normalization and dropout."""
        (
            self.self_attention,
            self.self_attention_layer_norm,
            self.self_attention_dropout,
        ) = self._build_attention_sublayer(
            "self_attention",
            input_shape,
            input_shape,
            self.attention_positions,
            # The decoder's: only its self-attention cache grows with the
            # decoded tokens.
            getattr(self, "cache_dtype", None),
        )

    def _build_feedforward(self, input_shape):
        """Builds the last sub-layer: `feedforward` and its layer
        normalization."""
        self.feedforward = FeedForward(
            self.intermediate_dim,
            activation=self.activation,
            dropout=self.dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="feedforward",
        )
        self.feedforward.build(input_shape)
        self.feedforward_layer_norm = self._norm("feedforward_layer_norm")
        self.feedforward_layer_norm.build(input_shape)

    def _norm(self, name):
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _residual(self, x, norm, sublayer):
        """Applies `sublayer` (returning its output and extras) with residual
        and normalization in the configured order."""
        inner = norm(x) if self.normalize_first else x
        out, *extras = sublayer(inner)
        x = x + out
        if not self.normalize_first:
            x = norm(x)
        return x, extras

    def _feedforward_residual(self, x, training):
        """The last sub-layer: the feed-forward network (with its own
        dropout), the residual and normalization."""
        x, _ = self._residual(
            x,
            self.feedforward_layer_norm,
            lambda y: (self.feedforward(y, training=training),),
        )
        return x

    def _check_inputs(self, name, shape):
        if len(shape) != 3:
            raise ValueError(
                f"`{name}` must be (batch, length, hidden_dim); received shape "
                f"{tuple(shape)}."
            )

    @staticmethod
    def _key_padding_mask(mask):
        """(B, S) padding mask -> (B, 1, S) attention mask."""
        return None if mask is None else ops.expand_dims(ops.cast(mask, "bool"), 1)

    @staticmethod
    def _padding_mask(padding_mask, keras_mask, sequence):
        """keras-hub's rule for a sequence's padding mask: the explicit one,
        else the Keras mask of the sequence (the one Keras filled into the
        call, or the one the tensor carries)."""
        if padding_mask is not None:
            return padding_mask
        if keras_mask is not None or sequence is None:
            return keras_mask
        return keras_internals.get_keras_mask(sequence)

    def _attend(self, attention, query, value, **kwargs):
        """Calls `attention` with the Keras masks of `query` and `value`
        hidden, for the decoder: it passes the padding as a key-side
        `attention_mask`, as keras-hub's decoder does, whose attention layer
        takes no query mask; a Keras mask left on the query would become our
        attention layer's `query_mask` and zero the padded rows that
        keras-hub's decoder computes like any other."""
        with keras_internals.hidden_keras_masks(query, value):
            return attention(query, value, **kwargs)

    # keras-hub's names for the sublayers, which code written against its
    # blocks reaches (e.g. to copy weights or run one sub-layer).
    _self_attention_layer = property(attrgetter("self_attention"))
    _self_attention_layer_norm = property(attrgetter("self_attention_layer_norm"))
    _feedforward_layer_norm = property(attrgetter("feedforward_layer_norm"))
    _feedforward_intermediate_dense = property(
        attrgetter("feedforward.intermediate_dense")
    )
    _feedforward_output_dense = property(attrgetter("feedforward.output_dense"))

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "normalize_first": self.normalize_first,
                "key_dim": self.key_dim,
                "chunk_size": self.chunk_size,
                "num_key_value_heads": self.num_key_value_heads,
                "attention_positions": self.attention_positions,
            }
        )
        return config


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)
