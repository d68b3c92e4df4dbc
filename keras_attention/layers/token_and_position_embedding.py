import math

import keras
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.layers.position_encoding import positions_from_segments
from keras_attention.layers.positions import INPUT_POSITIONS, positions_from_alias
from keras_attention.utils.initializers import clone_initializer


@keras.saving.register_keras_serializable(package="keras_attention")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embedding plus position encoding, the input layer of a Transformer.

    With `mask_zero=True`, token id 0 is padding: the layer emits a Keras mask
    that attention layers downstream consume automatically, so padded keys get
    zero weight without passing masks by hand.

    Args:
        vocabulary_size: number of token ids.
        sequence_length: the longest input (size of the learned position table;
            also checked for the other encodings).
        embedding_dim: the model width.
        input_positions: the positions added to the token embeddings (the
            names of `keras_attention.layers.positions.INPUT_POSITIONS`):
            `"learned"` (`PositionEmbedding`), `"sinusoidal"`
            (`SinusoidalPositionEncoding`) or None (token embeddings only,
            for a model whose positions are inside attention).
            `position_encoding`, the earlier name, is a deprecated alias.
        mask_zero: treat id 0 as padding and emit a mask.
        scale_embeddings: multiply token embeddings by `sqrt(embedding_dim)`,
            as in the Transformer paper, so that they are not swamped by the
            position encoding.
        embeddings_initializer: initializer of the token table and of the
            learned position table (as in keras-hub).
        **kwargs: base layer arguments.

    Call arguments:
        inputs: integer token ids `(B, T)`.
        start_index: position of the first token (incremental decoding).
        positions: optional positions `(T,)` or `(B, T)` to encode instead of
            `start_index + arange(T)` (as in keras-hub).
        segment_ids: optional int `(B, T)` document ids of packed sequences
            (several documents in one row): the positions restart at 0 at
            each document (`keras_attention.ops.segment_positions`), so each
            is embedded as if it were alone; not with `positions`.

    Attributes:
        token_embedding: the token table (a `keras.layers.Embedding`).
        position_embedding: the position part (`PositionEmbedding` or
            `SinusoidalPositionEncoding`, None without input positions);
            keras-hub's name, also reachable as `position_layer`, this
            package's earlier one.

    Example:

    ```python
    tokens = keras.Input((None,), dtype="int32")
    x = keras_attention.layers.TokenAndPositionEmbedding(
        vocabulary_size=5000, sequence_length=128, embedding_dim=64,
        mask_zero=True,
    )(tokens)
    # x carries a padding mask into the next attention layer.
    y = keras_attention.layers.DotProductAttention(scale=True)([x, x])
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        embedding_dim,
        input_positions="learned",
        mask_zero=False,
        scale_embeddings=False,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        (input_positions,) = positions_from_alias(
            kwargs,
            TokenAndPositionEmbedding.__init__,
            type(self).__name__,
            input_positions=input_positions,
        )
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("sequence_length", sequence_length)
        check_positive_int("embedding_dim", embedding_dim)
        INPUT_POSITIONS.check(input_positions)
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.embedding_dim = embedding_dim
        self.input_positions = input_positions
        self.mask_zero = mask_zero
        self.scale_embeddings = scale_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = mask_zero
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            embedding_dim,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        # keras-hub's attribute names (`token_embedding`, `position_embedding`)
        # for the two parts; `position_layer`, this package's earlier name, is
        # an alias, under which `.keras` files saved before hold the table.
        self.position_embedding = INPUT_POSITIONS.build(
            input_positions,
            sequence_length=sequence_length,
            initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.dtype_policy,
            name="position_embedding",
        )

    def build(self, input_shape):
        self._check_length(input_shape[-1])
        self.token_embedding.build(input_shape)
        if self.position_embedding is not None:
            self.position_embedding.build((*input_shape, self.embedding_dim))

    @property
    def position_layer(self):
        """The position part, under this package's earlier name for
        `position_embedding`. Keras' loader tries each attribute that holds a
        layer, so the `.keras` files that stored the table under this name
        still load."""
        return self.position_embedding

    def _check_length(self, length):
        if length is not None and length > self.sequence_length:
            raise ValueError(
                f"The input has {length} tokens but TokenAndPositionEmbedding has "
                f"sequence_length={self.sequence_length}."
            )

    def call(self, inputs, start_index=0, positions=None, segment_ids=None):
        self._check_length(inputs.shape[-1])
        positions = positions_from_segments(
            segment_ids, positions, start_index, inputs.shape[-1]
        )
        embedded = self.token_embedding(inputs)
        if self.scale_embeddings:
            embedded = embedded * ops.cast(
                math.sqrt(self.embedding_dim), embedded.dtype
            )
        if self.position_embedding is None:
            return embedded
        return embedded + self.position_embedding(
            embedded, start_index=start_index, positions=positions
        )

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.embedding_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "sequence_length": self.sequence_length,
                "embedding_dim": self.embedding_dim,
                "input_positions": self.input_positions,
                "mask_zero": self.mask_zero,
                "scale_embeddings": self.scale_embeddings,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
