"""Text classifiers and a language model without attention, the baselines
of the attention models."""

import keras
from keras import ops

from keras_attention._checks import check_rate
from keras_attention.layers.dropout import Dropout
from keras_attention.models.language_model import (
    LanguageModel,
    check_language_model_args,
    tied_embedding,
)
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

    config_names = ("embedding_dim", "units", "dropout")

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
        encoder = keras.layers.Bidirectional(
            keras.layers.LSTM(units, dtype=dtype), dtype=dtype, name="encoder"
        )

        def encode(embedded, mask):
            return encoder(Dropout(dropout, dtype=dtype)(embedded), mask=mask)

        inputs, outputs = _classifier_graph(
            vocabulary_size, num_classes, embedding_dim, dropout, dtype, encode
        )
        super().__init__(inputs, outputs, **TextClassifier.arguments_from(locals()))
        self.keep_config(BiLSTMClassifier, locals())


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

    config_names = ("embedding_dim", "dropout")

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
        average = MaskedAverage(dtype=dtype, name="mean_pooling")

        def encode(embedded, mask):
            return average(embedded, mask=mask)

        inputs, outputs = _classifier_graph(
            vocabulary_size, num_classes, embedding_dim, dropout, dtype, encode
        )
        super().__init__(inputs, outputs, **TextClassifier.arguments_from(locals()))
        self.keep_config(BagOfEmbeddingsClassifier, locals())


def _classifier_graph(
    vocabulary_size, num_classes, embedding_dim, dropout, dtype, encode
):
    """The functional graph of a baseline classifier: token ids `(B, T)`,
    their embeddings, `encode(embedded, mask)` (one vector per text), dropout
    and the class probabilities.

    Returns:
        The inputs and the outputs.
    """
    embedding = keras.layers.Embedding(
        vocabulary_size, embedding_dim, dtype=dtype, name="embedding"
    )
    inputs = keras.Input((None,), dtype="int32", name="token_ids")
    x = encode(embedding(inputs), padding_mask(inputs))
    x = Dropout(dropout, dtype=dtype)(x)
    return inputs, class_probabilities(num_classes)(x)


@keras.saving.register_keras_serializable(package="keras_attention")
class LSTMLanguageModel(LanguageModel):
    """A stacked LSTM language model: the recurrent baseline of `GPT`.

    Token embeddings, `num_layers` LSTMs of `hidden_dim` units, and logits
    from the transpose of the token embedding (tied as in GPT, so that a
    parameter count matched to a GPT buys recurrent weights). Each position
    reads the tokens before it through the recurrent state alone; `generate`
    carries that state from step to step (the LSTM's cache).

    Args:
        vocabulary_size: number of token ids (0 is padding).
        hidden_dim: the size of the embeddings and of every LSTM.
        num_layers: stacked LSTMs.
        dropout: dropout on the embeddings and between the layers.
        max_length: `generate`'s default and longest output (inputs of any
            length are read).
        end_token_id: optional token at which `generate` stops.
        tokenizer: optional keras-hub tokenizer saved with the model.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: int token ids `(B, T)`, right-padded with 0.
        training: whether dropout is active.

    Returns:
        Logits `(B, T, vocabulary_size)` of the next tokens.

    Example:

    ```python
    model = keras_attention.models.LSTMLanguageModel(
        vocabulary_size=50, hidden_dim=32, num_layers=2, max_length=32
    )
    logits = model(np.array([[5, 6, 7]]))  # (1, 3, 50)
    tokens = model.generate(np.array([[5, 6, 7]]), max_length=10)  # (1, 10)
    ```

    References:
        - [Hochreiter & Schmidhuber, 1997](https://doi.org/10.1162/neco.1997.9.8.1735)
        - [Press & Wolf, 2017](https://arxiv.org/abs/1608.05859) (tied embeddings)
    """

    config_names = ("hidden_dim", "num_layers", "dropout")

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        num_layers=2,
        dropout=0.0,
        max_length=256,
        end_token_id=None,
        tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        check_language_model_args(
            vocabulary_size,
            max_length,
            end_token_id,
            hidden_dim=hidden_dim,
            num_layers=num_layers,
        )
        check_rate("dropout", dropout)
        token_embedding = tied_embedding(vocabulary_size, hidden_dim, dtype)
        recurrent_layers = [
            keras.layers.LSTM(
                hidden_dim,
                return_sequences=True,
                return_state=True,
                dtype=dtype,
                name=f"lstm_{i}",
            )
            for i in range(num_layers)
        ]
        dropouts = [
            Dropout(dropout, dtype=dtype, name=f"dropout_{i}")
            for i in range(num_layers + 1)
        ]

        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        x = dropouts[0](token_embedding(token_ids))
        for layer, drop in zip(recurrent_layers, dropouts[1:], strict=True):
            x = drop(layer(x)[0])
        logits = token_embedding(x, reverse=True)
        super().__init__(token_ids, logits, **LanguageModel.arguments_from(locals()))
        self.keep_config(LSTMLanguageModel, locals())
        self.token_embedding = token_embedding
        self.recurrent_layers = recurrent_layers

    def initial_cache(self, batch_size, max_length):
        """Zero states `(B, 2, hidden_dim)` (h and c) of every LSTM."""
        return [
            ops.zeros((batch_size, 2, self.hidden_dim), self.compute_dtype)
            for _ in self.recurrent_layers
        ]

    def decode_step(self, token_ids, cache, index):
        x = self.token_embedding(ops.expand_dims(token_ids, 1))
        states = []
        for layer, state in zip(self.recurrent_layers, cache, strict=True):
            x, h, c = layer(x, initial_state=[state[:, 0], state[:, 1]])
            states.append(ops.stack([h, c], axis=1))
        return self.token_embedding(x[:, 0], reverse=True), states
