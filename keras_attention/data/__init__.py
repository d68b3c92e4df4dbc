"""Datasets: real corpora from installed packages and generated tasks."""

from keras_attention.data.captioned_scenes import Scenes, compose_scenes, scene_splits
from keras_attention.data.classification import (
    CLASSIFICATION_DATA,
    FORTUNE_CATEGORIES,
    FORTUNES_DIR,
    ClassificationSplits,
    LabelledTexts,
    clean_text,
    encode_documents,
    load_classification_data,
    load_fortunes,
    load_reviews,
    read_labelled_csv,
    split_labelled,
    split_sentences,
)
from keras_attention.data.dates import DATE_FORMATS, date_splits, generate_date_pairs
from keras_attention.data.fashion_mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DIR,
    load_fashion_mnist,
    read_idx,
)
from keras_attention.data.files import DataFormatError
from keras_attention.data.pipeline import (
    caption_dataset,
    classification_dataset,
    encode_captions,
    encode_texts,
    translation_dataset,
)
from keras_attention.data.synthetic import keyword_task, reversal_task
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
    load_ding,
    load_translation_pairs,
    read_tsv,
    split_pairs,
)

__all__ = [
    "CLASSIFICATION_DATA",
    "ClassificationSplits",
    "DATE_FORMATS",
    "DING_PATH",
    "DataFormatError",
    "END_ID",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_DIR",
    "FORTUNES_DIR",
    "FORTUNE_CATEGORIES",
    "LabelledTexts",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "START_ID",
    "Scenes",
    "UNK_ID",
    "caption_dataset",
    "classification_dataset",
    "clean_text",
    "compose_scenes",
    "date_splits",
    "encode_captions",
    "encode_documents",
    "encode_texts",
    "generate_date_pairs",
    "join_punctuation",
    "keyword_task",
    "load_classification_data",
    "load_ding",
    "load_fashion_mnist",
    "load_fortunes",
    "load_reviews",
    "load_translation_pairs",
    "read_idx",
    "read_labelled_csv",
    "read_tsv",
    "reversal_task",
    "scene_splits",
    "split_labelled",
    "split_pairs",
    "split_sentences",
    "train_word_piece",
    "translation_dataset",
    "word_piece_tokenizer",
]
