"""The classifiers of `keras-attention classify`: the input sizes and the
training budget they share, building one by name, and reading texts with a
trained one (its labels and most-attended words, highlighted
explanations)."""

import os

import numpy as np

from keras_attention.data.classification import encode_documents
from keras_attention.data.pipeline import encode_texts
from keras_attention.evaluation.attribution import word_weights
from keras_attention.models import (
    BagOfEmbeddingsClassifier,
    BiLSTMClassifier,
    HierarchicalAttentionNetwork,
    TransformerClassifier,
)
from keras_attention.names import CLASSIFICATION_MODELS
from keras_attention.viz import highlight_html, plot_highlighted_text

MODELS = CLASSIFICATION_MODELS
# The input sizes in tokens and the training budget shared by every model.
SETTINGS = {
    "vocabulary_size": 8000,
    "lowercase": True,
    "max_length": 256,
    "max_sentences": 12,
    "max_words": 40,
    # Training batches are cut to 64, 128 or 256 tokens (flat texts), or to
    # 4, 8 or 12 sentences (documents).
    "token_buckets": (64, 128),
    "sentence_buckets": (4, 8),
    "epochs": 15,
    "patience": 3,
    # Adam's, from scratch and when fine-tuning a pretrained encoder alike.
    "learning_rate": 1e-3,
    # With a labelling budget (`--labelled`), an epoch shows the labelled
    # texts as many times as it takes to show this many, so that a few
    # hundred texts get more than a few dozen updates before early stopping
    # can end the run.
    "min_epoch_texts": 1000,
}


def build_model(name, vocabulary_size, num_classes, settings=SETTINGS, **kwargs):
    """The classifier called `name` (one of `MODELS`) sized for the data."""
    if name == "transformer":
        return TransformerClassifier(
            vocabulary_size, num_classes, max_length=settings["max_length"], **kwargs
        )
    if name == "han":
        return HierarchicalAttentionNetwork(
            vocabulary_size,
            num_classes,
            max_sentences=settings["max_sentences"],
            max_words=settings["max_words"],
            **kwargs,
        )
    if name == "bilstm":
        return BiLSTMClassifier(vocabulary_size, num_classes, **kwargs)
    if name == "bag":
        return BagOfEmbeddingsClassifier(vocabulary_size, num_classes, **kwargs)
    raise ValueError(f"`model` must be one of {MODELS}; received {name!r}.")


def encode_for_model(model, texts):
    """The token ids `model` reads, with its tokenizer: a `(N, S, W)` grid of
    sentences and words for a `HierarchicalAttentionNetwork`, `(N, T)` for the
    others (cut to `SETTINGS["max_length"]` for models without a length)."""
    if model.tokenizer is None:
        raise ValueError(
            "This model has no tokenizer; train it with `keras-attention "
            "classify`, or give the model `tokenizer=`."
        )
    if isinstance(model, HierarchicalAttentionNetwork):
        return encode_documents(
            texts, model.tokenizer, model.max_sentences, model.max_words
        )
    length = getattr(model, "max_length", SETTINGS["max_length"])
    return encode_texts(texts, model.tokenizer, length)


def classify_texts(model, texts, num_top_words=5):
    """Labels strings with a model that carries its tokenizer.

    Returns:
        One dict per text: `label`, `probability` and, for attention models,
        `top_words`: the `num_top_words` words with the most attention, as
        `(word, weight)` pairs.
    """
    token_ids = encode_for_model(model, texts)
    probabilities = np.asarray(model.predict(token_ids, verbose=0))
    importance = model.token_importance(token_ids) if model.has_attention else None
    names = model.class_names or [str(i) for i in range(model.num_classes)]
    results = []
    for i, row in enumerate(probabilities):
        label = int(np.argmax(row))
        result = {"label": names[label], "probability": float(row[label])}
        if importance is not None:
            words, weights = word_weights(model.tokenizer, token_ids[i], importance[i])
            if token_ids.ndim == 3:  # sentences of words: rank all words
                words, weights = sum(words, []), sum(weights, [])
            order = np.argsort(-np.array(weights), kind="stable")[:num_top_words]
            result["top_words"] = [(words[j], float(weights[j])) for j in order]
        results.append(result)
    return results


def explain(model, texts, out_dir, prefix="explanation"):
    """Writes `<prefix>_<i>.html` and `.png` under `out_dir` for each text:
    its words highlighted by attention (and, for the HAN, its sentences), with
    the predicted label in the title. Returns the paths written."""
    token_ids = encode_for_model(model, texts)
    probabilities = np.asarray(model.predict(token_ids, verbose=0))
    names = model.class_names or [str(i) for i in range(model.num_classes)]
    hierarchical = isinstance(model, HierarchicalAttentionNetwork)
    if hierarchical:
        word_attention, sentence_attention = model.attention_weights(token_ids)
    else:
        importance = model.token_importance(token_ids)
    paths = []
    for i in range(len(texts)):
        label = int(np.argmax(probabilities[i]))
        title = (
            f"{type(model).__name__}: {names[label]} ({probabilities[i][label]:.2f})"
        )
        if hierarchical:
            sentences, weights = word_weights(
                model.tokenizer, token_ids[i], word_attention[i]
            )
            real = np.flatnonzero((token_ids[i] != 0).any(axis=-1))
            sentence_weights = [float(w) for w in sentence_attention[i][real]]
        else:
            words, flat = word_weights(model.tokenizer, token_ids[i], importance[i])
            sentences, weights, sentence_weights = [words], [flat], None
        path = os.path.join(out_dir, f"{prefix}_{i}")
        highlight_html(
            sentences, weights, sentence_weights, title=title, path=path + ".html"
        )
        plot_highlighted_text(
            sentences, weights, sentence_weights, title=title, path=path + ".png"
        )
        paths += [path + ".html", path + ".png"]
    return paths
