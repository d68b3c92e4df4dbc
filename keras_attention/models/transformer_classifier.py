import keras
from keras import ops

from keras_attention._checks import check_choice, check_positive_int
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_attention.layers.transformer_encoder import TransformerEncoderBlock
from keras_attention.models.language_model import PackedInputsMixin
from keras_attention.models.saving import ConfigMixin
from keras_attention.models.text_classifier import (
    MaskedAverage,
    PrependToken,
    TextClassifier,
    check_classifier_args,
    class_probabilities,
)
from keras_attention.models.transformer_options import (
    TRANSFORMER_OPTIONS,
    check_transformer_options,
)
from keras_attention.ops import padding_mask
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst

# The id of the [CLS] token prepended with `pooling="cls"`: `[START]` in the
# vocabularies of `keras_attention.data.train_word_piece`, a token that never
# occurs inside a text.
CLS_TOKEN_ID = 2

# The config a `TransformerClassifier` shares with the `TransformerTextEncoder`
# it may start from: the sizes and options of the embedding and the blocks.
ENCODER_CONFIG = (
    "max_length",
    "hidden_dim",
    "num_heads",
    "num_layers",
    "intermediate_dim",
    *TRANSFORMER_OPTIONS,
)

# The sizes and positions a classifier takes from the encoder it starts from
# (`from_pretrained_encoder`), which its weights need equal.
ENCODER_SIZES = (
    "hidden_dim",
    "num_heads",
    "num_layers",
    "intermediate_dim",
    "input_positions",
    "attention_positions",
    "num_key_value_heads",
)


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerClassifier(TextClassifier):
    """A Transformer encoder that classifies a text.

    Token plus position embeddings, `num_layers` encoder blocks
    (self-attention and feed-forward) over the real tokens, then either the
    mean of the outputs over the real tokens (`pooling="mean"`) or the output
    at a `[CLS]` token put in front of the text (`pooling="cls"`, as in BERT),
    dropout and a softmax over the classes.

    `token_importance` reads the last block's self-attention, averaged over
    heads: with `"cls"` pooling the row of the `[CLS]` query (what the pooled
    vector attends to), with `"mean"` pooling the mean of the rows of the real
    tokens (the attention each token receives).

    Args:
        vocabulary_size: number of token ids (0 is padding).
        num_classes: number of classes.
        max_length: the longest input in tokens.
        hidden_dim: model width.
        num_heads: attention heads per block.
        num_layers: encoder blocks.
        intermediate_dim: feed-forward hidden size.
        dropout: dropout on embeddings, attention, sub-layers and the pooled
            vector.
        pooling: `"mean"` or `"cls"`.
        input_positions: positions added to the token embeddings:
            `"learned"`, `"sinusoidal"` or None (see
            `keras_attention.layers.positions.INPUT_POSITIONS`).
            `position_encoding`, its earlier name, is a deprecated alias.
        attention_positions: positions inside the self-attention of every
            block: None, `"rotary"`, `"alibi"` or `"relative"`, usually with
            `input_positions=None`.
        num_key_value_heads: key/value heads of the attention (grouped-query
            attention); default `num_heads`.
        chunk_size: tile size of the blocks' memory-efficient attention
            path (see `MultiHeadAttention`); default None (chosen by length).
        class_names: optional names of the classes, saved with the model.
        tokenizer: optional keras-hub tokenizer saved with the model.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: int token ids `(B, T)`, right-padded with 0 (one text per
            row: packed rows, `segment_ids`, are refused with a ValueError;
            pack texts to pretrain a `TransformerTextEncoder`).
        training: whether dropout is active.

    Returns:
        Class probabilities `(B, num_classes)` in float32.

    Example:

    ```python
    model = keras_attention.models.TransformerClassifier(
        vocabulary_size=100, num_classes=2, max_length=16, hidden_dim=16,
        num_heads=2, intermediate_dim=32, pooling="cls",
    )
    token_ids = np.array([[5, 9, 7, 0, 0]])
    probabilities = model(token_ids)  # (1, 2)
    importance = model.token_importance(token_ids)  # (1, 5), 0 at padding
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Devlin et al., 2019 (the [CLS] token)](https://arxiv.org/abs/1810.04805)
    """

    config_names = (*ENCODER_CONFIG, "pooling")

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        max_length=256,
        hidden_dim=32,
        num_heads=2,
        num_layers=1,
        intermediate_dim=64,
        dropout=0.1,
        pooling="mean",
        input_positions="learned",
        attention_positions=None,
        num_key_value_heads=None,
        chunk_size=None,
        class_names=None,
        tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        check_classifier_args(
            vocabulary_size,
            num_classes,
            class_names,
            max_length=max_length,
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            num_layers=num_layers,
            intermediate_dim=intermediate_dim,
        )
        check_choice("pooling", pooling, ("mean", "cls"))
        input_positions, attention_positions = check_transformer_options(
            locals(), TransformerClassifier.__init__, type(self).__name__
        )

        # === Layers ===
        prepend_cls = PrependToken(CLS_TOKEN_ID, name="prepend_cls")
        embedding, embedding_dropout, blocks = _encoder_layers(
            locals(), positions=max_length + (pooling == "cls")
        )
        average = MaskedAverage(dtype=dtype, name="mean_pooling")
        pooled_dropout = Dropout(dropout, dtype=dtype)
        probabilities = class_probabilities(num_classes)

        def forward(token_ids, training=None, return_importance=True):
            if pooling == "cls":
                token_ids = prepend_cls(token_ids)
            mask = padding_mask(token_ids)
            x = embedding_dropout(embedding(token_ids), training=training)
            for i, block in enumerate(blocks):
                # Only the last block's weights explain; the training graph
                # asks for none (explicit weights cost time and memory).
                if return_importance and i == len(blocks) - 1:
                    x, weights = block(
                        x,
                        padding_mask=mask,
                        training=training,
                        return_attention_scores=True,
                    )
                else:
                    x = block(x, padding_mask=mask, training=training)
            pooled = x[:, 0] if pooling == "cls" else average(x, mask=mask)
            outputs = probabilities(pooled_dropout(pooled, training=training))
            if not return_importance:
                return outputs
            weights = ops.mean(weights, axis=1)  # (B, T, T) over heads
            if pooling == "cls":
                return outputs, weights[:, 0, 1:]
            queries = ops.cast(mask, weights.dtype)[..., None]
            importance = ops.sum(weights * queries, axis=1) / ops.maximum(
                ops.sum(queries, axis=1), ops.cast(1, weights.dtype)
            )
            return outputs, importance

        # === Functional model ===
        inputs = keras.Input((None,), dtype="int32", name="token_ids")
        outputs = forward(inputs, return_importance=False)
        super().__init__(
            inputs, outputs, forward=forward, **TextClassifier.arguments_from(locals())
        )
        self.keep_config(TransformerClassifier, locals())

    def call(self, inputs, training=None, mask=None, **kwargs):
        # A dict's other keys would be dropped silently by the functional
        # model: packed rows are refused rather than classified as one text.
        if isinstance(inputs, dict) and inputs.get("segment_ids") is not None:
            raise ValueError(
                "TransformerClassifier classifies one text per row; it takes no "
                "`segment_ids` (packed rows). Pass token ids (B, T), padded."
            )
        return super().call(inputs, training=training, mask=mask, **kwargs)

    @classmethod
    def from_pretrained_encoder(cls, encoder, num_classes, pooling="mean", **kwargs):
        """A classifier with the sizes of `encoder` (a `TransformerTextEncoder`,
        pretrained with masked language modelling, say), its embedding and
        encoder blocks initialised with the encoder's weights; the pooling
        and the output layer are new.

        With `pooling="cls"` the `[CLS]` token takes one of the encoder's
        positions, so texts may be one token shorter (`max_length` is the
        encoder's minus one).

        Args:
            encoder: a `TransformerTextEncoder`.
            num_classes: number of classes.
            pooling: `"mean"` or `"cls"`.
            **kwargs: other constructor arguments (`dropout`, `class_names`,
                `tokenizer`, `chunk_size`, ...); `dropout`, `tokenizer` and
                `chunk_size` default to the encoder's.

        Returns:
            A `TransformerClassifier`.
        """
        if not isinstance(encoder, TransformerTextEncoder):
            raise TypeError(
                "`encoder` must be a TransformerTextEncoder; received "
                f"{type(encoder).__name__}."
            )
        max_length = encoder.max_length - (pooling == "cls")
        if max_length < 1:
            raise ValueError(
                f"An encoder of max_length={encoder.max_length} leaves no room "
                "for a text after the [CLS] token."
            )
        kwargs.setdefault("dropout", encoder.dropout)
        kwargs.setdefault("tokenizer", encoder.tokenizer)
        kwargs.setdefault("chunk_size", encoder.chunk_size)
        model = cls(
            encoder.vocabulary_size,
            num_classes,
            max_length=max_length,
            pooling=pooling,
            **{name: getattr(encoder, name) for name in ENCODER_SIZES},
            **kwargs,
        )
        model.load_encoder_weights(encoder)
        return model

    def load_encoder_weights(self, encoder):
        """Copies the weights of `encoder` (a `TransformerTextEncoder` of the
        same sizes) into this model's embedding and encoder blocks.

        Raises:
            ValueError: if a size differs (named, with both values).
        """
        positions = self.max_length + (self.pooling == "cls")
        sizes = {
            name: (getattr(self, name), getattr(encoder, name))
            for name in ("vocabulary_size", *ENCODER_SIZES)
        }
        # None key/value heads are as many as the query heads.
        sizes["num_key_value_heads"] = (
            self.num_key_value_heads or self.num_heads,
            encoder.num_key_value_heads or encoder.num_heads,
        )
        sizes["positions (max_length, plus 1 with [CLS] pooling)"] = (
            positions,
            encoder.max_length,
        )
        for name, (ours, theirs) in sizes.items():
            if ours != theirs:
                raise ValueError(
                    f"The encoder's {name} is {theirs!r} but this classifier's is "
                    f"{ours!r}; build the classifier with "
                    "`TransformerClassifier.from_pretrained_encoder`."
                )
        for name in encoder_layer_names(self.num_layers):
            self.get_layer(name).set_weights(encoder.get_layer(name).get_weights())


def encoder_layer_names(num_layers):
    """The names of the layers a `TransformerTextEncoder` shares with a
    `TransformerClassifier`: the embedding and the encoder blocks."""
    return ["embedding", *(f"encoder_block_{i}" for i in range(num_layers))]


def _encoder_layers(arguments, positions):
    """The embedding, its dropout and the encoder blocks, named as
    `encoder_layer_names` lists them.

    Args:
        arguments: the model constructor's `locals()`: `vocabulary_size`,
            the sizes and options of `ENCODER_CONFIG` (checked) and `dtype`.
        positions: the rows of the embedding's learned positions.
    """
    options = {name: arguments[name] for name in TRANSFORMER_OPTIONS}
    input_positions = options.pop("input_positions")
    dtype = arguments["dtype"]
    names = encoder_layer_names(arguments["num_layers"])
    embedding = TokenAndPositionEmbedding(
        arguments["vocabulary_size"],
        positions,
        arguments["hidden_dim"],
        input_positions=input_positions,
        dtype=dtype,
        name=names[0],
    )
    blocks = [
        TransformerEncoderBlock(
            arguments["intermediate_dim"],
            arguments["num_heads"],
            **options,
            dtype=dtype,
            name=name,
        )
        for name in names[1:]
    ]
    return embedding, Dropout(options["dropout"], dtype=dtype), blocks


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerTextEncoder(
    BuildsTrainingStateFirst, PackedInputsMixin, ConfigMixin, keras.Model
):
    """The embedding and encoder blocks of a `TransformerClassifier`, without
    its pooling and output layer: token ids in, one vector per token out.

    Pretrain it (with masked language modelling, as BERT is pretrained), then
    start a classifier from its weights with
    `TransformerClassifier.from_pretrained_encoder`. Its layers have the
    classifier's names (`encoder_layer_names`) and shapes.

    Args:
        vocabulary_size: number of token ids (0 is padding).
        max_length: the longest input in tokens (the learned positions).
        hidden_dim: model width.
        num_heads: attention heads per block.
        num_layers: encoder blocks.
        intermediate_dim: feed-forward hidden size.
        dropout: dropout on embeddings, attention and sub-layers.
        input_positions: positions added to the token embeddings:
            `"learned"`, `"sinusoidal"` or None. `position_encoding`, its
            earlier name, is a deprecated alias.
        attention_positions: positions inside the self-attention of every
            block: None, `"rotary"`, `"alibi"` or `"relative"`.
        num_key_value_heads: key/value heads of the attention (grouped-query
            attention); default `num_heads`.
        chunk_size: tile size of the blocks' memory-efficient attention
            path; default None (chosen by length).
        tokenizer: optional keras-hub tokenizer saved with the model.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: int token ids `(B, T)`, right-padded with 0. Or packed
            sequences, several texts in one row: a dict `{"token_ids": (B,
            T), "segment_ids": (B, T)}` whose int `segment_ids` name the text
            of each token (JAX's `SegmentIds`); each token then attends only
            to the tokens of its own text and its positions restart at 0
            there (`keras_attention.ops.segment_positions`), so every text is
            encoded as if it were alone. Id 0 tokens stay padding, hidden
            from every text. `GPT`'s convention; a dict of `token_ids` alone
            is the unpacked model.
        training: whether dropout is active.

    Returns:
        The encoded tokens `(B, T, hidden_dim)`, with a padding mask.

    Example:

    ```python
    encoder = keras_attention.models.TransformerTextEncoder(
        vocabulary_size=100, max_length=16, hidden_dim=16, num_heads=2,
        intermediate_dim=32,
    )
    states = encoder(np.array([[5, 9, 7, 0, 0]]))  # (1, 5, 16)
    # ... pretrain it, then:
    classifier = keras_attention.models.TransformerClassifier.from_pretrained_encoder(
        encoder, num_classes=2
    )
    ```

    References:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)
    """

    config_names = ("vocabulary_size", *ENCODER_CONFIG, "tokenizer")
    serialized_config_names = ("tokenizer",)

    def __init__(
        self,
        vocabulary_size,
        max_length=256,
        hidden_dim=32,
        num_heads=2,
        num_layers=1,
        intermediate_dim=64,
        dropout=0.1,
        input_positions="learned",
        attention_positions=None,
        num_key_value_heads=None,
        chunk_size=None,
        tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        for name, value in (
            ("vocabulary_size", vocabulary_size),
            ("max_length", max_length),
            ("hidden_dim", hidden_dim),
            ("num_heads", num_heads),
            ("num_layers", num_layers),
            ("intermediate_dim", intermediate_dim),
        ):
            check_positive_int(name, value)
        input_positions, attention_positions = check_transformer_options(
            locals(), TransformerTextEncoder.__init__, type(self).__name__
        )

        # === Layers ===
        embedding, embedding_dropout, blocks = _encoder_layers(
            locals(), positions=max_length
        )

        def forward(token_ids, segment_ids=None, training=None):
            mask = padding_mask(token_ids)
            x = embedding(token_ids, segment_ids=segment_ids)
            x = embedding_dropout(x, training=training)
            for block in blocks:
                x = block(
                    x, padding_mask=mask, segment_ids=segment_ids, training=training
                )
            return x

        # === Functional model ===
        inputs = keras.Input((None,), dtype="int32", name="token_ids")
        x = forward(inputs)
        super().__init__(inputs=inputs, outputs=x, dtype=dtype, **kwargs)
        self.keep_config(TransformerTextEncoder, locals())
        # Packed rows (`PackedInputsMixin`) run the same layers with the ids.
        self._packed_forward = forward

    @property
    def token_embedding(self):
        """The `keras.layers.Embedding` of the tokens (for an output layer
        tied to it)."""
        return self.get_layer("embedding").token_embedding
