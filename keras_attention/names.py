"""The names the applications accept: each task's models and data, the
samplers, the strategies, the benchmark suites, the saved models each
subcommand reads.

Standard library only, and imported by both sides: the tasks, `bench` and
`distribute` take their lists from here, and the command line checks its
arguments against them before it imports Keras or TensorFlow (the console
script loads this file without importing the package, whose import loads
Keras).
"""

TRANSLATION_MODELS = (
    "transformer",
    "transformer-base",
    "rnn",
    "rnn-bahdanau",
    "rnn-luong-dot",
    "rnn-luong-general",
    "rnn-luong-concat",
    "rnn-location",
)
TRANSLATION_DATA = ("dates", "de-en", "messages-de")
CLASSIFICATION_MODELS = ("transformer", "han", "bilstm", "bag")
# What `classify`'s early stopping and kept weights can follow: the
# validation loss, or the validation macro-F1, which does not favour the
# least confident model when one class dominates a small labelled set.
CLASSIFICATION_MONITORS = ("val_loss", "val_macro_f1")
CLASSIFICATION_DATA = ("reviews", "fortunes")
CAPTION_MODELS = ("attention", "no-attention")
CAPTION_DATA = ("scenes",)
GAN_DATA = ("fashion-mnist", "fashion-pairs", "mnist", "digits")
# The side of each built-in image set's images (`labelled_images.IMAGE_SETS`),
# so that `gan --attention-resolution` is checked before Keras is imported.
GAN_IMAGE_SIZES = {"fashion-mnist": 32, "fashion-pairs": 64, "mnist": 32, "digits": 8}
LM_MODELS = ("gpt", "lstm")
LM_DATA = ("fortunes",)
LM_SAMPLERS = ("greedy", "top_k", "top_p")
# GPT's sizes in `lm`, which `--width`, `--heads` and `--blocks` change:
# 0.84 M parameters, which the LSTM matches with 2 layers of 225 units.
LM_GPT_SIZES = {
    "hidden_dim": 128,
    "num_heads": 4,
    "num_layers": 4,
    "intermediate_dim": 512,
}
# The character ids of `lm`'s models (ASCII; the fortunes' other characters,
# 47 of 2.6 million, share id 127): a --draft model must have as many.
LM_VOCABULARY_SIZE = 128
PRETRAIN_EXTRA_TEXTS = ("fortunes", "bible", "messages")
# `all` runs every suite but `gpu` (`keras_attention.bench.ALL_SUITES`).
BENCH_SUITES = (
    "attention",
    "mods",
    "seq2seq",
    "decode",
    "xla",
    "layers",
    "scaling",
    "gpu",
)

TF_STRATEGIES = ("mirrored", "multi-worker", "tpu")
KERAS_DISTRIBUTIONS = ("data-parallel", "model-parallel")
STRATEGIES = ("default", *TF_STRATEGIES, *KERAS_DISTRIBUTIONS)

# The train steps that `keras-attention bench --suite xla` measured slower
# with XLA than as a TensorFlow graph on a CPU (time with XLA / without, three
# runs on a 2-core AMD EPYC, November 2026): the HAN 1.01-1.13, the captioner
# 1.02-1.03, the SAGAN 1.20-1.31. Their GRUs, LSTM cells and convolutions run
# TensorFlow's own CPU kernels in a graph. Every other model trains faster with
# XLA there (1.1-2.6x), and accelerators always compile. The LSTM language
# model was timed alone (not by the suite): at the `lm` subcommand's sizes
# (batch 32 x 256 characters, 2 x 224 units) 2.17 s per step with XLA, 0.92
# without, on the same machine; its GPT takes 0.56 with XLA, 1.03 without.
# There, training runs them without XLA unless told otherwise.
SLOWER_WITH_XLA_ON_CPU = ("classify/han", "caption/attention", "gan/sagan", "lm/lstm")

# The model classes that each subcommand's `--load` reads, by the
# `registered_name` (or, for functional models, the name) in a `.keras`
# archive's config.json.
LOADABLE_MODELS = {
    "translate": ("keras_attention>Transformer", "keras_attention>RNNSeq2Seq"),
    "classify": (
        "keras_attention>TransformerClassifier",
        "keras_attention>HierarchicalAttentionNetwork",
        "keras_attention>BiLSTMClassifier",
        "keras_attention>BagOfEmbeddingsClassifier",
    ),
    "caption": ("keras_attention>ShowAttendTell",),
    "gan": ("generator", "ema_generator"),
    "lm": ("keras_attention>GPT", "keras_attention>LSTMLanguageModel"),
}
# What `classify --encoder` reads: the encoder `keras-attention pretrain` writes.
ENCODER_MODELS = ("keras_attention>TransformerTextEncoder",)
# What `pretrain --continue-from` reads: the model a pretraining saves.
MASKED_LANGUAGE_MODELS = ("keras_attention>MaskedLanguageModel",)
