"""Reference models composed from `keras_attention.layers`."""

from keras_attention.models.rnn_seq2seq import RNNSeq2Seq
from keras_attention.models.seq2seq import Seq2Seq
from keras_attention.models.transformer import Transformer

__all__ = ["RNNSeq2Seq", "Seq2Seq", "Transformer"]
