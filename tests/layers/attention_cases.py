"""The score-function layers, each with a small config, for shared tests."""

import numpy as np

from keras_attention import layers
from tests.layer_test import run_layer_test

MAX_LENGTH = 9

FACTORIES = {
    "dot": lambda **kw: layers.DotProductAttention(**kw),
    "scaled_dot": lambda **kw: layers.DotProductAttention(scale=True, **kw),
    "multiplicative": lambda **kw: layers.MultiplicativeAttention(**kw),
    "additive": lambda **kw: layers.AdditiveAttention(units=6, use_bias=True, **kw),
    "cosine": lambda **kw: layers.CosineAttention(sharpness=4.0, **kw),
    "location": lambda **kw: layers.LocationAttention(
        max_length=MAX_LENGTH, use_bias=True, **kw
    ),
}
# Layers whose scores do not depend on the key positions' contents.
POSITION_BASED = {"location"}

B, T, S, D = 2, 4, 6, 5
_rng = np.random.default_rng(0)
QUERY = _rng.normal(size=(B, T, D)).astype("float32")
VALUE = _rng.normal(size=(B, S, D)).astype("float32")
# Example 0 pads its last query and last two values; example 1 masks every
# value, so that its queries have nothing to attend to.
QUERY_MASK = np.array([[True, True, True, False], [True] * T])
VALUE_MASK = np.array([[True] * (S - 2) + [False] * 2, [False] * S])


def run_score_layer_test(layer_cls, **init_kwargs):
    """The layer contract (tests/layer_test.py) of a score-attention layer,
    with dropout: `[query, value]` with the weights returned, masked by
    QUERY_MASK and VALUE_MASK. A padded query and a query with no value to
    attend to give zero outputs, and the latter zero weights."""
    return run_layer_test(
        layer_cls,
        {"dropout": 0.1, "seed": 3, **init_kwargs},
        [QUERY, VALUE],
        {"return_attention_scores": True},
        expected_output_shape=[(B, T, D), (B, T, S)],
        masks={"mask": [QUERY_MASK, VALUE_MASK]},
        masked_zeros=lambda out: (out[0][0, T - 1], out[0][1], out[1][1]),
    )
