"""The loop of speculative decoding (`speculative_fill`): rounds in which
the draft proposes `k` tokens and the target checks them in one pass; see
`keras_attention.decoding.speculative`."""

from keras import ops

from keras_attention.decoding.tokens import PAD_ID, truncate_after_end
from keras_attention.ops.random import uniform_from_counter


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
