"""Speculative decoding of swapped keras-hub causal LMs.

`keras_attention.decoding.speculative.speculative_generate` runs a target and a draft
model that keep a cache by position and read many tokens in one pass over it
(`call_with_cache`, queries at an offset into the cache, causal to the lower
right). A keras-hub `CausalLM` has a `call_with_cache`, which returns
`(logits, hidden_states, cache)`; after `swap_attention` its attention layers
build their own caches (`initial_cache`) and take a block of queries at an
offset. `SpeculativeModel` gives it the interface the decoding loop reads,
and `speculative_generate` runs a swapped target with a smaller swapped draft
of the same vocabulary: the greedy output is the target's own greedy output.

References:
    - [Leviathan et al., 2023. Fast Inference from Transformers via
      Speculative Decoding](https://arxiv.org/abs/2211.17192)
    - [Chen et al., 2023. Accelerating Large Language Model Decoding with
      Speculative Sampling](https://arxiv.org/abs/2302.01318)
"""

import weakref

from keras import ops

from keras_attention.decoding import speculative
from keras_attention.integrations.keras_hub.generation import (
    attention_layers,
    empty_cache,
)

# causal LM -> its SpeculativeModel, so that the compiled loop (kept on the
# target's wrapper) is reused from call to call.
_WRAPPERS = weakref.WeakKeyDictionary()


class SpeculativeModel:
    """A swapped keras-hub `CausalLM` read by
    `keras_attention.decoding.speculative`'s loop: `initial_cache`, `call_with_cache`
    returning `(logits, cache)`, `decode_step`, `prefill`.

    Its cache is built by our attention layers, in keras-hub's layout
    `(B, layers, 2, S, N, H)` (the quantized pair after
    `swap_attention(..., cache_dtype="int8")`). Positions are rotary, so any
    length is taken.

    Args:
        causal_lm: a keras-hub `CausalLM` after `swap_attention`.
        end_token_id: the token that ends a row (None: rows run to
            `max_length`).
    """

    max_length = None

    def __init__(self, causal_lm, end_token_id=None):
        attention_layers(causal_lm)  # refuses a model that was not swapped
        self.causal_lm = causal_lm
        self.end_token_id = end_token_id
        self.vocabulary_size = causal_lm.backbone.vocabulary_size

    @property
    def trainable_variables(self):
        return self.causal_lm.trainable_variables

    @property
    def non_trainable_variables(self):
        return self.causal_lm.non_trainable_variables

    def check_generation_length(self, max_length):
        """Rotary positions reach any length: nothing to refuse."""

    def initial_cache(self, batch_size, max_length):
        return empty_cache(self.causal_lm, batch_size, max_length)

    def call_with_cache(self, token_ids, cache, index):
        logits, _, cache = self.causal_lm.call_with_cache(token_ids, cache, index)
        return logits, cache

    def decode_step(self, token_ids, cache, index):
        logits, cache = self.call_with_cache(
            ops.expand_dims(token_ids, 1), cache, index
        )
        return logits[:, 0], cache

    def prefill(self, token_ids, cache):
        return self.call_with_cache(token_ids, cache, 0)[1]


def _wrap(causal_lm, end_token_id):
    wrapper = _WRAPPERS.get(causal_lm)
    if wrapper is None or wrapper.end_token_id != end_token_id:
        wrapper = _WRAPPERS[causal_lm] = SpeculativeModel(causal_lm, end_token_id)
    return wrapper


def speculative_generate(
    target,
    draft,
    prompt_ids,
    max_length,
    num_draft_tokens=4,
    temperature=None,
    seed=0,
    end_token_id=None,
    jit_compile=True,
):
    """`keras_attention.decoding.speculative.speculative_generate` for swapped
    keras-hub causal LMs: the target's output in fewer target passes than
    one per token.

    Args:
        target: a keras-hub `CausalLM` after `swap_attention`.
        draft: a smaller one over the same vocabulary, after
            `swap_attention` (any family this package swaps).
        prompt_ids: int `(B, P)`, each row's prompt, right-padded with 0 (so
            the prompts hold no token 0), at least one token per row.
        max_length: the length of the output, prompt included.
        num_draft_tokens: the draft's proposals per round.
        temperature: None for greedy decoding (the target's greedy tokens,
            those of its `generate` with `sampler="greedy"`), else the
            sampling temperature.
        seed: the sampling's seed.
        end_token_id: the token that ends a row (None: none does).
        jit_compile: compile the whole loop with XLA.

    Returns:
        `(tokens, stats)` as
        `keras_attention.decoding.speculative.speculative_generate` returns
        them: int32 `(B, max_length)`, and the rounds (target passes),
        `new_tokens`, `accepted` and `proposed` counts.

    Example:

    ```python
    tokens, stats = speculative_generate(target, draft, prompt_ids, 64)
    print(stats["accepted"] / stats["proposed"])  # acceptance rate
    ```
    """
    target_vocabulary = target.backbone.vocabulary_size
    draft_vocabulary = draft.backbone.vocabulary_size
    if target_vocabulary != draft_vocabulary:
        raise ValueError(
            "The draft and target models must share their vocabulary; received "
            f"vocabulary sizes {draft_vocabulary} (draft) and "
            f"{target_vocabulary} (target)."
        )
    return speculative.speculative_generate(
        _wrap(target, end_token_id),
        _wrap(draft, end_token_id),
        prompt_ids,
        max_length=max_length,
        num_draft_tokens=num_draft_tokens,
        temperature=temperature,
        seed=seed,
        jit_compile=jit_compile,
    )
