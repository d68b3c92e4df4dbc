"""Token arrays of the searches: the padding id, the first column of a
search (`<start>`), the padding after a row's end token, and the prompts
that `generate` takes, checked."""

import numpy as np
from keras import ops

from keras_attention._checks import check_positive_int

PAD_ID = 0


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


def _initial_tokens(batch_size, max_length, start_id):
    tokens = ops.zeros((batch_size, max_length + 1), "int32")
    start = ops.full((batch_size, 1), start_id, "int32")
    return ops.slice_update(tokens, [0, 0], start)


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


def check_output_length(max_length, prompt_ids):
    """Raises a ValueError unless `max_length`, the length of a search's
    output, is a positive integer from the length of the checked
    `prompt_ids` (`check_prompt_ids`) on: the output holds the prompts."""
    check_positive_int("max_length", max_length)
    width = prompt_ids.shape[1]
    if max_length < width:
        raise ValueError(
            f"`max_length` must be from the prompt's length ({width}) on: "
            "the output holds the prompt; received "
            f"max_length={max_length}."
        )
