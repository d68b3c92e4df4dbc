"""`generate` for encoder-decoder models (translation, captioning): greedy
search, beam search, or greedy search after a forced prefix."""

import numpy as np
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.decoding.beam import ancestry_beam_search, beam_search
from keras_attention.decoding.caches import _compiled, prefill
from keras_attention.decoding.greedy import greedy_fill, greedy_search
from keras_attention.decoding.tokens import (
    PAD_ID,
    _initial_tokens,
    truncate_after_end,
)


class GenerationMixin:
    """`generate` for a `keras.Model` with an encoder and a step-wise decoder.

    The model provides `start_token_id`, `end_token_id`, `max_target_length`
    (the default number of tokens to generate) and implements:

    - `generation_inputs(inputs)`: converts and checks the encoder inputs;
    - `initial_cache(inputs, max_length)`: the decoder's cache before the
      first step, batch on axis 0;
    - `decode_step(token_ids, cache, index)`: the logits `(B, V)` of the token
      after `token_ids` `(B,)` (at target position `index`), and the updated
      cache;
    - optionally `call_with_cache(token_ids, cache, index)`: the same for
      `(B, T)` tokens at once, so that a forced prefix is prefilled in one
      pass (the Transformer).
    """

    def generate(
        self,
        inputs,
        max_length=None,
        beam_width=1,
        length_penalty=0.6,
        jit_compile=True,
        prefix_ids=None,
    ):
        """Generates token ids for a batch of encoder inputs.

        Args:
            inputs: the encoder inputs (source token ids `(B, S)` padded with
                0 for translation, images `(B, H, W, C)` for captioning).
            max_length: tokens to generate at most; defaults to the model's
                `max_target_length`.
            beam_width: 1 for greedy search, more for beam search
                (`model_beam_search`): `ancestry_beam_search` where the model
                gives a `beam_search_cache` (the `Transformer` without
                attention positions: its beams are the queries of one
                sequence per source, with a position-major self-attention
                cache that is never gathered, read through each beam's
                ancestry, and the cross-attention cache unrepeated), else
                the generic `beam_search` (the cache repeated per beam and
                gathered by the surviving beams, but for what `beam_reorder`
                marks as shared by a source's beams). Both give the same
                tokens.
            length_penalty: alpha of the beam-search length penalty.
            jit_compile: compile the whole search with XLA.
            prefix_ids: optional int `(B, P)`, `P < max_length`: the tokens
                every output starts with (after `<start>`), a forced prefix
                such as a partial translation to complete; greedy search
                only. It fills the decoder's cache in one pass when the model
                has `call_with_cache` (the Transformer), token by token
                otherwise; the tokens after it are those that feeding it one
                token at a time would give.

        Returns:
            int32 numpy-convertible `(B, max_length)`: the generated tokens,
            ending with `end_token_id` and padded with 0 after it.
        """
        max_length = max_length or self.max_target_length
        check_positive_int("max_length", max_length)
        check_positive_int("beam_width", beam_width)
        inputs = self.generation_inputs(inputs)
        if prefix_ids is not None:
            prefix_ids = _check_prefix(prefix_ids, ops.shape(inputs)[0], max_length)
            if beam_width != 1:
                raise ValueError(
                    "`prefix_ids` works with greedy search (beam_width=1); "
                    f"received beam_width={beam_width}."
                )

        def generate_step(inputs, prefix_ids=None):
            return self.search(
                inputs, max_length, beam_width, length_penalty, prefix_ids
            )

        width = None if prefix_ids is None else prefix_ids.shape[1]
        key = (max_length, beam_width, float(length_penalty), jit_compile, width)
        function = _compiled(self, key, generate_step, jit_compile)
        if prefix_ids is None:
            return function(inputs)
        return function(inputs, prefix_ids)

    def search(
        self, inputs, max_length, beam_width=1, length_penalty=0.6, prefix_ids=None
    ):
        """The uncompiled search behind `generate`."""
        batch_size = ops.shape(inputs)[0]
        if beam_width != 1 and prefix_ids is None:
            return model_beam_search(
                self, inputs, max_length, beam_width, length_penalty
            )
        cache = self.initial_cache(inputs, max_length)
        if prefix_ids is not None:
            return self._complete_prefix(cache, prefix_ids, max_length)
        return greedy_search(
            self.decode_step,
            cache,
            batch_size,
            max_length,
            self.start_token_id,
            self.end_token_id,
            model=self,
        )

    def beam_search_cache(self, inputs, max_length, beam_width):
        """The cache of `ancestry_beam_search` for `beam_decode_step` (one
        row per source, not repeated per beam), or None (the default): the
        model is searched by the generic `beam_search`."""
        return None

    def beam_decode_step(self, token_ids, cache, index, ancestry):
        """Logits `(B, k, V)` of the tokens after each beam's `token_ids`
        `(B, k)`, and the updated cache (see `ancestry_beam_search`); needed
        where `beam_search_cache` gives a cache."""
        raise NotImplementedError

    def beam_reorder(self, cache):
        """For the generic `beam_search`: bools shaped like `cache`, False
        where a tensor is the same for all beams of a source (never
        gathered), or None (the default: gather every tensor)."""
        return None

    def _complete_prefix(self, cache, prefix_ids, max_length):
        """Greedy search from `<start>` and the forced `prefix_ids`."""
        width = prefix_ids.shape[1]
        batch_size = ops.shape(prefix_ids)[0]
        tokens = _initial_tokens(batch_size, max_length, self.start_token_id)
        tokens = ops.slice_update(tokens, [0, 1], ops.cast(prefix_ids, "int32"))
        given = ops.less(ops.arange(max_length + 1, dtype="int32"), width + 1)[None, :]
        given = ops.broadcast_to(given, ops.shape(tokens))
        cache = prefill(self, tokens[:, :width], cache)
        tokens = greedy_fill(
            self.decode_step, cache, tokens, given, self.end_token_id, width + 1
        )
        return truncate_after_end(tokens[:, 1:], self.end_token_id, given[:, 1:])

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


def model_beam_search(
    model, inputs, max_length, beam_width=4, length_penalty=0.6, end_id=None
):
    """Beam search of a `GenerationMixin` model (uncompiled): by
    `ancestry_beam_search` where the model gives a `beam_search_cache`
    (the `Transformer` without attention positions: no cache is ever
    gathered), else by the generic `beam_search`, gathering only what
    `beam_reorder` marks. `end_id` defaults to the model's end token."""
    batch_size = ops.shape(inputs)[0]
    end_id = model.end_token_id if end_id is None else end_id
    args = (batch_size, max_length, model.start_token_id, end_id)
    options = {"beam_width": beam_width, "length_penalty": length_penalty}
    cache = model.beam_search_cache(inputs, max_length, beam_width)
    if cache is not None:
        return ancestry_beam_search(model.beam_decode_step, cache, *args, **options)
    cache = model.initial_cache(inputs, max_length)
    return beam_search(
        model.decode_step, cache, *args, **options, reorder=model.beam_reorder(cache)
    )


def _check_prefix(prefix_ids, batch_size, max_length):
    prefix = np.asarray(prefix_ids)
    if prefix.ndim != 2 or not np.issubdtype(prefix.dtype, np.integer):
        raise ValueError(
            "`prefix_ids` must be an integer array (batch, length); received "
            f"dtype {prefix.dtype} and shape {prefix.shape}."
        )
    if prefix.shape[0] != batch_size or not 0 < prefix.shape[1] < max_length:
        raise ValueError(
            f"`prefix_ids` must be (batch, length) with batch {batch_size} and a "
            f"length from 1 to max_length - 1 = {max_length - 1}; received "
            f"shape {prefix.shape}."
        )
    if np.any(prefix == PAD_ID):
        raise ValueError(
            f"`prefix_ids` is forced on every row, whole: it holds no padding "
            f"({PAD_ID}); received {prefix.tolist()}."
        )
    return prefix.astype("int32")
