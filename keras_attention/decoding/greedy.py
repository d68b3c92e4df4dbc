"""Greedy search: the most probable token at every step.

`greedy_fill` is the loop (it also continues prompts, keeping their given
tokens); `greedy_search` runs it from `<start>` for an encoder-decoder
model's step function.
"""

from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.decoding.tokens import _initial_tokens, truncate_after_end


def greedy_search(step_fn, cache, batch_size, max_length, start_id, end_id, model=None):
    """Decodes by taking the most probable token at every step.

    Args:
        step_fn: `(token_ids, cache, index) -> (logits, cache)`.
        cache: initial cache (nested tensors, batch on axis 0).
        batch_size: B.
        max_length: number of tokens to generate at most.
        start_id: the `<start>` token fed first.
        end_id: the `<end>` token; decoding stops once every row produced it.
        model: unused: the search reads the model's variables only through
            `step_fn`. Accepted so that calls written for the keras-hub
            sampler this search replaced still work.

    Returns:
        int32 `(B, max_length)`: the tokens after `<start>`, with `end_id`
        kept and padding (0) after it.
    """
    del model
    check_positive_int("max_length", max_length)
    prompt = _initial_tokens(batch_size, max_length, start_id)
    tokens = greedy_fill(step_fn, cache, prompt, end_id=end_id)
    return truncate_after_end(tokens[:, 1:], end_id)


def greedy_fill(step_fn, cache, prompt, given=None, end_id=None, start=1):
    """Fills `prompt` token by token with the most probable token.

    Position `t` (from `start` on) gets the argmax of the logits of the token at
    `t - 1`, except where `given` is True: those tokens (a prompt) are kept
    and fed to the model in turn, so that its cache holds them when the first
    token is picked. The argmax is taken over the float32 probabilities, as
    keras-hub's `GreedySampler` takes it (the softmax can round two nearly
    equal logits to one probability, and the first of them wins), so both
    pick the same tokens.

    The loop is one `ops.while_loop`: at most `L - 1` steps, and fewer where
    every row has produced `end_id` at a position it was not given.

    Args:
        step_fn: `(token_ids, cache, index) -> (logits, cache)`.
        cache: initial cache (nested tensors, batch on axis 0).
        prompt: int32 `(B, L)`: position 0 holds each row's first token.
        given: optional bool `(B, L)`, the positions to keep.
        end_id: optional end token; the loop stops once every row has
            picked it.
        start: the first position to fill; the cache must already hold the
            tokens before `start - 1` (a prefilled prompt).

    Returns:
        int32 `(B, L)`: `prompt` with its positions filled in; after a row's
        end token the loop may have gone on filling it (for the rows still
        open): `truncate_after_end` pads it.
    """
    prompt = ops.cast(prompt, "int32")
    batch_size, length = ops.shape(prompt)[0], prompt.shape[1]
    if given is None:
        given = ops.zeros_like(prompt, "bool")
    given = ops.cast(given, "bool")

    def column(x, index):
        return ops.squeeze(ops.slice(x, [0, index], [batch_size, 1]), 1)

    def is_new_end(token_ids, kept):
        if end_id is None:
            return ops.zeros_like(kept)
        return ops.logical_and(ops.equal(token_ids, end_id), ops.logical_not(kept))

    # An end token already at a position not given (the start token, where
    # start and end are one token) ends its row at once, as in keras-hub's
    # sampler.
    done = ops.any(is_new_end(prompt, given), axis=-1)

    def cond(index, tokens, cache, done):
        return ops.logical_not(ops.all(done))

    def body(index, tokens, cache, done):
        logits, cache = step_fn(column(tokens, index - 1), cache, index - 1)
        probabilities = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        picked = ops.cast(ops.argmax(probabilities, axis=-1), "int32")
        kept = column(given, index)
        token_ids = ops.where(kept, column(tokens, index), picked)
        tokens = ops.slice_update(tokens, [0, index], token_ids[:, None])
        done = ops.logical_or(done, is_new_end(token_ids, kept))
        return index + 1, tokens, cache, done

    _, tokens, _, _ = ops.while_loop(
        cond,
        body,
        (ops.convert_to_tensor(start, "int32"), prompt, cache, done),
        maximum_iterations=length - start,
    )
    return tokens
