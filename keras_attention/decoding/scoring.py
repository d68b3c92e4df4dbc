"""How sure a model is of what a search produced: `mean_log_probs`."""

import numpy as np
from keras import ops

from keras_attention._checks import check_positive_int
from keras_attention.utils.backend import compile_function


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
