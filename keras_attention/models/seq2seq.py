"""The shared behaviour of the encoder-decoder translation models."""

import keras
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.decoding import beam_search, compile_function, greedy_search


class Seq2Seq(keras.Model):
    """Base of `RNNSeq2Seq` and `Transformer`: teacher-forced training through
    `call`, and compiled greedy or beam-search generation through `generate`.

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
        self.source_vocabulary_size = source_vocabulary_size
        self.target_vocabulary_size = target_vocabulary_size
        self.max_source_length = max_source_length
        self.max_target_length = max_target_length
        self.start_token_id = start_token_id
        self.end_token_id = end_token_id
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self._generate_functions = {}

    def generate(
        self,
        encoder_token_ids,
        max_length=None,
        beam_width=1,
        length_penalty=0.6,
        jit_compile=True,
    ):
        """Translates a batch of token ids.

        Args:
            encoder_token_ids: int `(B, S)`, padded with 0.
            max_length: tokens to generate at most; defaults to the model's
                `max_target_length`.
            beam_width: 1 for greedy search, more for beam search.
            length_penalty: alpha of the beam-search length penalty.
            jit_compile: compile the whole search with XLA.

        Returns:
            int32 numpy-convertible `(B, max_length)`: the generated tokens,
            ending with `end_token_id` and padded with 0 after it.
        """
        max_length = max_length or self.max_target_length
        check_positive_int("max_length", max_length)
        check_positive_int("beam_width", beam_width)
        key = (max_length, beam_width, float(length_penalty), jit_compile)
        if key not in self._generate_functions:

            def generate_step(encoder_token_ids):
                return self.search(
                    encoder_token_ids, max_length, beam_width, length_penalty
                )

            self._generate_functions[key] = compile_function(
                generate_step, self, jit_compile=jit_compile
            )
        encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
        if len(encoder_token_ids.shape) != 2:
            raise ValueError(
                "`encoder_token_ids` must have shape (batch, length); received "
                f"{tuple(encoder_token_ids.shape)}."
            )
        return self._generate_functions[key](encoder_token_ids)

    def search(self, encoder_token_ids, max_length, beam_width=1, length_penalty=0.6):
        """The uncompiled search behind `generate`."""
        batch_size = ops.shape(encoder_token_ids)[0]
        cache = self.initial_cache(encoder_token_ids, max_length)
        if beam_width == 1:
            return greedy_search(
                self.decode_step,
                cache,
                batch_size,
                max_length,
                self.start_token_id,
                self.end_token_id,
                model=self,
            )
        return beam_search(
            self.decode_step,
            cache,
            batch_size,
            max_length,
            self.start_token_id,
            self.end_token_id,
            beam_width=beam_width,
            length_penalty=length_penalty,
        )

    def initial_cache(self, encoder_token_ids, max_length):
        """The decoder's cache before the first step, batch on axis 0."""
        raise NotImplementedError

    def decode_step(self, token_ids, cache, index):
        """Logits `(B, V)` of the token after `token_ids` `(B,)` (at target
        position `index`), and the updated cache."""
        raise NotImplementedError

    def attention_weights(self, encoder_token_ids, decoder_token_ids):
        """Cross-attention weights `(B, T, S)` with teacher forcing."""
        raise NotImplementedError

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "source_vocabulary_size": self.source_vocabulary_size,
            "target_vocabulary_size": self.target_vocabulary_size,
            "max_source_length": self.max_source_length,
            "max_target_length": self.max_target_length,
            "start_token_id": self.start_token_id,
            "end_token_id": self.end_token_id,
            "source_tokenizer": _serialize(self.source_tokenizer),
            "target_tokenizer": _serialize(self.target_tokenizer),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for name in ("source_tokenizer", "target_tokenizer"):
            if config.get(name) is not None:
                config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)


def _serialize(layer):
    return None if layer is None else keras.saving.serialize_keras_object(layer)


def token_id_inputs():
    """The two symbolic inputs of a translation model."""
    return {
        name: keras.Input((None,), dtype="int32", name=name)
        for name in ("encoder_token_ids", "decoder_token_ids")
    }


def padding_mask(token_ids):
    """True at real tokens, False at padding (token 0)."""
    return ops.not_equal(token_ids, 0)
