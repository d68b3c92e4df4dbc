import keras
from keras import ops

from keras_attention._checks import check_positive_int, check_rank
from keras_attention.ops.positions import check_segment_ids, segment_positions


def _check_sequence_input(name, input_shape):
    check_rank(name, tuple(input_shape), range(2, 9))


def positions_from_segments(segment_ids, positions, start_index, length=None):
    """The positions a position layer encodes: `segment_positions(segment_ids)`
    when packed sequences are given (each document from 0), else `positions`.

    Raises a ValueError for `segment_ids` given with `positions` or a nonzero
    `start_index` (they place the tokens twice), or not of shape
    `(batch, length)`."""
    if segment_ids is None:
        return positions
    if positions is not None:
        raise ValueError(
            "Pass either `positions` or `segment_ids` (whose positions restart "
            "at each document), not both."
        )
    if isinstance(start_index, int) and start_index != 0:
        raise ValueError(
            "`segment_ids` number the tokens of each document from 0; they "
            f"cannot be combined with start_index={start_index}."
        )
    return segment_positions(check_segment_ids(segment_ids, length))


class InputAlignedLayer(keras.layers.Layer):
    """The base of the position layers: their output has the shape of their
    input, position for position, so a padding mask passes through."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


@keras.saving.register_keras_serializable(package="keras_attention")
class SinusoidalPositionEncoding(InputAlignedLayer):
    """The fixed sinusoidal position encoding of the Transformer.

    `PE[t, 2k] = sin(t * w_k)`, `PE[t, 2k + 1] = cos(t * w_k)`, with
    `w_k = 1 / max_wavelength^(2k / depth)`. For each frequency pair,
    `PE[t + j]` is a rotation of `PE[t]` by the angle `j * w_k`, which lets
    attention express relative offsets as linear functions of the encodings.

    The layer returns the encoding (same shape as its input, for adding to the
    token embeddings), like `keras_hub.layers.SinePositionEncoding`. Angles are
    computed in float32 and the result cast to the layer's compute dtype, so
    positions stay exact under mixed precision.

    Args:
        max_wavelength: the longest wavelength, 10000 in the paper.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(..., T, depth)`; only its shape is used.
        start_index: absolute position of the first step (for incremental
            decoding, where one step at position `t` is encoded alone).
        positions: optional absolute positions `(T,)` or `(B, T)` to encode
            instead of `start_index + arange(T)` (as in keras-hub), e.g. for
            left-padded or packed sequences.
        segment_ids: optional int `(B, T)` document ids of packed sequences:
            the positions restart at 0 at each document
            (`keras_attention.ops.segment_positions`); not with `positions`.

    Example:

    ```python
    embeddings = keras.layers.Embedding(1000, 64)(tokens)
    x = embeddings + keras_attention.layers.SinusoidalPositionEncoding()(embeddings)
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(max_wavelength, (int, float)) or max_wavelength <= 1:
            raise ValueError(
                f"`max_wavelength` must be a number > 1; received {max_wavelength!r}."
            )
        self.max_wavelength = max_wavelength

    def build(self, input_shape):
        _check_sequence_input("inputs", input_shape)

    def call(self, inputs, start_index=0, positions=None, segment_ids=None):
        shape = ops.shape(inputs)
        length, depth = shape[-2], shape[-1]
        positions = positions_from_segments(
            segment_ids, positions, start_index, inputs.shape[-2]
        )
        if positions is None:
            positions = ops.arange(length, dtype="int32") + start_index
        positions = ops.cast(positions, "float32")
        encoding = sinusoidal_encoding(positions, depth, self.max_wavelength)
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def get_config(self):
        config = super().get_config()
        config["max_wavelength"] = self.max_wavelength
        return config


def sinusoidal_encoding(positions, depth, max_wavelength=10000):
    """The sinusoidal encoding `(..., depth)` of float32 `positions` `(...)`."""
    pair_index = ops.cast(ops.arange(depth, dtype="int32") // 2, "float32")
    frequencies = ops.power(
        ops.cast(max_wavelength, "float32"),
        -2.0 * pair_index / ops.cast(depth, "float32"),
    )
    angles = positions[..., None] * frequencies
    is_cos = ops.cast(ops.arange(depth, dtype="int32") % 2, "bool")
    return ops.where(is_cos, ops.cos(angles), ops.sin(angles))


@keras.saving.register_keras_serializable(package="keras_attention")
class PositionEmbedding(InputAlignedLayer):
    """A learned position embedding: one trainable vector per position.

    As in BERT and GPT: a `(sequence_length, depth)` table whose first `T` rows
    are returned for an input of length `T` (from `start_index`). The layer
    returns the embedding, to be added to the token embeddings. A drop-in for
    `keras_hub.layers.PositionEmbedding`: the table is the attribute
    `position_embeddings` (`embeddings` is kept as an alias), a weight named
    "embeddings" as in keras-hub.

    Args:
        sequence_length: the number of positions (the longest input).
        initializer: initializer of the table.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(..., T, depth)`; only its shape is used.
        start_index: position of the first step (incremental decoding).
        positions: optional rows of the table `(T,)` or `(B, T)`, each below
            `sequence_length`, to use instead of `start_index + arange(T)`
            (as in keras-hub).
        segment_ids: optional int `(B, T)` document ids of packed sequences:
            the rows restart at 0 at each document
            (`keras_attention.ops.segment_positions`); not with `positions`.

    Example:

    ```python
    embeddings = keras.layers.Embedding(1000, 64)(tokens)
    x = embeddings + keras_attention.layers.PositionEmbedding(128)(embeddings)
    ```

    References:
        - [Gehring et al., 2017](https://arxiv.org/abs/1705.03122)
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        check_positive_int("sequence_length", sequence_length)
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        _check_sequence_input("inputs", input_shape)
        depth = input_shape[-1]
        if depth is None:
            raise ValueError(
                "PositionEmbedding needs a known feature size (last axis); "
                f"received input shape {tuple(input_shape)}."
            )
        self._check_length(input_shape[-2])
        # keras-hub's names: the attribute `position_embeddings`, the weight
        # "embeddings" (so the weight paths of the two layers match).
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, depth),
            initializer=self.initializer,
        )

    @property
    def embeddings(self):
        """The table, under this package's earlier name for
        `position_embeddings`."""
        return self.position_embeddings

    def _check_length(self, length):
        if length is not None and length > self.sequence_length:
            raise ValueError(
                f"`inputs` must have at most sequence_length="
                f"{self.sequence_length} positions (axis -2), the size of the "
                f"PositionEmbedding's table; received {length}."
            )

    def call(self, inputs, start_index=0, positions=None, segment_ids=None):
        self._check_length(inputs.shape[-2])
        shape = ops.shape(inputs)
        positions = positions_from_segments(
            segment_ids, positions, start_index, inputs.shape[-2]
        )
        table = ops.convert_to_tensor(self.position_embeddings)
        if positions is None:
            rows = ops.slice(table, (start_index, 0), (shape[-2], shape[-1]))
        else:
            rows = ops.take(table, ops.cast(positions, "int32"), axis=0)
        return ops.broadcast_to(ops.cast(rows, self.compute_dtype), shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
