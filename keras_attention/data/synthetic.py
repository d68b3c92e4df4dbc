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


KEYWORD_OFFSET = 4  # class c's keyword has token id c + 4 (ids 1-3 stay unused)


def keyword_task(
    num_examples,
    num_classes=3,
    vocabulary_size=40,
    min_length=4,
    max_length=16,
    num_sentences=None,
    seed=0,
):
    """Random filler tokens with one class keyword hidden among them: the
    label is the keyword's class, so a classifier must find that one token,
    and an attention model that has learned the task attends to it.

    Token ids: 0 = padding, `KEYWORD_OFFSET + c` = the keyword of class `c`,
    the ids from `KEYWORD_OFFSET + num_classes` to `vocabulary_size - 1` =
    filler.

    Args:
        num_examples: number of texts.
        num_classes: number of classes (and keywords).
        vocabulary_size: number of token ids.
        min_length: fewest tokens of a text (of a sentence with
            `num_sentences`).
        max_length: most tokens of a text (of a sentence with
            `num_sentences`); arrays are padded to it.
        num_sentences: None for flat texts `(N, max_length)`; else documents
            of 1 to `num_sentences` sentences, `(N, num_sentences,
            max_length)`, with the keyword in one of them.
        seed: random seed (the task is deterministic given it).

    Returns:
        dict with int32 `token_ids`, int32 `labels` `(N,)` and
        `keyword_positions` `(N, rank - 1)`: the index of each keyword within
        its text (sentence, word for documents).
    """
    for name, value in (
        ("num_examples", num_examples),
        ("num_classes", num_classes),
        ("min_length", min_length),
        ("max_length", max_length),
    ):
        check_positive_int(name, value)
    check_positive_int("num_sentences", num_sentences, allow_none=True)
    if min_length > max_length:
        raise ValueError(
            f"`min_length` ({min_length}) must not exceed `max_length` ({max_length})."
        )
    first_filler = KEYWORD_OFFSET + num_classes
    if vocabulary_size <= first_filler:
        raise ValueError(
            f"`vocabulary_size` must exceed {first_filler} (the keywords of "
            f"{num_classes} classes plus reserved ids) to leave filler tokens; "
            f"received vocabulary_size={vocabulary_size}."
        )
    rng = np.random.default_rng(seed)
    rows = num_sentences or 1
    token_ids = np.zeros((num_examples, rows, max_length), "int32")
    labels = rng.integers(0, num_classes, size=num_examples).astype("int32")
    positions = np.zeros((num_examples, 2), "int32")
    for i, label in enumerate(labels):
        used_rows = rng.integers(1, rows + 1)
        for r in range(used_rows):
            length = rng.integers(min_length, max_length + 1)
            token_ids[i, r, :length] = rng.integers(
                first_filler, vocabulary_size, size=length
            )
        row = rng.integers(0, used_rows)
        column = rng.integers(0, np.count_nonzero(token_ids[i, row]))
        token_ids[i, row, column] = KEYWORD_OFFSET + label
        positions[i] = row, column
    if num_sentences is None:
        return {
            "token_ids": token_ids[:, 0],
            "labels": labels,
            "keyword_positions": positions[:, 1:],
        }
    return {"token_ids": token_ids, "labels": labels, "keyword_positions": positions}
