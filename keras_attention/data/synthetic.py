"""Small generated sequence tasks whose correct alignment is known."""

import numpy as np

from keras_attention._checks import check_positive_int

PAD_ID = 0
DIGIT_OFFSET = 1  # digit d has token id d + 1
START_ID = 11
VOCABULARY_SIZE = 12


def reversal_task(num_examples, min_length=4, max_length=12, seed=0):
    """Digit strings and their reversals: output step t must attend to input
    position `length - 1 - t`, so a correct alignment is the anti-diagonal.

    Token ids: 0 = padding, 1..10 = digits 0..9, 11 = `<start>`.

    Args:
        num_examples: number of sequences.
        min_length: shortest sequence.
        max_length: longest sequence (arrays are padded to it).
        seed: random seed (the task is deterministic given it).

    Returns:
        dict with int32 arrays `encoder_tokens` `(N, max_length)`,
        `decoder_inputs` (`<start>` + target shifted right) and
        `decoder_targets`, both `(N, max_length)`.
    """
    check_positive_int("num_examples", num_examples)
    check_positive_int("min_length", min_length)
    check_positive_int("max_length", max_length)
    if min_length > max_length:
        raise ValueError(
            f"`min_length` ({min_length}) must not exceed `max_length` ({max_length})."
        )
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, size=num_examples)
    encoder = np.zeros((num_examples, max_length), "int32")
    targets = np.zeros_like(encoder)
    decoder_inputs = np.zeros_like(encoder)
    for i, length in enumerate(lengths):
        digits = rng.integers(0, 10, size=length) + DIGIT_OFFSET
        encoder[i, :length] = digits
        targets[i, :length] = digits[::-1]
        decoder_inputs[i, 0] = START_ID
        decoder_inputs[i, 1:length] = digits[::-1][:-1]
    return {
        "encoder_tokens": encoder,
        "decoder_inputs": decoder_inputs,
        "decoder_targets": targets,
    }


def digits_to_text(token_ids):
    """Readable labels for digit token ids (padding dropped)."""
    labels = []
    for token in np.asarray(token_ids).tolist():
        if token == PAD_ID:
            continue
        labels.append("<s>" if token == START_ID else str(token - DIGIT_OFFSET))
    return labels
