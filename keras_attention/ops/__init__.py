"""Pure functions on `keras.ops`: masks, score functions, masked softmax, attention,
positions inside attention, dropout."""

from keras_attention.ops import mods
from keras_attention.ops.attention import (
    apply_attention_weights,
    attention_path,
    attention_weights,
    dot_product_attention,
)
from keras_attention.ops.masks import (
    causal_mask,
    length_mask,
    merge_masks,
    padding_mask,
    sliding_window_mask,
)
from keras_attention.ops.merge import merge_attention
from keras_attention.ops.positions import (
    alibi_bias,
    alibi_slopes,
    relative_position_buckets,
    segment_positions,
)
from keras_attention.ops.random import dropout
from keras_attention.ops.scores import (
    SCORE_FUNCTIONS,
    additive_score,
    additive_score_from_projections,
    cosine_score,
    dot_score,
    general_score,
    get_score_function,
    location_score,
    scaled_dot_score,
)
from keras_attention.ops.softmax import masked_softmax

__all__ = [
    "SCORE_FUNCTIONS",
    "alibi_bias",
    "alibi_slopes",
    "apply_attention_weights",
    "attention_path",
    "attention_weights",
    "additive_score",
    "additive_score_from_projections",
    "causal_mask",
    "cosine_score",
    "dot_product_attention",
    "dot_score",
    "dropout",
    "general_score",
    "get_score_function",
    "length_mask",
    "location_score",
    "masked_softmax",
    "mods",
    "merge_attention",
    "merge_masks",
    "padding_mask",
    "relative_position_buckets",
    "scaled_dot_score",
    "segment_positions",
    "sliding_window_mask",
]
