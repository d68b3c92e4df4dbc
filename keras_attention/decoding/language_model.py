"""`generate` for decoder-only language models: prompts continued greedily
or with a keras-hub sampler."""

import numpy as np
from keras import ops

from keras_attention.decoding.caches import _compiled, prefill
from keras_attention.decoding.sampling import _is_greedy, get_sampler, sample
from keras_attention.decoding.tokens import (
    PAD_ID,
    check_output_length,
    check_prompt_ids,
    truncate_after_end,
)


class LanguageModelGenerationMixin:
    """`generate` for a decoder-only language model (`GPT`, the LSTM
    baseline): continues prompts greedily or with a keras-hub sampler.

    The model provides `max_length` (the default output length),
    `end_token_id` (None: no end token) and implements:

    - `initial_cache(batch_size, max_length)`: the cache before the first
      token (key/value caches, recurrent states), batch on axis 0;
    - `decode_step(token_ids, cache, index)`: the logits `(B, V)` of the
      token after `token_ids` `(B,)` (at position `index`), and the updated
      cache;
    - optionally `call_with_cache(token_ids, cache, index)`: the same for
      `(B, T)` tokens at once (logits `(B, T, V)`); a model that has it is
      prefilled in one pass (`prefill`);
    - optionally `check_generation_length(max_length)`: refuses an output
      length the model cannot reach; by default the longest is the model's
      `max_length` (None: any length). `GPT` allows any length unless its
      positions are a learned table.
    """

    def generate(self, prompt_ids, max_length=None, sampler="greedy", jit_compile=True):
        """Continues each prompt up to `max_length` tokens.

        The tokens that every prompt has (up to the shortest prompt's
        length) fill the model's cache in one pass when the model attends
        over many tokens at once (`call_with_cache`: GPT), one by one
        otherwise; then every new token costs one step (the longer prompts'
        remaining tokens are fed in those steps). Generation stops when
        every row has produced `end_token_id` (when the model has one).

        Args:
            prompt_ids: int `(B, P)`, each row's prompt, right-padded with
                0; at least one token per row.
            max_length: the length of the output, prompt included; defaults
                to the model's `max_length`. It may exceed the model's
                `max_length` where the model's positions are defined at any
                position (`GPT` with rotary, ALiBi, T5's relative or
                sinusoidal positions, or none): the cache is then sized for
                `max_length` and the positions computed past the trained
                length. A model with a learned table of positions (`GPT`'s
                default) stops at its `max_length`, as does the LSTM
                baseline (`check_generation_length`).
            sampler: `"greedy"` (the most probable token, written here with
                `keras.ops`: the same tokens as keras-hub's `GreedySampler`,
                without keras-hub), or a keras-hub sampler
                (`keras_hub.samplers.TopPSampler(p=0.9, temperature=0.8)`,
                say) or its name (`"top_k"`, `"top_p"`, `"random"`), which need
                keras-hub (the `apps` extra). On JAX the compiled search
                reads a random sampler's seed state but cannot advance it:
                each call draws the same numbers.
            jit_compile: compile the whole loop with XLA.

        Returns:
            int32 numpy-convertible `(B, max_length)`: each prompt followed by
            the generated tokens; after a generated `end_token_id` (kept),
            padding (0).
        """
        prompt_ids = check_prompt_ids(prompt_ids)
        max_length = max_length or self.max_length
        check_output_length(max_length, prompt_ids)
        width = prompt_ids.shape[1]
        self.check_generation_length(max_length)
        if _is_greedy(sampler):  # written here: no keras-hub
            variables = ()
        else:
            if isinstance(sampler, str):  # one sampler per name, compiled once
                if not hasattr(self, "_named_samplers"):
                    self._named_samplers = {}
                if sampler not in self._named_samplers:
                    self._named_samplers[sampler] = get_sampler(sampler)
                sampler = self._named_samplers[sampler]
            sampler = get_sampler(sampler)
            variables = sampler.variables

        # Right-padded prompts: the shortest one's length is where the first
        # row needs a new token.
        lengths = np.where(prompt_ids == PAD_ID, 0, 1).cumprod(axis=1).sum(axis=1)
        start = int(lengths.min())

        def generate_step(prompt_ids):
            return self.sample(prompt_ids, max_length, sampler, start=start)

        # The width too: TensorFlow traces the function once per key, and a
        # second width under the same key reached the trace as unknown.
        key = ("sample", max_length, sampler, jit_compile, start, width)
        function = _compiled(self, key, generate_step, jit_compile, variables)
        return function(prompt_ids.astype("int32"))

    def sample(self, prompt_ids, max_length, sampler="greedy", start=1):
        """The uncompiled loop behind `generate` (`sampler`: `"greedy"` or a
        keras-hub sampler): the first `start - 1` tokens of every prompt
        prefill the cache, then positions from `start` on are sampled."""
        width = prompt_ids.shape[1]
        prompt = ops.pad(prompt_ids, [[0, 0], [0, max_length - width]])
        given = ops.not_equal(prompt, PAD_ID)
        cache = self.initial_cache(ops.shape(prompt)[0], max_length)
        if start > 1:
            cache = self.prefill(prompt[:, : start - 1], cache)
        end_id = self.end_token_id
        tokens = sample(
            self.decode_step,
            cache,
            prompt,
            sampler,
            given,
            end_id,
            model=self,
            start=start,
        )
        if end_id is None:
            return tokens
        return truncate_after_end(tokens, end_id, given)

    def prefill(self, token_ids, cache):
        """`cache` after the tokens `(B, T)` at positions `0..T-1` (see
        `keras_attention.decoding.caches.prefill`)."""
        return prefill(self, token_ids, cache)

    def check_generation_length(self, max_length):
        """Raises a ValueError if `generate` cannot reach `max_length`
        tokens: by default past the model's `max_length` (None: no limit).
        Models whose positions go on past it override this."""
        limit = self.max_length
        if limit is not None and max_length > limit:
            raise ValueError(
                f"`max_length` must be at most the model's max_length ({limit}); "
                f"received max_length={max_length}."
            )

    def initial_cache(self, batch_size, max_length):
        """The cache before the first token, batch on axis 0."""
        raise NotImplementedError

    def decode_step(self, token_ids, cache, index):
        """Logits `(B, V)` of the token after `token_ids` `(B,)` (at position
        `index`), and the updated cache."""
        raise NotImplementedError
