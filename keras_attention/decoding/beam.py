"""Beam search: the `beam_width` most probable prefixes at every step, with
a length penalty.

`beam_search` is the generic search (the cache repeated per beam and
gathered by the surviving beams); `ancestry_beam_search` gives the same
tokens without moving the cache, for a step that reads each beam's history
through its ancestry (`ancestry_attention_mask`). Both run `_beam_loop`.
"""

from keras import ops, tree

from keras_attention._checks import check_positive_int
from keras_attention.decoding.tokens import (
    PAD_ID,
    _initial_tokens,
    truncate_after_end,
)

NEG_INF = -1e9


def beam_search(
    step_fn,
    cache,
    batch_size,
    max_length,
    start_id,
    end_id,
    beam_width=4,
    length_penalty=0.6,
    reorder=None,
):
    """Decodes by keeping the `beam_width` most probable prefixes at each step.

    A beam that has produced `end_id` is finished: it is carried on unchanged
    (extended with padding at no cost) and competes with the open beams by its
    log-probability. At the end the best of the beams is chosen by
    `log p(Y) / lp(Y)` with the length penalty of Wu et al. (2016),
    `lp(Y) = ((5 + |Y|) / 6) ** length_penalty`; `length_penalty=0` compares raw
    log-probabilities, which favours short outputs.

    This is the generic search: the cache is repeated per beam (`B * k` rows)
    and, at every step, the rows of every reordered cache tensor are gathered
    by the surviving beams' parents. A model whose step can attend over its
    beams' shared history (the `Transformer`) is searched by
    `ancestry_beam_search` instead, which gathers no cache at all (see
    `GenerationMixin.generate`).

    Args:
        step_fn: `(token_ids, cache, index) -> (logits, cache)`.
        cache: initial cache for the B sources; it is repeated per beam.
        batch_size: B.
        max_length: number of tokens to generate at most.
        start_id: the `<start>` token.
        end_id: the `<end>` token.
        beam_width: number of beams (1 is greedy search).
        length_penalty: the exponent alpha of `lp(Y)`, >= 0.
        reorder: optional structure of bools shaped like `cache`: False marks
            a tensor that is the same for all the beams of a source (an RNN's
            encoder outputs and their projections); it is repeated per beam
            but never gathered (a gather within a source would not change
            it). Default: every tensor is reordered.

    Returns:
        int32 `(B, max_length)`: the best beam's tokens after `<start>`, with
        `end_id` kept and padding after it.

    References:
        - [Wu et al., 2016](https://arxiv.org/abs/1609.08144) (length penalty)
    """
    _check_beam_arguments(max_length, beam_width, length_penalty)
    k = beam_width
    cache = tree.map_structure(lambda x: ops.repeat(x, k, axis=0), cache)
    if reorder is None:
        reorder = tree.map_structure(lambda x: True, cache)

    def gather(cache, parent, flat_parent):
        return tree.map_structure(
            lambda x, moved: ops.take(x, flat_parent, axis=0) if moved else x,
            cache,
            reorder,
        )

    return _beam_loop(
        step_fn,
        cache,
        gather,
        batch_size,
        max_length,
        start_id,
        end_id,
        k,
        length_penalty,
    )


def ancestry_beam_search(
    step_fn,
    cache,
    batch_size,
    max_length,
    start_id,
    end_id,
    beam_width=4,
    length_penalty=0.6,
):
    """Beam search that never reorders the cache: the same tokens as
    `beam_search`, for a step that reads its beams' histories through their
    ancestry.

    The `k` beams of a source are `k` queries of one sequence. The step
    writes the `k` beams' new keys/values at step `index` into one cache row
    per source, position-major (slot `j * k + s` holds position `j` of beam
    slot `s`: one slice update at `index * k`), and never moves them. After
    each step the surviving beams may descend from any beam slot, so what is
    reordered is only their `ancestry`, int32 `(B, k, max_length)`:
    `ancestry[b, q, j]` is the beam slot that wrote the token of beam `q`'s
    history at position `j` (`q` itself at position `index`, -1 past it).
    `ancestry_attention_mask` turns it into the self-attention mask
    `(B, k, max_length * k)` of the step; what is the same for a source's
    beams (the encoder output, its cross-attention keys/values) stays one
    row per source. Per step the search moves `max_length` int32 per beam
    (and the tokens), where `beam_search` gathers every cache tensor.

    The ranking, the finished beams and the length penalty are
    `beam_search`'s (one shared loop): on the same logits both pick the same
    tokens.

    Args:
        step_fn: `(token_ids, cache, index, ancestry) -> (logits, cache)` with
            `token_ids` int32 `(B, k)` (each beam's previous token, all at
            target position `index`), `ancestry` int32 `(B, k, max_length)`
            and `logits` `(B, k, V)`.
        cache: the initial cache of the B sources, as the step reads it (not
            repeated per beam).
        batch_size: B.
        max_length: number of tokens to generate at most.
        start_id: the `<start>` token.
        end_id: the `<end>` token.
        beam_width: number of beams, `k`.
        length_penalty: the exponent alpha of the length penalty, >= 0 (as
            in `beam_search`).

    Returns:
        int32 `(B, max_length)`, as `beam_search` returns it.
    """
    _check_beam_arguments(max_length, beam_width, length_penalty)
    k = beam_width
    own_slot = ops.broadcast_to(
        ops.arange(k, dtype="int32")[None, :, None], (batch_size, k, 1)
    )
    ancestry = ops.full((batch_size, k, max_length), -1, "int32")

    def step(previous, state, index):
        cache, ancestry = state
        ancestry = ops.slice_update(ancestry, [0, 0, index], own_slot)
        logits, cache = step_fn(
            ops.reshape(previous, (batch_size, k)), cache, index, ancestry
        )
        logits = ops.reshape(logits, (batch_size * k, ops.shape(logits)[-1]))
        return logits, (cache, ancestry)

    def follow(state, parent, flat_parent):
        cache, ancestry = state
        parent = ops.broadcast_to(parent[:, :, None], (batch_size, k, max_length))
        return cache, ops.take_along_axis(ancestry, parent, axis=1)

    return _beam_loop(
        step,
        (cache, ancestry),
        follow,
        batch_size,
        max_length,
        start_id,
        end_id,
        k,
        length_penalty,
    )


def ancestry_attention_mask(ancestry, beam_width):
    """The self-attention mask of `ancestry_beam_search`'s step: bool
    `(B, k, L * k)`, True at slot `j * k + s` where beam `q`'s token at
    position `j` was written by beam slot `s` (`ancestry[b, q, j] == s`):
    its own history and its own new token, nothing past `index`."""
    batch_size, k, length = ops.shape(ancestry)
    slots = ops.arange(beam_width, dtype="int32")
    mask = ops.equal(ancestry[..., None], slots)
    return ops.reshape(mask, (batch_size, k, length * beam_width))


def _check_beam_arguments(max_length, beam_width, length_penalty):
    check_positive_int("max_length", max_length)
    check_positive_int("beam_width", beam_width)
    if length_penalty < 0:
        raise ValueError(f"`length_penalty` must be >= 0; received {length_penalty}.")


def _beam_loop(
    step, state, reorder, batch_size, max_length, start_id, end_id, k, length_penalty
):
    """The loop of both beam searches: `step(previous (B*k,), state, index)
    -> (logits (B*k, V), state)` and `reorder(state, parent (B, k), flat_parent
    (B*k,)) -> state` after the beams are chosen (parent: the beam slot each
    new beam extends, within its source; flat_parent: its row)."""
    flat = batch_size * k
    tokens = _initial_tokens(flat, max_length, start_id)
    # Only the first beam of each source is live at the start, so the first
    # step does not pick k copies of the same token.
    scores = ops.reshape(
        ops.tile(ops.array([[0.0] + [NEG_INF] * (k - 1)], "float32"), (batch_size, 1)),
        (flat,),
    )
    finished = ops.zeros((flat,), "bool")
    batch_offsets = ops.repeat(ops.arange(batch_size, dtype="int32") * k, k)

    def cond(index, tokens, state, scores, finished):
        return ops.logical_not(ops.all(finished))

    def body(index, tokens, state, scores, finished):
        previous = ops.squeeze(ops.slice(tokens, [0, index], [flat, 1]), 1)
        logits, state = step(previous, state, index)
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        vocab = ops.shape(log_probs)[-1]
        # float32 constants: two Python floats would take floatx, and NEG_INF
        # overflows float16 (to -inf).
        only_padding = ops.where(
            ops.arange(vocab, dtype="int32") == PAD_ID,
            ops.convert_to_tensor(0.0, "float32"),
            ops.convert_to_tensor(NEG_INF, "float32"),
        )
        log_probs = ops.where(finished[:, None], only_padding[None, :], log_probs)
        candidates = ops.reshape(scores[:, None] + log_probs, (batch_size, k * vocab))
        top_scores, top_indices = ops.top_k(candidates, k)
        top_indices = ops.cast(top_indices, "int32")
        parent = top_indices // vocab
        flat_parent = ops.reshape(parent, (flat,)) + batch_offsets
        new_token = ops.reshape(top_indices % vocab, (flat, 1))
        tokens = ops.take(tokens, flat_parent, axis=0)
        tokens = ops.slice_update(tokens, [0, index + 1], new_token)
        state = reorder(state, parent, flat_parent)
        finished = ops.logical_or(
            ops.take(finished, flat_parent, axis=0), ops.equal(new_token[:, 0], end_id)
        )
        return index + 1, tokens, state, ops.reshape(top_scores, (flat,)), finished

    _, tokens, _, scores, _ = ops.while_loop(
        cond,
        body,
        (ops.convert_to_tensor(0, "int32"), tokens, state, scores, finished),
        maximum_iterations=max_length,
    )
    tokens = truncate_after_end(tokens[:, 1:], end_id)
    lengths = ops.sum(ops.cast(ops.not_equal(tokens, PAD_ID), "float32"), axis=-1)
    penalty = ops.power((5.0 + lengths) / 6.0, float(length_penalty))
    normalized = ops.reshape(scores / penalty, (batch_size, k))
    best = ops.argmax(normalized, axis=-1)
    tokens = ops.reshape(tokens, (batch_size, k, max_length))
    return ops.take_along_axis(tokens, best[:, None, None], axis=1)[:, 0]
