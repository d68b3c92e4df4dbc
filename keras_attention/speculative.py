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
from keras_attention.decoding import PAD_ID, check_prompt_ids, truncate_after_end
from keras_attention.ops.random import uniform_from_counter
from keras_attention.utils.backend import compile_function


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
    from keras_attention.speculative import speculative_generate

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
    check_positive_int("max_length", max_length)
    width = prompt_ids.shape[1]
    if max_length < width:
        raise ValueError(
            f"`max_length` must be from the prompt's length ({width}) on; "
            f"received max_length={max_length}."
        )
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
    from keras_attention.speculative import speculative_translate

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


def speculative_fill(
    target, draft, prompt_ids, max_length, k, temperature, seed, start=1, caches=None
):
    """The uncompiled loop of `speculative_generate`: returns `(tokens,
    rounds, filled, accepted)`; positions before `start` (the tokens every prompt
    has) prefill both caches in one pass each. `caches`: the target's and the
    draft's initial caches of `max_length + k - 1` positions (default: their
    `initial_cache(batch_size, ...)`, decoder-only models)."""
    batch_size, width = ops.shape(prompt_ids)[0], prompt_ids.shape[1]
    # k columns past the output: a round writes k + 1 tokens from its first
    # position, which may be the output's last.
    prompt = ops.pad(prompt_ids, [[0, 0], [0, max_length + k - width]])
    given = ops.not_equal(prompt, PAD_ID)
    # The furthest position a round reads is max_length + k - 2.
    size = max_length + k - 1
    if caches is None:
        caches = (
            target.initial_cache(batch_size, size),
            draft.initial_cache(batch_size, size),
        )
    target_cache, draft_cache = caches
    if start > 1:
        target_cache = target.prefill(prompt[:, : start - 1], target_cache)
        draft_cache = draft.prefill(prompt[:, : start - 1], draft_cache)
    end_id = target.end_token_id
    sampling = temperature is not None

    def column(x, index):
        return ops.squeeze(ops.slice(x, [0, index], [batch_size, 1]), 1)

    def window(x, index, length):
        return ops.slice(x, [0, index], [batch_size, length])

    def distribution(logits):
        logits = ops.cast(logits, "float32")
        if sampling:
            logits = logits / temperature
        return ops.softmax(logits, axis=-1)

    def draw(probabilities, counter, stream):
        """One token per row from `probabilities` `(B, V)`: the inverse CDF
        of a uniform number keyed by the round, the proposal and the row."""
        uniform = uniform_from_counter((batch_size, 1), seed, counter * 4 + stream)
        below = ops.cumsum(probabilities, axis=-1) <= uniform * ops.sum(
            probabilities, axis=-1, keepdims=True
        )
        token = ops.sum(ops.cast(below, "int32"), axis=-1)
        return ops.minimum(token, ops.shape(probabilities)[-1] - 1)

    def propose(n, tokens, draft_cache, round_index):
        """k proposals from position n on, with the draft's distributions."""
        # Re-reading the token before the last one keeps the draft's cache
        # whole when the last round kept all k proposals (the draft never
        # read the last of them); otherwise it rewrites what it holds.
        before = ops.maximum(n - 2, 0)
        _, draft_cache = draft.decode_step(column(tokens, before), draft_cache, before)
        previous = column(tokens, n - 1)
        proposals, draft_probabilities = [], []
        for i in range(k):
            logits, draft_cache = draft.decode_step(previous, draft_cache, n - 1 + i)
            q = distribution(logits)
            if sampling:
                picked = draw(q, round_index * (k + 1) + i, 0)
            else:
                picked = ops.cast(ops.argmax(q, axis=-1), "int32")
            kept = column(given, n + i)
            picked = ops.where(kept, column(tokens, n + i), picked)
            proposals.append(picked)
            draft_probabilities.append(q)
            previous = picked
        return (
            ops.stack(proposals, axis=1),
            ops.stack(draft_probabilities, axis=1),
            draft_cache,
        )

    def cond(n, tokens, target_cache, draft_cache, done, rounds, filled, accepted):
        return ops.logical_and(n < max_length, ops.logical_not(ops.all(done)))

    def body(n, tokens, target_cache, draft_cache, done, rounds, filled, accepted):
        proposals, q, draft_cache = propose(n, tokens, draft_cache, rounds)
        read = ops.concatenate([window(tokens, n - 1, 1), proposals], axis=1)
        logits, target_cache = target.call_with_cache(read, target_cache, n - 1)
        p = distribution(logits)  # (B, k + 1, V)
        forced = window(given, n, k + 1)
        if sampling:
            proposed = ops.one_hot(proposals, ops.shape(p)[-1], dtype="float32")
            p_proposed = ops.sum(p[:, :k] * proposed, axis=-1)
            q_proposed = ops.sum(q * proposed, axis=-1)
            uniform = uniform_from_counter((batch_size, k), seed, rounds * 4 + 1)
            keep = uniform * q_proposed < p_proposed
        else:
            choices = ops.cast(ops.argmax(p, axis=-1), "int32")
            keep = ops.equal(proposals, choices[:, :k])
        keep = ops.logical_or(keep, forced[:, :k])
        # Proposals kept in a row before its first rejection, per row; the
        # round keeps the fewest of any unfinished row.
        kept_per_row = ops.sum(ops.cumprod(ops.cast(keep, "int32"), axis=1), axis=1)
        kept = ops.min(ops.where(done, k, kept_per_row))
        # The token at position n + kept: the target's (its argmax, or a
        # draw from the residual max(0, p - q) at the first rejection, from p
        # after k kept proposals), a given token, or on rows that kept more,
        # their next proposal (already accepted).
        p_next = ops.take(p, kept, axis=1)
        if sampling:
            q_next = ops.take(ops.pad(q, [[0, 0], [0, 1], [0, 0]]), kept, axis=1)
            residual = ops.maximum(p_next - q_next, 0.0)
            # Numerically empty residuals (p == q) fall back on p itself.
            empty = ops.sum(residual, axis=-1, keepdims=True) <= 0.0
            residual = ops.where(empty, p_next, residual)
            own = draw(residual, rounds * (k + 1) + kept, 2)
        else:
            own = ops.cast(ops.argmax(p_next, axis=-1), "int32")
        padded_proposals = ops.pad(proposals, [[0, 0], [0, 1]])
        next_proposal = ops.take(padded_proposals, kept, axis=1)
        own = ops.where(kept_per_row > kept, next_proposal, own)
        # A gather, not a slice: TensorFlow's XLA makes a slice's start a
        # compile-time constant where it can, and this one depends on the
        # inputs (all of them then became constants, compiled per call).
        given_token = ops.take(tokens, n + kept, axis=1)
        own = ops.where(ops.take(forced, kept, axis=1), given_token, own)
        positions = ops.arange(k + 1, dtype="int32")[None, :]
        block = ops.where(positions < kept, padded_proposals, own[:, None])
        old = window(tokens, n, k + 1)
        new = positions <= kept
        block = ops.where(new, block, old)
        tokens = ops.slice_update(tokens, [0, n], block)
        if end_id is not None:
            ends = ops.logical_and(
                ops.logical_and(ops.equal(block, end_id), new),
                ops.logical_not(window(given, n, k + 1)),
            )
            done = ops.logical_or(done, ops.any(ends, axis=1))
        return (
            n + kept + 1,
            tokens,
            target_cache,
            draft_cache,
            done,
            rounds + 1,
            filled + ops.minimum(kept + 1, max_length - n),
            accepted + kept,
        )

    done = ops.zeros((batch_size,), "bool")
    zero = ops.convert_to_tensor(0, "int32")
    _, tokens, _, _, _, rounds, filled, accepted = ops.while_loop(
        cond,
        body,
        (
            ops.convert_to_tensor(start, "int32"),
            prompt,
            target_cache,
            draft_cache,
            done,
            zero,
            zero,
            zero,
        ),
        maximum_iterations=max_length - start,
    )
    tokens = tokens[:, :max_length]
    if end_id is not None:
        tokens = truncate_after_end(tokens, end_id, given[:, :max_length])
    return tokens, rounds, filled, accepted
