"""The shared behaviour of the encoder-decoder translation models."""

import keras
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.decoding import GenerationMixin
from keras_attention.models.saving import ConfigMixin
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst


class Seq2Seq(BuildsTrainingStateFirst, ConfigMixin, GenerationMixin, keras.Model):
    """Base of `RNNSeq2Seq` and `Transformer`: teacher-forced training through
    `call`, and compiled greedy or beam-search generation through `generate`
    (`GenerationMixin`, which reads `max_target_length` as the default
    length).

    Subclasses build a functional graph from
    `{"encoder_token_ids": (B, S), "decoder_token_ids": (B, T)}` (token 0 is
    padding) to next-token logits `(B, T, V)`, and implement
    `initial_cache(encoder_token_ids, max_length)`,
    `decode_step(token_ids, cache, index)` and
    `attention_weights(encoder_token_ids, decoder_token_ids)`.

    The base holds what every translation model shares: the vocabulary sizes,
    the longest source and target, the special token ids and the optional
    `source_tokenizer` and `target_tokenizer` (keras-hub tokenizers), which
    travel with the model: their vocabularies are saved inside the `.keras`
    file, so a loaded model can translate text.
    """

    config_names = (
        "source_vocabulary_size",
        "target_vocabulary_size",
        "max_source_length",
        "max_target_length",
        "start_token_id",
        "end_token_id",
        "source_tokenizer",
        "target_tokenizer",
    )
    serialized_config_names = ("source_tokenizer", "target_tokenizer")

    def __init__(
        self,
        inputs,
        outputs,
        source_vocabulary_size,
        target_vocabulary_size,
        max_source_length,
        max_target_length,
        start_token_id=2,
        end_token_id=3,
        source_tokenizer=None,
        target_tokenizer=None,
        **kwargs,
    ):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.keep_config(Seq2Seq, locals())

    def generation_inputs(self, encoder_token_ids):
        encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
        if len(encoder_token_ids.shape) != 2:
            raise ValueError(
                "`encoder_token_ids` must have shape (batch, length); received "
                f"{tuple(encoder_token_ids.shape)}."
            )
        return encoder_token_ids

    def attention_weights(self, encoder_token_ids, decoder_token_ids):
        """Cross-attention weights `(B, T, S)` with teacher forcing."""
        raise NotImplementedError


def token_id_inputs():
    """The two symbolic inputs of a translation model."""
    return {
        name: keras.Input((None,), dtype="int32", name=name)
        for name in ("encoder_token_ids", "decoder_token_ids")
    }


def check_seq2seq_args(
    source_vocabulary_size,
    target_vocabulary_size,
    max_source_length,
    max_target_length,
    **sizes,
):
    """Checks the sizes every translation model has, and its own positive
    sizes (`sizes`, by name)."""
    for name, value in {
        "source_vocabulary_size": source_vocabulary_size,
        "target_vocabulary_size": target_vocabulary_size,
        **sizes,
        "max_source_length": max_source_length,
        "max_target_length": max_target_length,
    }.items():
        check_positive_int(name, value)
