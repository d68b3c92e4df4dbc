"""Greedy and beam-search decoding of encoder-decoder models, and sampling
from decoder-only language models.

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
"""

import numpy as np
from keras import ops, tree

from keras_attention._checks import check_positive_int
from keras_attention.utils.backend import compile_function

PAD_ID = 0
NEG_INF = -1e9


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


def sample(
    step_fn,
    cache,
    prompt,
    sampler="greedy",
    given=None,
    end_id=None,
    model=None,
    start=1,
):
    """Fills `prompt` token by token, greedily or with a keras-hub sampler.

    Position `t` (from `start` on) gets the sampler's pick from the logits of the
    token at `t - 1`, except where `given` is True: those tokens (a prompt)
    are kept, and fed to the model in turn, so that its cache holds them
    when the first token is picked.

    Args:
        step_fn: `(token_ids, cache, index) -> (logits, cache)`.
        cache: initial cache (nested tensors, batch on axis 0).
        prompt: int32 `(B, L)`: position 0 holds each row's first token.
        sampler: `"greedy"` (`greedy_fill`, written here: no keras-hub
            needed) or a `keras_hub.samplers.Sampler` (top-k, top-p, ...).
        given: optional bool `(B, L)`, the positions to keep.
        end_id: optional end token; sampling stops once every row has
            picked it.
        model: the model whose variables `step_fn` reads (a keras-hub
            sampler needs it on JAX).
        start: the first position to fill; the cache must already hold the
            tokens before `start - 1` (a prefilled prompt).

    Returns:
        int32 `(B, L)`: `prompt` with its positions filled in.
    """
    if _is_greedy(sampler):
        return greedy_fill(step_fn, cache, prompt, given, end_id, start)
    batch_size = ops.shape(prompt)[0]

    def next_logits(prompt, cache, index):
        previous = ops.squeeze(ops.slice(prompt, [0, index - 1], [batch_size, 1]), 1)
        logits, cache = step_fn(previous, cache, index - 1)
        return ops.cast(logits, "float32"), None, cache

    return sampler(
        next_logits,
        prompt,
        cache=cache,
        index=start,
        mask=given,
        stop_token_ids=None if end_id is None else (end_id,),
        model=model,
    )


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


def truncate_after_end(tokens, end_id, given=None):
    """Replaces every token after the first `end_id` of a row by padding;
    with `given` (bool, shaped like `tokens`), an `end_id` at a given
    position (in a prompt) does not count."""
    tokens = ops.cast(tokens, "int32")
    is_end = ops.equal(tokens, end_id)
    if given is not None:
        is_end = ops.logical_and(is_end, ops.logical_not(given))
    is_end = ops.cast(is_end, "int32")
    ends_before = ops.cumsum(is_end, axis=-1) - is_end
    return ops.where(ends_before > 0, PAD_ID, tokens)


def mean_log_probs(model, inputs, token_ids, batch_size=100, jit_compile=True):
    """The mean log-probability per token of generated sequences: how sure the
    model is of its own output.

    One teacher-forced forward pass gives every token's
    `log p(token | inputs, previous tokens)` at once: the model reads
    `[start] + tokens[:-1]` as its decoder inputs, so greedy and beam-search
    outputs (or any other sequence) are scored alike. The mean runs over the
    tokens up to and including the first `end_token_id` (all of them where a
    row has none); the padding after it is left out.

    Args:
        model: a model with `start_token_id` and `end_token_id` whose call
            maps `{**inputs, "decoder_token_ids": (B, T)}` to next-token
            logits `(B, T, V)` (`Transformer`, `RNNSeq2Seq`, `ShowAttendTell`).
        inputs: dict of the encoder inputs, N rows each:
            `{"encoder_token_ids": ...}` or `{"images": ...}`.
        token_ids: int `(N, T)`, as `generate` returns them.
        batch_size: rows per forward pass; the last batch is padded to it, so
            that XLA compiles the pass once per model and length.
        jit_compile: compile the forward pass with XLA.

    Returns:
        float32 numpy `(N,)`, each <= 0 (0 would be certainty).
    """
    check_positive_int("batch_size", batch_size)
    token_ids = np.asarray(token_ids, "int32")
    if token_ids.ndim != 2 or not token_ids.shape[1]:
        raise ValueError(
            "`token_ids` must have shape (rows, length) with length >= 1; "
            f"received {token_ids.shape}."
        )
    inputs = {name: np.asarray(value) for name, value in inputs.items()}
    rows = len(token_ids)
    for name, value in inputs.items():
        if len(value) != rows:
            raise ValueError(
                f"`inputs[{name!r}]` has {len(value)} rows and `token_ids` {rows}."
            )
    if not rows:
        return np.zeros((0,), "float32")
    start = np.full((rows, 1), model.start_token_id, "int32")
    decoder_ids = np.concatenate([start, token_ids[:, :-1]], axis=1)
    if not hasattr(model, "_log_prob_functions"):
        model._log_prob_functions = {}
    if jit_compile not in model._log_prob_functions:

        def token_log_probs(inputs, decoder_ids, targets):
            logits = model({**inputs, "decoder_token_ids": decoder_ids}, training=False)
            log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
            return ops.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]

        model._log_prob_functions[jit_compile] = compile_function(
            token_log_probs,
            [*model.trainable_variables, *model.non_trainable_variables],
            jit_compile=jit_compile,
        )
    function = model._log_prob_functions[jit_compile]

    def padded(array, begin):
        batch = array[begin : begin + batch_size]
        missing = batch_size - len(batch)
        return np.pad(batch, [(0, missing)] + [(0, 0)] * (batch.ndim - 1))

    outputs = []
    for begin in range(0, rows, batch_size):
        log_probs = function(
            {name: padded(value, begin) for name, value in inputs.items()},
            padded(decoder_ids, begin),
            padded(token_ids, begin),
        )
        outputs.append(np.asarray(log_probs, "float32")[: rows - begin])
    log_probs = np.concatenate(outputs)
    is_end = token_ids == model.end_token_id
    scored = (np.cumsum(is_end, axis=1) - is_end) == 0
    return (np.sum(log_probs * scored, axis=1) / np.sum(scored, axis=1)).astype(
        "float32"
    )


def _keras_hub():
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(
            "Sampling with keras-hub's samplers (top-k, top-p, random) needs "
            "keras-hub; install it with `pip install keras-hub` (or `pip install "
            "'keras-attention[apps]'`). Greedy generation (`sampler=\"greedy\"`) "
            "does not."
        ) from error
    return keras_hub


def _initial_tokens(batch_size, max_length, start_id):
    tokens = ops.zeros((batch_size, max_length + 1), "int32")
    start = ops.full((batch_size, 1), start_id, "int32")
    return ops.slice_update(tokens, [0, 0], start)


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


def prefill(model, token_ids, cache):
    """`model`'s decoder cache after the tokens `(B, T)` at positions
    `0..T-1`: in one pass through `model.call_with_cache` when it has one
    (queries at an offset into the cache, causal to the lower right), else
    token by token through `model.decode_step`."""
    if hasattr(model, "call_with_cache"):
        return model.call_with_cache(token_ids, cache, 0)[1]
    batch_size = ops.shape(token_ids)[0]

    def step(index, cache):
        token = ops.squeeze(ops.slice(token_ids, [0, index], [batch_size, 1]), 1)
        return model.decode_step(token, cache, index)[1]

    return ops.fori_loop(0, token_ids.shape[1], step, cache)


def check_prompt_ids(prompt_ids):
    """`prompt_ids` as a numpy integer array `(B, P)` of right-padded
    prompts, each with at least one token; a ValueError naming what was
    received otherwise."""
    prompt_ids = np.asarray(prompt_ids)
    if prompt_ids.ndim != 2 or not np.issubdtype(prompt_ids.dtype, np.integer):
        raise ValueError(
            "`prompt_ids` must be an integer array (batch, length); received "
            f"dtype {prompt_ids.dtype} and shape {prompt_ids.shape}."
        )
    if not prompt_ids.shape[1] or np.any(prompt_ids[:, 0] == PAD_ID):
        raise ValueError(
            "Every prompt needs at least one token: `prompt_ids[:, 0]` must "
            f"not be padding ({PAD_ID}); received shape {prompt_ids.shape}."
        )
    return prompt_ids


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


def _compiled(model, key, fn, jit_compile, variables=()):
    """`fn` compiled once per `key` for `model` (which it reads), kept on the
    model: a model's `generate` compiles once per shape and search."""
    if not hasattr(model, "_generate_functions"):
        model._generate_functions = {}
    if key not in model._generate_functions:
        model._generate_functions[key] = compile_function(
            fn,
            [*model.trainable_variables, *model.non_trainable_variables, *variables],
            jit_compile=jit_compile,
        )
    return model._generate_functions[key]


def _is_greedy(sampler):
    return isinstance(sampler, str) and sampler == "greedy"


def get_sampler(sampler):
    """A keras-hub sampler from a name (`"greedy"`, `"top_k"`, `"top_p"`,
    `"random"`, ...: `keras_hub.samplers.get`) or the sampler itself; needs
    keras-hub (`generate` and `sample` run `"greedy"` without it)."""
    samplers = _keras_hub().samplers
    if isinstance(sampler, samplers.Sampler):
        return sampler
    if not isinstance(sampler, str):
        raise ValueError(
            "`sampler` must be a keras-hub sampler or its name ('greedy', "
            f"'top_k', 'top_p', 'random'); received {sampler!r}."
        )
    try:
        resolved = samplers.get(sampler)
    except ValueError:
        resolved = None
    if not isinstance(resolved, samplers.Sampler):
        raise ValueError(
            f"Unknown `sampler`: {sampler!r}. Expected 'greedy', 'top_k', "
            "'top_p', 'random' or a keras-hub sampler."
        )
    return resolved


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
        check_positive_int("max_length", max_length)
        width = prompt_ids.shape[1]
        if max_length < width:
            raise ValueError(
                f"`max_length` must be from the prompt's length ({width}) on: "
                "the output holds the prompt; received "
                f"max_length={max_length}."
            )
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
        """`cache` after the tokens `(B, T)` at positions `0..T-1` (see the
        module's `prefill`)."""
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
