import keras
from keras import ops

from keras_attention._checks import check_positive_int, check_rate
from keras_attention.layers.attention_pooling import AttentionPooling
from keras_attention.layers.dropout import Dropout
from keras_attention.models.text_classifier import (
    FoldSentences,
    TextClassifier,
    UnfoldSentences,
    check_classifier_args,
    class_probabilities,
)
from keras_attention.ops import padding_mask


@keras.saving.register_keras_serializable(package="keras_attention")
class HierarchicalAttentionNetwork(TextClassifier):
    """The Hierarchical Attention Network of Yang et al. (2016).

    A document is a grid of token ids `(S sentences, W words)`. Each sentence
    is read by a word encoder (bidirectional GRU over the word embeddings) and
    pooled by word attention with a learned context vector (`AttentionPooling`)
    into a sentence vector; the sentence vectors are read by a sentence
    encoder (another bidirectional GRU) and pooled by sentence attention into
    the document vector, which a softmax classifies. Padding words and padding
    sentences (rows of zeros) are masked at both levels and get weight 0.

    `attention_weights` returns both levels of weights, the paper's
    explanation: which sentences matter, and which words within them.
    `token_importance` is their product, `a_sentence * a_word`, the share of
    the document vector that each word carries.

    Args:
        vocabulary_size: number of token ids (0 is padding).
        num_classes: number of classes.
        max_sentences: the most sentences of a document (inputs are encoded
            to this many).
        max_words: tokens per sentence (W).
        embedding_dim: size of the word embeddings.
        word_units: size of each direction of the word GRU.
        sentence_units: size of each direction of the sentence GRU.
        attention_units: size of the context vectors; defaults to the size of
            the annotations they score.
        dropout: dropout on the embeddings and on the document vector.
        class_names: optional names of the classes, saved with the model.
        tokenizer: optional keras-hub tokenizer saved with the model.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: int token ids `(B, S, W)`, 0-padded on both levels (see
            `keras_attention.data.encode_documents`); `S` may be smaller than
            `max_sentences` (a batch of short documents).
        training: whether dropout is active.

    Returns:
        Class probabilities `(B, num_classes)` in float32.

    Example:

    ```python
    model = keras_attention.models.HierarchicalAttentionNetwork(
        vocabulary_size=100, num_classes=2, max_sentences=3, max_words=4,
        embedding_dim=8, word_units=8, sentence_units=8,
    )
    documents = np.array([[[5, 6, 0, 0], [7, 8, 9, 0], [0, 0, 0, 0]]])
    probabilities = model(documents)  # (1, 2)
    word_weights, sentence_weights = model.attention_weights(documents)
    # (1, 3, 4) and (1, 3); the padding sentence and words get 0.
    ```

    References:
        - [Yang et al., 2016](https://aclanthology.org/N16-1174/)
    """

    config_names = (
        "max_sentences",
        "max_words",
        "embedding_dim",
        "word_units",
        "sentence_units",
        "attention_units",
        "dropout",
    )

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        max_sentences=16,
        max_words=32,
        embedding_dim=64,
        word_units=32,
        sentence_units=32,
        attention_units=None,
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
            max_sentences=max_sentences,
            max_words=max_words,
            embedding_dim=embedding_dim,
            word_units=word_units,
            sentence_units=sentence_units,
        )
        check_positive_int("attention_units", attention_units, allow_none=True)
        check_rate("dropout", dropout)

        # === Layers ===
        fold = FoldSentences(name="fold_sentences")
        unfold = UnfoldSentences(name="unfold_sentences")
        unfold_weights = UnfoldSentences(name="unfold_word_weights")
        embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, dtype=dtype, name="word_embedding"
        )
        embedding_dropout = Dropout(dropout, dtype=dtype)

        # The GRUs that `Bidirectional` copies (through their configs) stay
        # alive until both levels are made. While a model loads, Keras tells
        # the objects it serializes apart by `id()`: a first GRU collected
        # before the second was made could lend it its id, and the second
        # level then got a layer of the first ("Forward layer and backward
        # layer should have different `go_backwards` value", once in CI).
        copied_grus = []

        def encoder_and_attention(units, level):
            """One level of the hierarchy: a bidirectional GRU over the
            level's vectors, pooled by attention with a context vector."""
            copied_grus.append(
                keras.layers.GRU(units, return_sequences=True, dtype=dtype)
            )
            encoder = keras.layers.Bidirectional(
                copied_grus[-1], dtype=dtype, name=f"{level}_encoder"
            )
            attention = AttentionPooling(
                attention_units, dtype=dtype, name=f"{level}_attention"
            )
            return encoder, attention

        word_encoder, word_attention = encoder_and_attention(word_units, "word")
        sentence_encoder, sentence_attention = encoder_and_attention(
            sentence_units, "sentence"
        )
        document_dropout = Dropout(dropout, dtype=dtype)
        probabilities = class_probabilities(num_classes)

        def attend(token_ids, training=None):
            words = fold(token_ids)  # (B * S, W)
            word_mask = padding_mask(words)
            x = embedding_dropout(embedding(words), training=training)
            x = word_encoder(x, mask=word_mask, training=training)
            sentences, word_weights = word_attention(
                x, mask=word_mask, return_attention_scores=True
            )
            sentences = unfold([sentences, token_ids])  # (B, S, 2 * word_units)
            word_weights = unfold_weights([word_weights, token_ids])  # (B, S, W)
            sentence_mask = ops.any(padding_mask(token_ids), axis=-1)
            y = sentence_encoder(sentences, mask=sentence_mask, training=training)
            document, sentence_weights = sentence_attention(
                y, mask=sentence_mask, return_attention_scores=True
            )
            document = document_dropout(document, training=training)
            return probabilities(document), word_weights, sentence_weights

        def forward(token_ids, training=None):
            outputs, word_weights, sentence_weights = attend(token_ids, training)
            return outputs, word_weights * sentence_weights[..., None]

        # === Functional model ===
        # Any number of sentences: batches of short documents can be cut.
        inputs = keras.Input((None, max_words), dtype="int32", name="token_ids")
        outputs, _ = forward(inputs)
        super().__init__(
            inputs, outputs, forward=forward, **TextClassifier.arguments_from(locals())
        )
        self.keep_config(HierarchicalAttentionNetwork, locals())
        self._attend = attend

    def attention_weights(self, token_ids):
        """Word weights `(B, S, W)` (each real sentence's sum to 1) and
        sentence weights `(B, S)` (sum to 1), as float32 numpy arrays."""
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        if len(token_ids.shape) != 3:
            raise ValueError(
                "`token_ids` must have shape (batch, max_sentences, max_words); "
                f"received {tuple(token_ids.shape)}."
            )
        _, word_weights, sentence_weights = self._attend(token_ids, training=False)
        return tuple(
            ops.convert_to_numpy(ops.cast(w, "float32"))
            for w in (word_weights, sentence_weights)
        )
