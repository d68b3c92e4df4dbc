"""Translate human-written dates into ISO dates with a Transformer.

"Tue 03/03/21", "march 3rd, 2021", "3.3.2021" ... -> "2021-03-03". The data is
generated (seeded, 21 formats, held-out test dates), the vocabularies are
WordPiece learned from the training split, and the cross-attention heatmap
shows which source tokens each output token reads. About 10 minutes on 2 CPU
cores; `keras-attention translate --data dates` does the same with
checkpoints and more metrics.

    python examples/translate_dates.py
"""

import os

import keras
import numpy as np
import sacrebleu

import keras_attention
from keras_attention.data import date_splits, train_word_piece, translation_dataset
from keras_attention.tasks.translate import plot_translation_attention, translate_texts

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"

keras.utils.set_random_seed(0)

# 1. Data: 20,000 training pairs; validation and test dates never seen in training.
if TINY:
    splits = date_splits(num_train=256, num_valid=64, num_test=16)
else:
    splits = date_splits(num_train=20000, num_valid=1000, num_test=2000)
print(splits["train"][:3])

# 2. Subword vocabularies learned from the training split.
source_tokenizer = train_word_piece(
    [s for s, _ in splits["train"]], 400, lowercase=True
)
target_tokenizer = train_word_piece(
    [t for _, t in splits["train"]], 400, lowercase=True
)

# 3. tf.data pipelines: encoder ids, "<start> target" as decoder input,
#    "target <end>" as labels, and weights that ignore the padding.
lengths = {"max_source_length": 16, "max_target_length": 8}
train, _ = translation_dataset(
    splits["train"],
    source_tokenizer,
    target_tokenizer,
    batch_size=64,
    shuffle=True,
    **lengths,
)
valid, _ = translation_dataset(
    splits["valid"], source_tokenizer, target_tokenizer, batch_size=64, **lengths
)

# 4. The model: the tokenizers are saved inside model.keras with it.
# A TINY run: one narrow block each side, whose XLA programs (training,
# validation, greedy search) compile faster; the same code otherwise
# (measured on the 2-core machine: the test 48.8 -> 39.8 s of CPU).
sizes = {}
if TINY:
    sizes = {
        "hidden_dim": 16,
        "num_heads": 2,
        "num_encoder_layers": 1,
        "num_decoder_layers": 1,
        "intermediate_dim": 32,
    }
model = keras_attention.models.Transformer(
    source_vocabulary_size=source_tokenizer.vocabulary_size(),
    target_vocabulary_size=target_tokenizer.vocabulary_size(),
    source_tokenizer=source_tokenizer,
    target_tokenizer=target_tokenizer,
    **lengths,
    **sizes,
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    weighted_metrics=["accuracy"],
    jit_compile=True,
)
model.fit(train, validation_data=valid, epochs=1 if TINY else 8)

# 5. Greedy decoding (XLA-compiled, with the decoder's key/value cache).
sources = [s for s, _ in splits["test"]]
references = [t for _, t in splits["test"]]
translations = translate_texts(model, sources)
exact = np.mean([h == r for h, r in zip(translations, references, strict=True)])
print(f"exact match on {len(sources)} held-out dates: {exact:.3f}")
print(f"BLEU {sacrebleu.corpus_bleu(translations, [references]).score:.1f}")
for source, translation in list(zip(sources, translations, strict=True))[:5]:
    print(f"{source!r:>32} -> {translation}")

# 6. Where did the model look? The last decoder block's cross-attention.
plot_translation_attention(model, sources[0], "dates_attention.png", "Transformer")
model.save("dates_transformer.keras")
