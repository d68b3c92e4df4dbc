"""German -> English with attention: an RNN with Bahdanau attention and a
Transformer, trained for the same time on the Ding dictionary's sentence pairs,
scored with sacrebleu, greedy against beam search.

Needs the Debian package `trans-de-en` (`apt-get install trans-de-en`). Takes
about 2 x 12 minutes of training on 2 CPU cores;
`keras-attention translate --data de-en --model transformer,rnn-bahdanau,rnn`
runs the full comparison with checkpoints, heatmaps and the BLEU-by-length
plot.

    python examples/translate_de_en.py
"""

import os
import time

import keras
import sacrebleu

import keras_attention
from keras_attention.data import (
    load_ding,
    split_pairs,
    train_word_piece,
    translation_dataset,
)
from keras_attention.tasks.resumable import TimeBudget
from keras_attention.tasks.translate import translate_texts

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"

keras.utils.set_random_seed(0)
MINUTES = 12

# 1. ~16k sentence pairs; a fixed, seeded split with a 1,000-pair test set.
splits = split_pairs(load_ding(), num_test=1000, num_valid=1000)
if TINY:
    splits = {name: pairs[:128] for name, pairs in splits.items()}
print(len(splits["train"]), "training pairs, e.g.", splits["train"][0])

# 2. WordPiece vocabularies (keras-hub) learned from the training split only.
german = train_word_piece([de for de, _ in splits["train"]], 8000)
english = train_word_piece([en for _, en in splits["train"]], 8000)

# 3. Length-bucketed batches: short sentences are not padded to 40 tokens.
options = {
    "source_tokenizer": german,
    "target_tokenizer": english,
    "batch_size": 64,
    "max_source_length": 40,
    "max_target_length": 40,
    "bucket_boundaries": (12, 20, 28),
}
if TINY:  # one bucket: a TINY run's time is XLA compiles, one per batch shape
    options["bucket_boundaries"] = (40,)
train, _ = translation_dataset(splits["train"], shuffle=True, **options)
valid, _ = translation_dataset(splits["valid"], **options)

sizes = {
    "source_vocabulary_size": german.vocabulary_size(),
    "target_vocabulary_size": english.vocabulary_size(),
    "source_tokenizer": german,
    "target_tokenizer": english,
    "max_source_length": 40,
    "max_target_length": 40,
}
models = {
    "Transformer": keras_attention.models.Transformer(**sizes),
    "RNN + Bahdanau": keras_attention.models.RNNSeq2Seq(attention="bahdanau", **sizes),
}
if TINY:  # one narrow model through the same loop: its time is XLA compiles
    models = {
        "Transformer": keras_attention.models.Transformer(
            **sizes,
            hidden_dim=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            intermediate_dim=32,
        )
    }
sources = [de for de, _ in splits["test"]]
references = [en for _, en in splits["test"]]
for name, model in models.items():
    # 4. Same optimizer, same wall-clock budget for both.
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
        jit_compile=True,
    )
    started = time.perf_counter()
    model.fit(
        train,
        validation_data=valid,
        epochs=1 if TINY else 100,
        callbacks=[TimeBudget(MINUTES * 60)],
    )
    print(f"{name}: trained {time.perf_counter() - started:.0f} s")

    # 5. BLEU with greedy decoding and with beam search (width 4).
    for beam_width in (1, 4):
        translations = translate_texts(model, sources, beam_width=beam_width)
        bleu = sacrebleu.corpus_bleu(translations, [references]).score
        print(f"{name}, beam {beam_width}: BLEU {bleu:.1f}")
    print("  ", sources[0], "->", translations[0])
