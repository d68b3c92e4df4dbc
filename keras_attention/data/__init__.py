"""Datasets: real corpora from installed packages and generated tasks.

The names below load their module on first use: the image sets need only
NumPy, while the text pipelines and tokenizers need TensorFlow (the `apps`
extra), so `keras_attention.data.fashion_pairs` and its kin load on a
machine without it.
"""

import importlib

_MODULES = {
    "captioned_scenes": (
        "Scenes",
        "compose_scenes",
        "scene_splits",
    ),
    "classification": (
        "CLASSIFICATION_DATA",
        "FORTUNE_CATEGORIES",
        "FORTUNES_DIR",
        "ClassificationSplits",
        "LabelledTexts",
        "clean_text",
        "encode_documents",
        "load_classification_data",
        "load_fortunes",
        "load_reviews",
        "read_labelled_csv",
        "split_labelled",
        "split_sentences",
    ),
    "dates": (
        "DATE_FORMATS",
        "date_splits",
        "generate_date_pairs",
    ),
    "fashion_mnist": (
        "FASHION_MNIST_CLASSES",
        "FASHION_MNIST_DIR",
        "load_fashion_mnist",
        "read_idx",
    ),
    "files": ("DataFormatError",),
    "language_modeling": (
        "LANGUAGE_MODEL_DATA",
        "character_tokenizer",
        "decode_tokens",
        "load_fortune_texts",
        "load_language_model_texts",
        "read_documents",
        "split_documents",
    ),
    "messages": (
        "MESSAGE_PACKAGES",
        "CatalogEntry",
        "catalog_pairs",
        "load_messages",
        "message_splits",
        "messages_by_package",
        "package_catalogs",
        "read_mo",
    ),
    "packing": (
        "pack_documents",
        "pack_texts",
        "packed_dataset",
        "padding_fraction",
    ),
    "packages": (
        "HIDE_VARIABLE",
        "PackageMissingError",
        "hidden",
        "installed",
        "require_package",
    ),
    "pipeline": (
        "caption_dataset",
        "classification_dataset",
        "encode_captions",
        "encode_texts",
        "language_model_dataset",
        "token_stream",
        "translation_dataset",
    ),
    "synthetic": (
        "keyword_task",
        "reversal_task",
    ),
    "tokenization": (
        "END_ID",
        "PAD_ID",
        "PLACEHOLDER_TOKENS",
        "SPECIAL_TOKENS",
        "START_ID",
        "UNK_ID",
        "find_placeholders",
        "join_punctuation",
        "mask_placeholders",
        "placeholder_accuracy",
        "placeholders_kept",
        "train_word_piece",
        "unmask_placeholders",
        "word_piece_tokenizer",
    ),
    "translation": (
        "DING_PATH",
        "load_ding",
        "load_translation_pairs",
        "read_tsv",
        "split_pairs",
    ),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
