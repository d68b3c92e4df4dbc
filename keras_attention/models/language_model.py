"""The shared behaviour of the decoder-only language models."""

import keras

from keras_attention._checks import check_positive_int
from keras_attention.decoding import LanguageModelGenerationMixin
from keras_attention.layers.tied_embedding import TiedEmbedding, tied_embedding_class
from keras_attention.models.saving import ConfigMixin


class LanguageModel(ConfigMixin, LanguageModelGenerationMixin, keras.Model):
    """Base of `GPT` and `LSTMLanguageModel`: next-token logits through
    `call`, and prompts continued by a keras-hub sampler through `generate`
    (`LanguageModelGenerationMixin`).

    Subclasses build a functional graph from int token ids `(B, T)` to
    next-token logits `(B, T, V)` (right padding with 0 never reaches a real
    token: each position reads only those before it), and implement
    `initial_cache(batch_size, max_length)` and
    `decode_step(token_ids, cache, index)`.

    The base holds what every language model shares: the vocabulary size,
    `max_length` (the longest output of `generate`, and GPT's positions),
    the optional `end_token_id` at which generation stops, and the optional
    keras-hub `tokenizer`, saved inside the `.keras` file, so that a loaded
    model can continue text.
    """

    config_names = ("vocabulary_size", "max_length", "end_token_id", "tokenizer")
    serialized_config_names = ("tokenizer",)

    def __init__(
        self,
        inputs,
        outputs,
        vocabulary_size,
        max_length,
        end_token_id=None,
        tokenizer=None,
        **kwargs,
    ):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.keep_config(LanguageModel, locals())


def check_language_model_args(vocabulary_size, max_length, end_token_id, **sizes):
    """Checks the arguments every language model has, and its own positive
    sizes (`sizes`, by name)."""
    for name, value in {
        "vocabulary_size": vocabulary_size,
        "max_length": max_length,
        **sizes,
    }.items():
        check_positive_int(name, value)
    if end_token_id is not None and (
        isinstance(end_token_id, bool)
        or not isinstance(end_token_id, int)
        or not 0 < end_token_id < vocabulary_size
    ):
        raise ValueError(
            "`end_token_id` must be None or a token id from 1 to vocabulary_size - 1 "
            f"({vocabulary_size - 1}); received end_token_id={end_token_id!r}."
        )


def tied_embedding(vocabulary_size, hidden_dim, dtype, initializer="uniform"):
    """The token embedding whose transpose also gives the output logits
    (`keras.layers.ReversibleEmbedding`, or `TiedEmbedding` on a Keras without
    it, called with `reverse=True`): one `(vocabulary_size, hidden_dim)`
    matrix in and out (Press & Wolf, 2017)."""
    layer_class = tied_embedding_class()
    tied = {"tie_weights": True} if layer_class is not TiedEmbedding else {}
    return layer_class(
        vocabulary_size,
        hidden_dim,
        embeddings_initializer=initializer,
        dtype=dtype,
        name="token_embedding",
        **tied,
    )
