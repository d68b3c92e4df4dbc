"""Caption scenes of Fashion-MNIST items with Show, Attend and Tell, and see
where the decoder looked for each word.

Scenes of two or three real Fashion-MNIST items (Debian package
`dataset-fashion-mnist`) on a 64x64 canvas come with captions generated from
the items and their places ("a small sneaker to the left of a bag"). A
convolutional encoder trained from scratch makes an 8x8 grid of features; an
LSTM decoder attends over the 64 locations at every word. This short run
trains on 8,000 scenes for 6 epochs: 14 minutes on this project's 2-core
machine (with another job sharing it), after which the captions have the
right shape and often the right items but few are exact (0.03 of the test
scenes). `keras-attention caption` trains 12 epochs on 20,000 scenes, with
checkpoints and more metrics (BLEU-4 72; see docs/tutorials/captioning.md).

    python examples/caption_scenes.py
"""

import os

import keras
import numpy as np

import keras_attention
from keras_attention.data import (
    caption_dataset,
    encode_captions,
    scene_splits,
    train_word_piece,
)
from keras_attention.tasks.caption import caption_images, plot_overlay

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"

keras.utils.set_random_seed(0)

# 1. Data: training and validation scenes from Fashion-MNIST's training
#    images, test scenes from its test images.
if TINY:
    splits = scene_splits(num_train=64, num_valid=32, num_test=4)
else:
    splits = scene_splits(num_train=8000, num_valid=500, num_test=500)
print(splits["train"].captions[0])

# 2. A word vocabulary learned from the training captions; every caption
#    becomes [START] words [END], padded to 24 tokens.
texts = [c for captions in splits["train"].captions for c in captions]
tokenizer = train_word_piece(texts, 500, lowercase=True)


def dataset(scenes, **kwargs):
    ids = encode_captions(scenes.captions, tokenizer, 24)
    return caption_dataset(scenes.images, ids, 32, **kwargs)


# 3. The model; its tokenizer is saved inside model.keras.
model = keras_attention.models.ShowAttendTell(
    vocabulary_size=tokenizer.vocabulary_size(),
    image_shape=(64, 64, 1),
    encoder_filters=(16, 32, 64),
    tokenizer=tokenizer,
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    weighted_metrics=["accuracy"],
)
model.fit(
    dataset(splits["train"], shuffle=True, drop_remainder=True),
    validation_data=dataset(splits["valid"]),
    epochs=1 if TINY else 6,
)

# 4. Caption the test scenes (beam search) and count exact captions.
test = splits["test"]
captions, _ = caption_images(model, test.images, beam_width=3)
exact = np.mean([c in refs for c, refs in zip(captions, test.captions, strict=True)])
print(f"exact captions: {exact:.3f}")
for caption, references in list(zip(captions, test.captions, strict=True))[:3]:
    print(f"{caption!r}  (references: {references})")

# 5. Where the decoder looked for each word of the first test scene.
plot_overlay(model, test.images[0], "caption_attention.png", boxes=test.boxes[0])
print("wrote caption_attention.png")
