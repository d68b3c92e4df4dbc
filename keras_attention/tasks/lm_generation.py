"""Continuing text with a character-level language model of `keras-attention
lm`: its samplers, its prompts, and speculative decoding with a draft model
(the texts, and its timing against greedy search)."""

import numpy as np

from keras_attention.data.language_modeling import decode_tokens
from keras_attention.data.pipeline import encode_texts
from keras_attention.data.tokenization import END_ID, PAD_ID
from keras_attention.names import LM_SAMPLERS
from keras_attention.tasks.common import ArgumentError

SAMPLERS = LM_SAMPLERS


def make_sampler(name="greedy", temperature=1.0, top_k=10, top_p=0.9, seed=None):
    """The keras-hub sampler called `name` (one of `SAMPLERS`)."""
    import keras_hub

    check_sampler(name)
    if name == "greedy":
        return keras_hub.samplers.GreedySampler(temperature=temperature)
    if name == "top_k":
        return keras_hub.samplers.TopKSampler(
            k=top_k, temperature=temperature, seed=seed
        )
    return keras_hub.samplers.TopPSampler(p=top_p, temperature=temperature, seed=seed)


def check_sampler(name):
    """Raises `ValueError` unless `name` is one of `SAMPLERS`."""
    if name not in SAMPLERS:
        raise ValueError(f"`sampler` must be one of {SAMPLERS}; received {name!r}.")


def continue_texts(
    model, prompts, max_length=None, sampler="greedy", draft=None, num_draft_tokens=4
):
    """Continues each prompt with a model that carries its tokenizer, as a
    new document (after the end-of-text token), until the model ends it or
    `max_length` characters (prompt included; default the model's
    `max_length`). Returns the texts, prompts included.

    With a `draft` model (a smaller GPT over the same characters), decodes
    greedily by speculative decoding (`speculative_generate`, with
    `num_draft_tokens` proposals per round): the same texts as greedy
    search in fewer passes of the model; `sampler` must then be greedy, and
    the default `max_length` leaves room for the proposals read past it."""
    if draft is not None:
        texts, _ = speculative_texts(
            model, draft, prompts, max_length, num_draft_tokens, sampler=sampler
        )
        return texts
    prompt_ids = prompt_token_ids(model, prompts, max_length or model.max_length)
    max_length = max_length or model.max_length
    tokens = np.asarray(model.generate(prompt_ids, max_length, sampler=sampler))
    return [decode_tokens(model.tokenizer, row) for row in tokens]


def prompt_token_ids(model, prompts, max_length):
    """The prompts' character ids `(B, P)` as `continue_texts` gives them to
    the model: each after the end-of-text token, right-padded to the
    longest; raises `ArgumentError` where they leave no room in
    `max_length`."""
    if model.tokenizer is None:
        raise ValueError(
            "This model has no tokenizer; train it with `keras-attention lm`, or "
            "pass `tokenizer=` when building it."
        )
    if max_length > model.max_length:
        raise ArgumentError(
            f"a length of {max_length:,} characters is more than the model "
            f"generates, {model.max_length:,}"
        )
    prompt_ids = encode_texts(list(prompts), model.tokenizer, max_length)
    lengths = np.sum(prompt_ids != PAD_ID, axis=1)
    if np.any(lengths >= max_length):
        raise ArgumentError(
            f"a prompt of {int(lengths.max())} characters leaves no room in the "
            f"{max_length} characters the model generates"
        )
    width = int(lengths.max()) + 1
    return np.concatenate(
        [np.full((len(prompt_ids), 1), END_ID, "int32"), prompt_ids[:, : width - 1]],
        axis=1,
    )


def speculative_length(model, draft, num_draft_tokens):
    """The longest output `speculative_generate` can give with these
    models: a round reads `num_draft_tokens - 1` positions past the output,
    which learned positions (a table of `max_length` rows) must reach."""
    limits = [m.position_limit for m in (model, draft)]
    reach = [limit - num_draft_tokens + 1 for limit in limits if limit is not None]
    return min([model.max_length, *reach])


def check_draft(model, draft):
    """Raises `ArgumentError` unless `draft` can propose tokens for `model`:
    a GPT with the same tokenizer (class and settings)."""
    from keras_attention.models import GPT

    if not isinstance(draft, GPT) or not isinstance(model, GPT):
        raise ArgumentError(
            "speculative decoding needs two GPT models (a cache by position); "
            f"received a {type(model).__name__} and a {type(draft).__name__} "
            "draft"
        )

    def settings(tokenizer):
        if tokenizer is None:
            return None
        config = dict(tokenizer.get_config())
        config.pop("name", None)
        return type(tokenizer).__name__, config

    if draft.vocabulary_size != model.vocabulary_size or (
        draft.tokenizer is not None
        and settings(draft.tokenizer) != settings(model.tokenizer)
    ):
        raise ArgumentError(
            f"the draft model's tokenizer ({draft.vocabulary_size} ids) is not the "
            f"model's ({model.vocabulary_size} ids): the draft must share it"
        )


def speculative_texts(
    model,
    draft,
    prompts,
    max_length=None,
    num_draft_tokens=4,
    temperature=None,
    seed=0,
    sampler="greedy",
):
    """`continue_texts` by speculative decoding: returns `(texts, stats)`,
    `stats` those of `speculative_generate` (greedy, or sampling at
    `temperature`); `sampler` other than greedy is refused (speculative
    decoding has no top-k or top-p)."""
    from keras_attention.decoding.speculative import speculative_generate

    if sampler != "greedy" and type(sampler).__name__ != "GreedySampler":
        raise ArgumentError(
            "speculative decoding (a draft model) decodes greedily here: give "
            "the greedy sampler"
        )
    check_draft(model, draft)
    longest = speculative_length(model, draft, num_draft_tokens)
    max_length = max_length or longest
    if max_length > longest:
        raise ArgumentError(
            f"a length of {max_length:,} characters is more than speculative "
            f"decoding with {num_draft_tokens} proposals reaches with these "
            f"models' positions, {longest:,}"
        )
    prompt_ids = prompt_token_ids(model, prompts, max_length)
    tokens, stats = speculative_generate(
        model,
        draft,
        prompt_ids,
        max_length,
        num_draft_tokens=num_draft_tokens,
        temperature=temperature,
        seed=seed,
    )
    tokens = np.asarray(tokens)
    return [decode_tokens(model.tokenizer, row) for row in tokens], stats


def time_speculative(model, draft, batches, max_length, num_draft_tokens, repeats):
    """`measure_speculative`'s figures over `batches` of prompt ids, each
    decoded both ways (compiled and run once first, then timed in turn
    `repeats` times); the times are the sums of the medians."""
    import time

    from keras_attention.decoding.speculative import speculative_generate

    totals = {"rounds": 0, "new_tokens": 0, "accepted": 0, "proposed": 0}
    seconds = {"plain": 0.0, "speculative": 0.0}
    same = True
    for prompt_ids in batches:

        def plain(prompt_ids=prompt_ids):
            return np.asarray(model.generate(prompt_ids, max_length, sampler="greedy"))

        def speculative(prompt_ids=prompt_ids):
            tokens, stats = speculative_generate(
                model, draft, prompt_ids, max_length, num_draft_tokens=num_draft_tokens
            )
            return np.asarray(tokens), stats

        expected = plain()
        tokens, stats = speculative()
        same = same and bool(np.array_equal(tokens, expected))
        for key in totals:
            totals[key] += stats[key]
        times = {"plain": [], "speculative": []}
        for _ in range(repeats):
            for name, function in (("plain", plain), ("speculative", speculative)):
                start = time.perf_counter()
                function()
                times[name].append(time.perf_counter() - start)
        for name in seconds:
            seconds[name] += float(np.median(times[name]))
    rounds = max(totals["rounds"], 1)
    return {
        **totals,
        "accepted_per_round": totals["accepted"] / rounds,
        "tokens_per_round": totals["new_tokens"] / rounds,
        "acceptance": totals["accepted"] / max(totals["proposed"], 1),
        "same_as_greedy": same,
        "seconds": seconds["speculative"],
        "plain_seconds": seconds["plain"],
        "speedup": seconds["plain"] / seconds["speculative"],
        "repeats": repeats,
    }


def measure_speculative(
    model,
    draft,
    prompts,
    max_length,
    num_draft_tokens=4,
    repeats=3,
    temperature=None,
    separately=False,
):
    """Speculative greedy decoding of `prompts` against the model's own greedy
    `generate` (both compiled; compiled and run once each first, then timed
    in turn `repeats` times, medians): returns a dict of the acceptance
    (accepted tokens per round, accepted / proposed, rounds), the wall
    times and the speed-up, whether the texts are the same, with
    `separately` the same figures for the prompts one at a time
    (`one_at_a_time`: a batch advances at its slowest row's pace), and with
    `temperature` the acceptance of speculative sampling at it."""
    check_draft(model, draft)
    prompt_ids = prompt_token_ids(model, prompts, max_length)
    result = {
        "num_draft_tokens": num_draft_tokens,
        "prompts": len(prompts),
        "max_length": max_length,
        **time_speculative(
            model, draft, [prompt_ids], max_length, num_draft_tokens, repeats
        ),
    }
    if separately and len(prompts) > 1:
        # Rows of the batch, padded alike: one compiled loop per first
        # position to fill, whatever the prompt's length.
        rows = [prompt_ids[i : i + 1] for i in range(len(prompt_ids))]
        result["one_at_a_time"] = time_speculative(
            model, draft, rows, max_length, num_draft_tokens, repeats
        )
    if temperature is not None:
        _, sampled = speculative_texts(
            model, draft, prompts, max_length, num_draft_tokens, temperature
        )
        result["sampling"] = {
            "temperature": temperature,
            "rounds": sampled["rounds"],
            "accepted": sampled["accepted"],
            "proposed": sampled["proposed"],
            "accepted_per_round": sampled["accepted"] / max(sampled["rounds"], 1),
            "acceptance": sampled["accepted"] / max(sampled["proposed"], 1),
        }
    return result
