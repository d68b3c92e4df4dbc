"""Keras attention layers, each built on `keras_attention.ops`."""

from keras_attention.layers.additive_attention import AdditiveAttention
from keras_attention.layers.attention_pooling import AttentionPooling
from keras_attention.layers.attention_rnn_cell import AttentionRNNCell
from keras_attention.layers.base_attention import ScoreAttention, WeightedScoreAttention
from keras_attention.layers.conditional_batch_normalization import (
    ConditionalBatchNormalization,
)
from keras_attention.layers.cosine_attention import CosineAttention
from keras_attention.layers.dot_product_attention import DotProductAttention
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.feed_forward import FeedForward
from keras_attention.layers.grouped_query_attention import GroupedQueryAttention
from keras_attention.layers.location_attention import LocationAttention
from keras_attention.layers.multi_head_attention import MultiHeadAttention
from keras_attention.layers.multiplicative_attention import MultiplicativeAttention
from keras_attention.layers.position_encoding import (
    PositionEmbedding,
    SinusoidalPositionEncoding,
)
from keras_attention.layers.relative_position_bias import RelativePositionBias
from keras_attention.layers.rotary_embedding import RotaryEmbedding
from keras_attention.layers.self_attention_2d import SelfAttention2D
from keras_attention.layers.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_attention.layers.transformer_decoder import TransformerDecoderBlock
from keras_attention.layers.transformer_encoder import TransformerEncoderBlock

__all__ = [
    "AdditiveAttention",
    "AttentionPooling",
    "AttentionRNNCell",
    "ConditionalBatchNormalization",
    "CosineAttention",
    "DotProductAttention",
    "Dropout",
    "FeedForward",
    "GroupedQueryAttention",
    "LocationAttention",
    "MultiHeadAttention",
    "MultiplicativeAttention",
    "PositionEmbedding",
    "RelativePositionBias",
    "RotaryEmbedding",
    "ScoreAttention",
    "SelfAttention2D",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "WeightedScoreAttention",
]
