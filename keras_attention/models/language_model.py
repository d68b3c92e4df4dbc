"""The shared behaviour of the decoder-only language models."""

import keras

from keras_attention._checks import check_positive_int, static_shape
from keras_attention.decoding import LanguageModelGenerationMixin
from keras_attention.layers.tied_embedding import TiedEmbedding, tied_embedding_class
from keras_attention.models.saving import ConfigMixin
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst


class LanguageModel(
    BuildsTrainingStateFirst, ConfigMixin, LanguageModelGenerationMixin, keras.Model
):
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


# The keys of a packed batch: the token ids and the document of each token.
PACKED_INPUT_KEYS = ("token_ids", "segment_ids")


def split_packed_inputs(inputs):
    """`(token_ids, segment_ids)` of a model's inputs: a tensor of token ids
    (`segment_ids` None), or a dict `{"token_ids": (B, T), "segment_ids":
    (B, T)}`, `segment_ids` optional (keras-hub's dict of `token_ids`, with JAX's
    `SegmentIds` in place of its `padding_mask`).

    Raises:
        ValueError: a dict without `token_ids` or with keys beyond the two,
            or `segment_ids` not integer ids of the shape of `token_ids`.
    """
    if not isinstance(inputs, dict):
        return inputs, None
    unknown = sorted(set(inputs) - set(PACKED_INPUT_KEYS))
    if "token_ids" not in inputs or unknown:
        raise ValueError(
            "A dict of inputs must hold `token_ids` (B, T) and optionally "
            f"`segment_ids` (B, T); received the keys {sorted(inputs)}."
        )
    token_ids, segment_ids = inputs["token_ids"], inputs.get("segment_ids")
    if segment_ids is not None:
        dtype = keras.backend.standardize_dtype(segment_ids.dtype)
        ids_shape, tokens_shape = static_shape(segment_ids), static_shape(token_ids)
        same = len(ids_shape) == len(tokens_shape) and all(
            a is None or b is None or a == b
            for a, b in zip(ids_shape, tokens_shape, strict=True)
        )
        if "int" not in dtype or len(ids_shape) != 2 or not same:
            raise ValueError(
                "`segment_ids` must be integer ids of the shape of `token_ids`, "
                f"{tokens_shape}: the document of each token; received dtype "
                f"{dtype} and shape {ids_shape}."
            )
    return token_ids, segment_ids


class PackedInputsMixin:
    """Packed sequences for a functional model built on `token_ids`.

    `call` takes the token ids `(B, T)` as before, or a dict
    `{"token_ids": (B, T), "segment_ids": (B, T)}` (`PACKED_INPUT_KEYS`):
    several documents in one row, each token's id naming its document (JAX's
    `SegmentIds`). With ids, the model runs `self._packed_forward(token_ids,
    segment_ids, training)` (the same layers as its graph, with the ids
    passed to the positions and the attention), so that each document gets
    the outputs it would get alone; without them, the functional graph. The
    saved model and its config are those of the unpacked model.
    """

    def call(self, inputs, training=None, mask=None, **kwargs):
        token_ids, segment_ids = split_packed_inputs(inputs)
        if segment_ids is None:
            return super().call(token_ids, training=training, mask=mask, **kwargs)
        return self._packed_forward(token_ids, segment_ids, training)

    def compute_output_spec(self, inputs, training=None, mask=None):
        token_ids, _ = split_packed_inputs(inputs)
        return super().compute_output_spec(token_ids, training=training, mask=mask)


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
