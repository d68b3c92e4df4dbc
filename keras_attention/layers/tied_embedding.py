"""A token embedding whose transpose also gives the output logits."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attention")
class TiedEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that also maps vectors back to token logits
    through the transpose of its table (tied input and output embeddings).

    What `keras.layers.ReversibleEmbedding(tie_weights=True)` does from Keras
    3.12 on; `tied_embedding` takes Keras' layer where it exists and this one
    on Keras 3.11, so that the language models run on every Keras release the
    package supports.

    Args:
        input_dim: the vocabulary size.
        output_dim: the embedding size.
        **kwargs: those of `keras.layers.Embedding` but `mask_zero` (the
            logits of `reverse=True` carry no mask).

    Call arguments:
        inputs: token ids `(..., L)`, or with `reverse=True` vectors
            `(..., output_dim)`.
        reverse: map vectors to logits `(..., input_dim)` by `x E^T`.

    Example:

    ```python
    embedding = TiedEmbedding(100, 16)
    vectors = embedding(keras.ops.ones((2, 5), "int32"))  # (2, 5, 16)
    logits = embedding(vectors, reverse=True)  # (2, 5, 100)
    ```

    References:
        - [Press & Wolf, 2017. Using the Output Embedding to Improve Language
          Models](https://arxiv.org/abs/1608.05859)
    """

    def __init__(self, input_dim, output_dim, **kwargs):
        if kwargs.get("mask_zero"):
            raise ValueError(
                "TiedEmbedding does not take `mask_zero=True`; received "
                f"mask_zero={kwargs['mask_zero']!r}."
            )
        super().__init__(input_dim, output_dim, **kwargs)

    def call(self, inputs, reverse=False):
        if not reverse:
            return super().call(inputs)
        table = ops.cast(self.embeddings, inputs.dtype)
        return ops.matmul(inputs, ops.transpose(table))

    def compute_output_shape(self, input_shape, reverse=False):
        if reverse:
            return (*input_shape[:-1], self.input_dim)
        return super().compute_output_shape(input_shape)

    def compute_output_spec(self, inputs, reverse=False):
        shape = self.compute_output_shape(inputs.shape, reverse)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)


def tied_embedding_class():
    """Keras' `ReversibleEmbedding` where this Keras has it (3.12 on), else
    `TiedEmbedding`."""
    return getattr(keras.layers, "ReversibleEmbedding", TiedEmbedding)
