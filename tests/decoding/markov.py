"""A step function whose next-token logits depend only on the previous
token, and the table whose greedy and beam-search outputs differ: the
searches' tests share them."""

import numpy as np
from keras import ops

START, END = 2, 3


def markov_step(table):
    """A step function whose next-token log-probabilities depend only on the
    previous token: `table[previous]`."""
    table = ops.convert_to_tensor(np.log(np.asarray(table, "float32") + 1e-9))

    def step(token_ids, cache, index):
        return ops.take(table, token_ids, axis=0), cache

    return step


# From <start>, token 4 is likely (0.6) but always leads to a poor
# continuation (0.3 each for 6 and 7); token 5 (0.4) leads to <end> for sure.
# Greedy picks 4 (best sequence probability 0.6 * 0.3 * 1 = 0.18); beam search
# finds 5, <end> (0.4).
TABLE = np.zeros((8, 8))
TABLE[START, 4], TABLE[START, 5] = 0.6, 0.4
TABLE[4, 6], TABLE[4, 7], TABLE[4, END] = 0.3, 0.3, 0.4
TABLE[5, END] = 1.0
TABLE[6, END] = TABLE[7, END] = 1.0
TABLE[END, END] = TABLE[0, 0] = 1.0
