"""Text classifiers without attention, the baselines of the attention models."""

import keras

from keras_attention._checks import check_rate
from keras_attention.layers.dropout import Dropout
from keras_attention.models.text_classifier import (
    MaskedAverage,
    TextClassifier,
    check_classifier_args,
    class_probabilities,
)
from keras_attention.ops import padding_mask


@keras.saving.register_keras_serializable(package="keras_attention")
class BiLSTMClassifier(TextClassifier):
    """A bidirectional LSTM over the word embeddings; its two final states,
    concatenated, are classified. The recurrent baseline without attention:
    the whole text must pass through the final states.

    Args:
        vocabulary_size: number of token ids (0 is padding).
        num_classes: number of classes.
        embedding_dim: size of the token embeddings.
        units: size of each LSTM direction.
        dropout: dropout on the embeddings and on the final states.
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
    model = keras_attention.models.BiLSTMClassifier(
        vocabulary_size=100, num_classes=3, embedding_dim=8, units=8
    )
    probabilities = model(np.array([[5, 9, 7, 0]]))  # (1, 3)
    ```

    References:
        - [Graves & Schmidhuber, 2005](https://doi.org/10.1016/j.neunet.2005.06.042)
    """

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        embedding_dim=64,
        units=32,
        dropout=0.2,
        class_names=None,
        tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        check_classifier_args(
            vocabulary_size,
            num_classes,
            class_names,
            embedding_dim=embedding_dim,
            units=units,
        )
        check_rate("dropout", dropout)
        embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, dtype=dtype, name="embedding"
        )
        encoder = keras.layers.Bidirectional(
            keras.layers.LSTM(units, dtype=dtype), dtype=dtype, name="encoder"
        )

        inputs = keras.Input((None,), dtype="int32", name="token_ids")
        x = Dropout(dropout, dtype=dtype)(embedding(inputs))
        x = encoder(x, mask=padding_mask(inputs))
        x = Dropout(dropout, dtype=dtype)(x)
        super().__init__(
            inputs=inputs,
            outputs=class_probabilities(num_classes)(x),
            vocabulary_size=vocabulary_size,
            num_classes=num_classes,
            class_names=class_names,
            tokenizer=tokenizer,
            dtype=dtype,
            **kwargs,
        )
        self.embedding_dim = embedding_dim
        self.units = units
        self.dropout = dropout

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embedding_dim": self.embedding_dim,
                "units": self.units,
                "dropout": self.dropout,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attention")
class BagOfEmbeddingsClassifier(TextClassifier):
    """The mean of the token embeddings, classified by a softmax layer: word
    order is ignored (fastText without n-grams). The simplest baseline.

    Args:
        vocabulary_size: number of token ids (0 is padding).
        num_classes: number of classes.
        embedding_dim: size of the token embeddings.
        dropout: dropout on the averaged embedding.
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
    model = keras_attention.models.BagOfEmbeddingsClassifier(
        vocabulary_size=100, num_classes=2, embedding_dim=8
    )
    probabilities = model(np.array([[5, 9, 7, 0]]))  # (1, 2)
    ```

    References:
        - [Joulin et al., 2017](https://aclanthology.org/E17-2068/)
    """

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        embedding_dim=64,
        dropout=0.2,
        class_names=None,
        tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        check_classifier_args(
            vocabulary_size, num_classes, class_names, embedding_dim=embedding_dim
        )
        check_rate("dropout", dropout)
        embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, dtype=dtype, name="embedding"
        )

        inputs = keras.Input((None,), dtype="int32", name="token_ids")
        x = MaskedAverage(dtype=dtype, name="mean_pooling")(
            embedding(inputs), mask=padding_mask(inputs)
        )
        x = Dropout(dropout, dtype=dtype)(x)
        super().__init__(
            inputs=inputs,
            outputs=class_probabilities(num_classes)(x),
            vocabulary_size=vocabulary_size,
            num_classes=num_classes,
            class_names=class_names,
            tokenizer=tokenizer,
            dtype=dtype,
            **kwargs,
        )
        self.embedding_dim = embedding_dim
        self.dropout = dropout

    def get_config(self):
        config = super().get_config()
        config.update({"embedding_dim": self.embedding_dim, "dropout": self.dropout})
        return config
