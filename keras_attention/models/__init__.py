"""Reference models composed from `keras_attention.layers`."""

from keras_attention.models.gpt import GPT
from keras_attention.models.hierarchical_attention_network import (
    HierarchicalAttentionNetwork,
)
from keras_attention.models.language_model import LanguageModel
from keras_attention.models.layout_map import transformer_layout_map
from keras_attention.models.rnn_seq2seq import RNNSeq2Seq
from keras_attention.models.sagan import (
    SAGAN,
    generator_attention,
    generator_inputs,
    sagan_discriminator,
    sagan_generator,
    sample_images,
)
from keras_attention.models.seq2seq import Seq2Seq
from keras_attention.models.show_attend_tell import ShowAttendTell
from keras_attention.models.text_baselines import (
    BagOfEmbeddingsClassifier,
    BiLSTMClassifier,
    LSTMLanguageModel,
)
from keras_attention.models.text_classifier import TextClassifier
from keras_attention.models.transformer import Transformer
from keras_attention.models.transformer_classifier import (
    TransformerClassifier,
    TransformerTextEncoder,
)

__all__ = [
    "BagOfEmbeddingsClassifier",
    "BiLSTMClassifier",
    "GPT",
    "HierarchicalAttentionNetwork",
    "LSTMLanguageModel",
    "LanguageModel",
    "RNNSeq2Seq",
    "SAGAN",
    "Seq2Seq",
    "ShowAttendTell",
    "TextClassifier",
    "Transformer",
    "TransformerClassifier",
    "TransformerTextEncoder",
    "generator_attention",
    "generator_inputs",
    "sagan_discriminator",
    "sagan_generator",
    "sample_images",
    "transformer_layout_map",
]
