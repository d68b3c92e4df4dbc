"""Greedy and beam-search decoding of encoder-decoder models, sampling from
decoder-only language models, and speculative decoding.

Both searches drive a step function `step_fn(token_ids, cache, index)` that
maps the previous tokens `(B,)` at target position `index` to next-token
logits `(B, V)` and the updated cache, a nested structure of tensors with the
batch on axis 0 (the recurrent state of an RNN decoder, the key/value caches of
a Transformer decoder). Both are written here with `keras.ops` only, so they
run on the core install (no keras-hub), and each runs as one `while` loop that
XLA compiles whole.

`GenerationMixin` gives a model `generate`, compiled once per shape and
search. Greedy search picks the same tokens as keras-hub's `GreedySampler`
(the argmax of the float32 probabilities, stopping once every row produced the
end token). Beam search keeps a finished beam unchanged and ranks beams with a
length penalty, both of which translation needs and keras-hub's `BeamSampler`
lacks.

`LanguageModelGenerationMixin` gives a decoder-only language model
`generate`: prompts continued greedily (`sampler="greedy"`, no keras-hub
needed) or by any keras-hub sampler (top-k, top-p, random, with a
temperature; keras-hub comes with the `apps` extra and is imported only
then) through `sample`.

`mean_log_probs` scores what a search produced (the model's confidence in its
own output) with one teacher-forced forward pass.

One concept per module, each importing only those listed before it:

- `tokens`: the padding id, a search's first column, the padding after an
  end token, prompts checked;
- `greedy`: `greedy_search` and its loop, `greedy_fill`;
- `beam`: `beam_search`, `ancestry_beam_search` and the loop they share;
- `sampling`: `sample` with keras-hub's samplers, `get_sampler`;
- `caches`: `prefill` (a prompt into a decoder's cache) and the compiled
  searches kept on a model;
- `encoder_decoder`: `GenerationMixin`, `model_beam_search`;
- `language_model`: `LanguageModelGenerationMixin`;
- `scoring`: `mean_log_probs`;
- `speculative_loop` and `speculative`: speculative decoding, a draft model
  proposing and the model checking (`keras_attention.decoding.speculative`;
  not re-exported here).
"""

from keras_attention.decoding.beam import (
    NEG_INF,
    ancestry_attention_mask,
    ancestry_beam_search,
    beam_search,
)
from keras_attention.decoding.caches import prefill
from keras_attention.decoding.encoder_decoder import GenerationMixin, model_beam_search
from keras_attention.decoding.greedy import greedy_fill, greedy_search
from keras_attention.decoding.language_model import LanguageModelGenerationMixin
from keras_attention.decoding.sampling import get_sampler, sample
from keras_attention.decoding.scoring import mean_log_probs
from keras_attention.decoding.tokens import PAD_ID, check_prompt_ids, truncate_after_end

__all__ = [
    "NEG_INF",
    "PAD_ID",
    "GenerationMixin",
    "LanguageModelGenerationMixin",
    "ancestry_attention_mask",
    "ancestry_beam_search",
    "beam_search",
    "check_prompt_ids",
    "get_sampler",
    "greedy_fill",
    "greedy_search",
    "mean_log_probs",
    "model_beam_search",
    "prefill",
    "sample",
    "truncate_after_end",
]
