"""The shared behaviour of the text classifiers, and the small shape layers
their functional graphs need."""

import keras
import numpy as np
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.models.saving import ConfigMixin
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst


class TextClassifier(BuildsTrainingStateFirst, ConfigMixin, keras.Model):
    """Base of the text classifiers: token ids in, class probabilities out.

    Subclasses build a functional graph from int token ids (0 is padding) to
    float32 probabilities `(B, num_classes)` with a `forward(token_ids)`
    function that also returns the attention the prediction rests on, and pass
    that function to this base. The base holds what every classifier shares:
    the vocabulary size, the classes, the optional keras-hub `tokenizer` (saved
    inside the `.keras` file, so a loaded model can classify text) and
    `token_importance`, the attention weight of every input token.

    Models without attention (the baselines) pass `forward=None`;
    `has_attention` is then False.
    """

    config_names = ("vocabulary_size", "num_classes", "class_names", "tokenizer")
    serialized_config_names = ("tokenizer",)

    def __init__(
        self,
        inputs,
        outputs,
        vocabulary_size,
        num_classes,
        forward=None,
        class_names=None,
        tokenizer=None,
        **kwargs,
    ):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        class_names = None if class_names is None else list(class_names)
        self.keep_config(TextClassifier, locals())
        self._forward = forward

    @property
    def has_attention(self):
        return self._forward is not None

    def token_importance(self, token_ids, batch_size=128):
        """The attention each input token receives in the prediction.

        Args:
            token_ids: int array shaped like the model's input.
            batch_size: documents per forward pass.

        Returns:
            A float32 numpy array shaped like `token_ids`, 0 at padding.
        """
        if not self.has_attention:
            raise ValueError(
                f"{type(self).__name__} has no attention, so no token importance; "
                "use TransformerClassifier or HierarchicalAttentionNetwork."
            )
        token_ids = np.asarray(token_ids, "int32")
        chunks = []
        for start in range(0, len(token_ids), batch_size):
            batch = ops.convert_to_tensor(token_ids[start : start + batch_size])
            _, importance = self._forward(batch, training=False)
            chunks.append(ops.convert_to_numpy(ops.cast(importance, "float32")))
        if not chunks:
            return np.zeros(token_ids.shape, "float32")
        return np.concatenate(chunks)


def check_classifier_args(vocabulary_size, num_classes, class_names, **sizes):
    check_positive_int("vocabulary_size", vocabulary_size)
    check_positive_int("num_classes", num_classes)
    if num_classes < 2:
        raise ValueError(
            f"`num_classes` must be at least 2; received num_classes={num_classes}."
        )
    for name, value in sizes.items():
        check_positive_int(name, value)
    if class_names is not None and len(class_names) != num_classes:
        raise ValueError(
            f"`class_names` must have one name per class ({num_classes}); "
            f"received {len(class_names)}: {list(class_names)!r}."
        )


def class_probabilities(num_classes, name="probabilities"):
    """The output layer: softmax in float32 under mixed precision too."""
    return keras.layers.Dense(
        num_classes, activation="softmax", dtype="float32", name=name
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedAverage(keras.layers.Layer):
    """Mean over the real positions of `(B, T, D)`: `(B, D)`; a sequence of
    padding only averages to zeros (not NaN, as a plain masked mean would)."""

    def call(self, inputs, mask=None):
        if mask is None:
            return ops.mean(inputs, axis=1)
        weights = ops.cast(mask, inputs.dtype)[..., None]
        total = ops.sum(inputs * weights, axis=1)
        count = ops.maximum(ops.sum(weights, axis=1), ops.cast(1, inputs.dtype))
        return total / count

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])


@keras.saving.register_keras_serializable(package="keras_attention")
class PrependToken(keras.layers.Layer):
    """Puts `token_id` in front of every row of `(B, T)` token ids (the [CLS]
    token of a classifier)."""

    def __init__(self, token_id, **kwargs):
        super().__init__(**kwargs)
        self.token_id = token_id

    def call(self, token_ids):
        column = ops.full((ops.shape(token_ids)[0], 1), self.token_id, "int32")
        return ops.concatenate([column, ops.cast(token_ids, "int32")], axis=1)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], length)

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(
            self.compute_output_shape(token_ids.shape), dtype="int32"
        )

    def get_config(self):
        return {**super().get_config(), "token_id": self.token_id}


@keras.saving.register_keras_serializable(package="keras_attention")
class FoldSentences(keras.layers.Layer):
    """`(B, S, W, ...)` -> `(B * S, W, ...)`: every sentence of every document
    becomes one sequence, so one word encoder runs over all of them."""

    def call(self, inputs):
        return ops.reshape(inputs, (-1, *inputs.shape[2:]))

    def compute_output_shape(self, input_shape):
        batch, sentences = input_shape[0], input_shape[1]
        folded = None if batch is None or sentences is None else batch * sentences
        return (folded, *input_shape[2:])

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=inputs.dtype
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class UnfoldSentences(keras.layers.Layer):
    """`[(B * S, ...), documents (B, S, W)]` -> `(B, S, ...)`, undoing
    `FoldSentences` for documents of any number of sentences."""

    def call(self, inputs):
        folded, documents = inputs
        batch_size, num_sentences = ops.shape(documents)[0], ops.shape(documents)[1]
        return ops.reshape(folded, (batch_size, num_sentences, *folded.shape[1:]))

    def compute_output_shape(self, input_shape):
        folded, documents = input_shape
        return (documents[0], documents[1], *folded[1:])

    def compute_output_spec(self, inputs):
        folded, documents = inputs
        return keras.KerasTensor(
            self.compute_output_shape((folded.shape, documents.shape)),
            dtype=folded.dtype,
        )
