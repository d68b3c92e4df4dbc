"""Sampling with keras-hub's samplers (top-k, top-p, random), or greedily
without keras-hub.

keras-hub comes with the `apps` extra and is imported only when a sampler
other than `"greedy"` is asked for.
"""

from keras import ops

from keras_attention.decoding.greedy import greedy_fill


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
