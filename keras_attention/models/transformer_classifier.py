import keras
from keras import ops

from keras_attention._checks import check_choice, check_rate
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_attention.layers.transformer_encoder import TransformerEncoderBlock
from keras_attention.models.text_classifier import (
    MaskedAverage,
    PrependToken,
    TextClassifier,
    check_classifier_args,
    class_probabilities,
)
from keras_attention.ops import padding_mask

# The id of the [CLS] token prepended with `pooling="cls"`: `[START]` in the
# vocabularies of `keras_attention.data.train_word_piece`, a token that never
# occurs inside a text.
CLS_TOKEN_ID = 2


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
        position_encoding: `"learned"` or `"sinusoidal"`.
        class_names: optional names of the classes, saved with the model.
        tokenizer: optional keras-hub tokenizer saved with the model.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: int token ids `(B, T)`, right-padded with 0.
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
        position_encoding="learned",
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
        check_rate("dropout", dropout)
        check_choice("pooling", pooling, ("mean", "cls"))
        check_choice("position_encoding", position_encoding, ("learned", "sinusoidal"))
        if hidden_dim % num_heads:
            raise ValueError(
                f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` "
                f"({num_heads})."
            )

        # === Layers ===
        prepend_cls = PrependToken(CLS_TOKEN_ID, name="prepend_cls")
        embedding = TokenAndPositionEmbedding(
            vocabulary_size,
            max_length + (pooling == "cls"),
            hidden_dim,
            position_encoding=position_encoding,
            dtype=dtype,
            name="embedding",
        )
        embedding_dropout = Dropout(dropout, dtype=dtype)
        blocks = [
            TransformerEncoderBlock(
                intermediate_dim,
                num_heads,
                dropout=dropout,
                dtype=dtype,
                name=f"encoder_block_{i}",
            )
            for i in range(num_layers)
        ]
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
            inputs=inputs,
            outputs=outputs,
            vocabulary_size=vocabulary_size,
            num_classes=num_classes,
            forward=forward,
            class_names=class_names,
            tokenizer=tokenizer,
            dtype=dtype,
            **kwargs,
        )

        # === Config ===
        self.max_length = max_length
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.pooling = pooling
        self.position_encoding = position_encoding

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "num_layers": self.num_layers,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "pooling": self.pooling,
                "position_encoding": self.position_encoding,
            }
        )
        return config
