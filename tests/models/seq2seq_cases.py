"""A small generated translation task: the target is the reversed source."""

import numpy as np

START, END, VOCABULARY = 2, 3, 20


def reversal_pairs(num_examples, max_length=8, seed=0):
    """Inputs, targets and sample weights of sequences of tokens 4..19 and
    their reversals, with `<start>` 2 and `<end>` 3 as in the translation
    pipeline."""
    rng = np.random.default_rng(seed)
    source = np.zeros((num_examples, max_length), "int32")
    decoder_in = np.zeros((num_examples, max_length + 1), "int32")
    target = np.zeros((num_examples, max_length + 1), "int32")
    for i, length in enumerate(rng.integers(3, max_length + 1, num_examples)):
        tokens = rng.integers(4, VOCABULARY, length)
        source[i, :length] = tokens
        decoder_in[i, 0] = START
        decoder_in[i, 1 : length + 1] = tokens[::-1]
        target[i, :length] = tokens[::-1]
        target[i, length] = END
    inputs = {"encoder_token_ids": source, "decoder_token_ids": decoder_in}
    return inputs, target, (target > 0).astype("float32")


def exact_match(generated, target):
    generated = np.asarray(generated)
    return float(
        np.mean([np.array_equal(g, t) for g, t in zip(generated, target, strict=True)])
    )
