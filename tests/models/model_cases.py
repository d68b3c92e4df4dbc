"""Tiny configurations of the reference models, shared by the model tests
and tests/test_safe_loading.py."""

from keras_attention.models import (
    GPT,
    SAGAN,
    BagOfEmbeddingsClassifier,
    BiLSTMClassifier,
    HierarchicalAttentionNetwork,
    LSTMLanguageModel,
    RNNSeq2Seq,
    ShowAttendTell,
    Transformer,
    TransformerClassifier,
)
from tests.models.seq2seq_cases import VOCABULARY as SEQ2SEQ_VOCABULARY

# -- translators (the reversal task of seq2seq_cases) -------------------------


def tiny_transformer(**kwargs):
    config = {
        "hidden_dim": 32,
        "num_heads": 2,
        "num_encoder_layers": 1,
        "num_decoder_layers": 1,
        "intermediate_dim": 64,
        "dropout": 0.0,
        "max_source_length": 8,
        "max_target_length": 9,
    }
    return Transformer(SEQ2SEQ_VOCABULARY, SEQ2SEQ_VOCABULARY, **{**config, **kwargs})


def tiny_rnn_seq2seq(attention="bahdanau", **kwargs):
    return RNNSeq2Seq(
        SEQ2SEQ_VOCABULARY,
        SEQ2SEQ_VOCABULARY,
        embedding_dim=16,
        units=32,
        attention=attention,
        dropout=0.0,
        max_source_length=8,
        max_target_length=9,
        **kwargs,
    )


# -- language models -----------------------------------------------------------

LM_VOCABULARY = 20


def tiny_gpt(**kwargs):
    sizes = {
        "hidden_dim": 16,
        "num_heads": 2,
        "num_layers": 2,
        "intermediate_dim": 32,
        "dropout": 0.0,
    }
    return GPT(LM_VOCABULARY, max_length=16, **{**sizes, **kwargs})


def tiny_lstm_lm(**kwargs):
    sizes = {"hidden_dim": 16, "num_layers": 2, "dropout": 0.0}
    return LSTMLanguageModel(LM_VOCABULARY, max_length=16, **{**sizes, **kwargs})


# -- text classifiers (keyword_task documents) --------------------------------

CLASSIFIER_VOCABULARY = 40
CLASSES = 3
LENGTH = 12
SENTENCES = 3


def transformer_classifier(pooling="mean", **kwargs):
    sizes = {"hidden_dim": 32, "num_heads": 2, "num_layers": 1, "dropout": 0.0}
    return TransformerClassifier(
        CLASSIFIER_VOCABULARY,
        CLASSES,
        max_length=LENGTH,
        intermediate_dim=64,
        pooling=pooling,
        **{**sizes, **kwargs},
    )


def han(**kwargs):
    sizes = {"embedding_dim": 16, "word_units": 16, "sentence_units": 16}
    return HierarchicalAttentionNetwork(
        CLASSIFIER_VOCABULARY,
        CLASSES,
        max_sentences=SENTENCES,
        max_words=LENGTH,
        **{**sizes, "dropout": 0.0, **kwargs},
    )


def bilstm(**kwargs):
    sizes = {"embedding_dim": 16, "units": 16, "dropout": 0.0}
    return BiLSTMClassifier(CLASSIFIER_VOCABULARY, CLASSES, **{**sizes, **kwargs})


def bag(**kwargs):
    sizes = {"embedding_dim": 16, "dropout": 0.0}
    return BagOfEmbeddingsClassifier(
        CLASSIFIER_VOCABULARY, CLASSES, **{**sizes, **kwargs}
    )


# -- captioner (random 16x16 grey images) -------------------------------------

CAPTION_VOCABULARY = 12
IMAGE_SHAPE = (16, 16, 1)


def captioner(**kwargs):
    sizes = {
        "image_shape": IMAGE_SHAPE,
        "encoder_filters": (4, 8),
        "embedding_dim": 8,
        "units": 16,
        "attention_units": 8,
        "dropout": 0.0,
        "max_caption_length": 5,
    }
    return ShowAttendTell(CAPTION_VOCABULARY, **{**sizes, **kwargs})


# -- GAN (8x8 grey images) -----------------------------------------------------

TINY_SAGAN = {
    "image_shape": (8, 8, 1),
    "latent_dim": 16,
    "generator_width": 8,
    "discriminator_width": 8,
    "attention_resolution": 4,
}


def tiny_sagan(**kwargs):
    return SAGAN(**{**TINY_SAGAN, **kwargs})
