"""Compiled greedy and beam-search generation, shared by the encoder-decoder
models (translation and captioning)."""

from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.decoding import beam_search, greedy_search
from keras_attention.utils.backend import compile_function


class GenerationMixin:
    """`generate` for a `keras.Model` with an encoder and a step-wise decoder.

    The model provides `start_token_id`, `end_token_id`, `max_target_length`
    (the default number of tokens to generate) and implements:

    - `generation_inputs(inputs)`: converts and checks the encoder inputs;
    - `initial_cache(inputs, max_length)`: the decoder's cache before the
      first step, batch on axis 0;
    - `decode_step(token_ids, cache, index)`: the logits `(B, V)` of the token
      after `token_ids` `(B,)` (at target position `index`), and the updated
      cache.
    """

    def generate(
        self,
        inputs,
        max_length=None,
        beam_width=1,
        length_penalty=0.6,
        jit_compile=True,
    ):
        """Generates token ids for a batch of encoder inputs.

        Args:
            inputs: the encoder inputs (source token ids `(B, S)` padded with
                0 for translation, images `(B, H, W, C)` for captioning).
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
        if not hasattr(self, "_generate_functions"):
            self._generate_functions = {}
        key = (max_length, beam_width, float(length_penalty), jit_compile)
        if key not in self._generate_functions:

            def generate_step(inputs):
                return self.search(inputs, max_length, beam_width, length_penalty)

            self._generate_functions[key] = compile_function(
                generate_step,
                [*self.trainable_variables, *self.non_trainable_variables],
                jit_compile=jit_compile,
            )
        return self._generate_functions[key](self.generation_inputs(inputs))

    def search(self, inputs, max_length, beam_width=1, length_penalty=0.6):
        """The uncompiled search behind `generate`."""
        batch_size = ops.shape(inputs)[0]
        cache = self.initial_cache(inputs, max_length)
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

    def generation_inputs(self, inputs):
        """The encoder inputs as a tensor, checked."""
        raise NotImplementedError

    def initial_cache(self, inputs, max_length):
        """The decoder's cache before the first step, batch on axis 0."""
        raise NotImplementedError

    def decode_step(self, token_ids, cache, index):
        """Logits `(B, V)` of the token after `token_ids` `(B,)` (at target
        position `index`), and the updated cache."""
        raise NotImplementedError
