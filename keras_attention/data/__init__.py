"""Datasets: real corpora from installed packages and generated tasks."""

from keras_attention.data.dates import DATE_FORMATS, date_splits, generate_date_pairs
from keras_attention.data.pipeline import encode_texts, translation_dataset
from keras_attention.data.synthetic import reversal_task
from keras_attention.data.tokenization import (
    END_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    START_ID,
    UNK_ID,
    join_punctuation,
    train_word_piece,
    word_piece_tokenizer,
)
from keras_attention.data.translation import (
    DING_PATH,
    DataFormatError,
    load_ding,
    load_translation_pairs,
    read_tsv,
    split_pairs,
)

__all__ = [
    "DATE_FORMATS",
    "DING_PATH",
    "DataFormatError",
    "END_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "START_ID",
    "UNK_ID",
    "date_splits",
    "encode_texts",
    "generate_date_pairs",
    "join_punctuation",
    "load_ding",
    "load_translation_pairs",
    "read_tsv",
    "reversal_task",
    "split_pairs",
    "train_word_piece",
    "translation_dataset",
    "word_piece_tokenizer",
]
