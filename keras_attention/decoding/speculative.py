"""Speculative decoding: a small draft model proposes tokens, the target
model checks them all in one pass over its cache.

Each round the draft model proposes `k` tokens, one decoding step each; the
target then reads its last token and the `k` proposals in one
`call_with_cache` pass (queries at an offset into its cache, causal to the
lower right) and keeps the longest prefix of the proposals that it agrees
with, plus one token of its own: between 1 and `k + 1` tokens for one
target pass, where token-by-token decoding gets one.

- Greedy (`temperature=None`): a proposal is kept while it is the target's
  argmax; the output is the target's own greedy output.
- Sampling (`temperature=t`): a proposal `x` drawn from the draft's
  distribution `q` is kept with probability `min(1, p(x) / q(x))`, `p` the
  target's; at the first rejection the token is drawn from
  `max(0, p - q)` renormalized, and after `k` kept proposals from `p`
  (Leviathan et al., 2023; Chen et al., 2023). Each token is then
  distributed as the target's own sample at temperature `t`.

The rows of a batch advance together: a round keeps, on every row, the
fewest tokens any unfinished row kept (on the others the next proposal,
already accepted, takes the place of the target's token), so every cache
stays aligned at one position. A rejected proposal's keys and values stay
in the caches past that position; the causal mask hides them and the next
round overwrites them.

References:
    - [Leviathan et al., 2023](https://arxiv.org/abs/2211.17192)
    - [Chen et al., 2023](https://arxiv.org/abs/2302.01318)
"""

import numpy as np
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.decoding.speculative_loop import speculative_fill
from keras_attention.decoding.tokens import (
    PAD_ID,
    check_output_length,
    check_prompt_ids,
)
from keras_attention.utils.backend import compile_function

__all__ = ["speculative_fill", "speculative_generate", "speculative_translate"]


def speculative_generate(
    target,
    draft,
    prompt_ids,
    max_length=None,
    num_draft_tokens=4,
    temperature=None,
    seed=0,
    jit_compile=True,
):
    """Continues each prompt up to `max_length` tokens with the target's
    distribution, in fewer target passes than one per token.

    Args:
        target: a decoder-only language model with `call_with_cache`
            (`GPT`): the model whose output this is.
        draft: a smaller language model over the same vocabulary that
            caches by position (`GPT`; not the LSTM baseline, whose state
            cannot go back past a rejected proposal), which proposes.
        prompt_ids: int `(B, P)`, each row's prompt, right-padded with 0; at
            least one token per row.
        max_length: the length of the output, prompt included (default: the
            target's `max_length`). Each round reads `num_draft_tokens`
            positions past the last kept one, so both models' positions
            must reach `max_length + num_draft_tokens - 1`.
        num_draft_tokens: `k`, the proposals per round.
        temperature: None for greedy decoding (the target's greedy output),
            else a positive float: sampling at that temperature with the
            acceptance rule above.
        seed: int, the seed of the sampling (the same seed draws the same
            tokens; every seed runs the same compiled loop).
        jit_compile: compile the whole loop with XLA.

    Returns:
        `(tokens, stats)`: int32 `(B, max_length)`, each prompt followed by
        the generated tokens (after a generated `end_token_id`, padding);
        and a dict of ints: `rounds` (target passes), `new_tokens`
        (positions filled, on every row), `accepted` and `proposed` (the
        draft's proposals kept, and made): `new_tokens / rounds` is the
        tokens per target pass, `accepted / proposed` the acceptance rate.

    Example:

    ```python
    import numpy as np
    from keras_attention.models import GPT
    from keras_attention.decoding.speculative import speculative_generate

    sizes = dict(max_length=32, num_heads=2, dropout=0.0,
                 input_positions=None, attention_positions="rotary")
    target = GPT(50, hidden_dim=32, num_layers=2, intermediate_dim=64, **sizes)
    draft = GPT(50, hidden_dim=16, num_layers=1, intermediate_dim=32, **sizes)
    prompts = np.array([[5, 6, 7], [8, 9, 0]])
    tokens, stats = speculative_generate(target, draft, prompts, max_length=20)
    assert (np.asarray(tokens) == np.asarray(target.generate(prompts, 20))).all()
    print(stats["new_tokens"] / stats["rounds"])  # tokens per target pass
    ```
    """
    prompt_ids = check_prompt_ids(prompt_ids)
    for name, model in (("target", target), ("draft", draft)):
        if not hasattr(model, "call_with_cache"):
            # The target reads k + 1 tokens in one pass; the draft's cache must
            # hold positions that a rejected proposal's may be rewritten in
            # (a recurrent state cannot go back).
            raise ValueError(
                f"The {name} model must keep a cache by position and read many "
                f"tokens in one pass (`call_with_cache`, as GPT does); received "
                f"{type(model).__name__}."
            )
    if draft.vocabulary_size != target.vocabulary_size:
        raise ValueError(
            "The draft and target models must share their vocabulary; received "
            f"vocabulary sizes {draft.vocabulary_size} (draft) and "
            f"{target.vocabulary_size} (target)."
        )
    _check_search(num_draft_tokens, temperature, seed)
    max_length = max_length or target.max_length
    check_output_length(max_length, prompt_ids)
    width = prompt_ids.shape[1]
    reach = max_length + num_draft_tokens - 1
    for name, model in (("target", target), ("draft", draft)):
        try:
            model.check_generation_length(reach)
        except ValueError as error:
            raise ValueError(
                f"Speculative decoding reads num_draft_tokens={num_draft_tokens} "
                f"positions past the last kept token, up to {reach} for "
                f"max_length={max_length}; the {name} model cannot: {error}"
            ) from None
    lengths = np.where(prompt_ids == PAD_ID, 0, 1).cumprod(axis=1).sum(axis=1)
    start = int(lengths.min())

    def generate_step(prompt_ids, seed):
        return speculative_fill(
            target,
            draft,
            prompt_ids,
            max_length,
            num_draft_tokens,
            temperature,
            seed,
            start,
        )

    # The width too: TensorFlow would trace a new width with an unknown one.
    key = ("speculative", draft, max_length, num_draft_tokens, temperature)
    key = (*key, start, width, jit_compile)
    return _run(
        target,
        draft,
        key,
        generate_step,
        prompt_ids.astype("int32"),
        seed,
        num_draft_tokens,
        jit_compile,
    )


def speculative_translate(
    target,
    draft,
    encoder_token_ids,
    max_length=None,
    num_draft_tokens=4,
    temperature=None,
    seed=0,
    jit_compile=True,
):
    """Speculative decoding of an encoder-decoder model: each source's
    output in the target's distribution, in fewer target passes than one per
    token (the module's rounds, after `<start>`; both models read the same
    source).

    Args:
        target: a translation model that reads many target tokens in one
            pass over its cache (`Transformer`: `call_with_cache`).
        draft: a smaller one with the same source and target vocabularies
            and special tokens (a `Transformer`; not `RNNSeq2Seq`, whose
            state cannot go back past a rejected proposal).
        encoder_token_ids: int `(B, S)`, the source tokens, padded with 0.
        max_length: tokens to generate at most (default: the target's
            `max_target_length` less `num_draft_tokens`). A round reads
            `num_draft_tokens` positions past the last kept token: both
            models' `max_target_length` must reach
            `max_length + num_draft_tokens`.
        num_draft_tokens: `k`, the proposals per round.
        temperature: None for greedy decoding (the target's greedy
            `generate` output), else a positive float: sampling at that
            temperature with the acceptance rule.
        seed: int, the seed of the sampling.
        jit_compile: compile the whole loop with XLA.

    Returns:
        `(tokens, stats)`: int32 `(B, max_length)` as the target's
        `generate` gives them (ending with `end_token_id`, padded with 0
        after it), and the dict of `speculative_generate`.

    Example:

    ```python
    import numpy as np
    from keras_attention.models import Transformer
    from keras_attention.decoding.speculative import speculative_translate

    sizes = dict(num_heads=2, intermediate_dim=64, max_source_length=8,
                 max_target_length=12)
    target = Transformer(30, 30, hidden_dim=32, num_encoder_layers=2,
                         num_decoder_layers=2, **sizes)
    draft = Transformer(30, 30, hidden_dim=16, num_encoder_layers=1,
                        num_decoder_layers=1, **sizes)
    source = np.array([[5, 6, 7, 0], [8, 9, 10, 11]])
    tokens, stats = speculative_translate(target, draft, source, max_length=8)
    assert (np.asarray(tokens) == np.asarray(target.generate(source, 8))).all()
    ```
    """
    for name, model in (("target", target), ("draft", draft)):
        if not (
            hasattr(model, "call_with_cache") and hasattr(model, "generation_inputs")
        ):
            raise ValueError(
                f"The {name} model must be an encoder-decoder model that reads "
                "many target tokens in one pass over its cache "
                f"(`call_with_cache`, as the Transformer does); received "
                f"{type(model).__name__}."
            )
    for name in (
        "source_vocabulary_size",
        "target_vocabulary_size",
        "start_token_id",
        "end_token_id",
    ):
        if getattr(draft, name) != getattr(target, name):
            raise ValueError(
                f"The draft and target models must share their vocabularies and "
                f"special tokens; received {name}={getattr(draft, name)} (draft) "
                f"and {getattr(target, name)} (target)."
            )
    _check_search(num_draft_tokens, temperature, seed)
    reach = min(target.max_target_length, draft.max_target_length)
    max_length = max_length or reach - num_draft_tokens
    check_positive_int("max_length", max_length)
    if max_length + num_draft_tokens > reach:
        raise ValueError(
            f"Speculative decoding reads num_draft_tokens={num_draft_tokens} "
            "positions past the last kept token, up to "
            f"{max_length + num_draft_tokens} for max_length={max_length}; the "
            "models' target positions reach "
            f"{reach} (max_target_length): give max_length <= "
            f"{reach - num_draft_tokens}."
        )
    encoder_token_ids = target.generation_inputs(encoder_token_ids)

    def translate_step(encoder_token_ids, seed):
        batch_size = ops.shape(encoder_token_ids)[0]
        # <start>, then max_length tokens; a round reads up to position
        # max_length + k - 1.
        size = max_length + num_draft_tokens
        caches = (
            target.initial_cache(encoder_token_ids, size),
            draft.initial_cache(encoder_token_ids, size),
        )
        prompt = ops.full((batch_size, 1), target.start_token_id, "int32")
        tokens, *counts = speculative_fill(
            target,
            draft,
            prompt,
            max_length + 1,
            num_draft_tokens,
            temperature,
            seed,
            caches=caches,
        )
        return (tokens[:, 1:], *counts)

    key = ("speculative_translate", draft, max_length, num_draft_tokens)
    key = (*key, temperature, jit_compile)
    return _run(
        target,
        draft,
        key,
        translate_step,
        encoder_token_ids,
        seed,
        num_draft_tokens,
        jit_compile,
    )


def _check_search(num_draft_tokens, temperature, seed):
    check_positive_int("num_draft_tokens", num_draft_tokens)
    if temperature is not None and not (
        isinstance(temperature, (int, float)) and temperature > 0
    ):
        raise ValueError(
            "`temperature` must be None (greedy) or a positive number; received "
            f"temperature={temperature!r}."
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"`seed` must be an integer; received seed={seed!r}.")


def _run(target, draft, key, step, inputs, seed, num_draft_tokens, jit_compile):
    """Runs `step(inputs, seed)`, compiled once per `key` (kept on the
    target), and returns the tokens and the stats dict."""
    if not hasattr(target, "_generate_functions"):
        target._generate_functions = {}
    if key not in target._generate_functions:
        variables = [
            *target.trainable_variables,
            *target.non_trainable_variables,
            *draft.trainable_variables,
            *draft.non_trainable_variables,
        ]
        target._generate_functions[key] = compile_function(
            step, variables, jit_compile=jit_compile
        )
    # A tensor, not a Python or NumPy scalar, which tf.function would trace
    # again for every value.
    seed = ops.convert_to_tensor(
        np.int32(((int(seed) & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000), "int32"
    )
    tokens, *counts = target._generate_functions[key](inputs, seed)
    rounds, filled, accepted = (int(ops.convert_to_numpy(c)) for c in counts)
    stats = {
        "rounds": rounds,
        "new_tokens": filled,
        "accepted": accepted,
        "proposed": rounds * num_draft_tokens,
    }
    return tokens, stats
