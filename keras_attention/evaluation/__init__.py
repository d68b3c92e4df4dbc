"""Evaluation helpers to call from your own code: which words a classifier's
attention points at (and whether its prediction rests on them), FID /
Inception score of generated images, and whether distant parts of them
agree. Keras and NumPy only."""

from keras_attention.evaluation.attribution import (
    NUM_DELETED_WORDS,
    delete_words,
    deletion_check,
    word_index,
    word_weights,
)
from keras_attention.evaluation.image_quality import (
    ImageQuality,
    feature_classifier,
    frechet_distance,
    inception_score,
    train_feature_classifier,
)
from keras_attention.evaluation.long_range import LongRangeAgreement

__all__ = [
    "ImageQuality",
    "LongRangeAgreement",
    "NUM_DELETED_WORDS",
    "delete_words",
    "deletion_check",
    "feature_classifier",
    "frechet_distance",
    "inception_score",
    "train_feature_classifier",
    "word_index",
    "word_weights",
]
