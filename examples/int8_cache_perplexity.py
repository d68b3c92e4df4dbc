"""Does an int8 key/value cache cost perplexity?

A character-level GPT (rotary positions) trains briefly on the Debian
fortunes; the held-out test split is then read through its float cache and
through an int8 cache (`cache_dtype="int8"`, the same weights): each window
of `LENGTH` characters goes through `call_with_cache` at index 0, so every key
and value is written into the cache (quantized, for int8) and read back, as
in cached decoding. Also prints the full forward pass's perplexity and the
share of greedy tokens the two caches agree on. About 3 minutes on 2 CPU
cores with `KERAS_BACKEND=jax`.

    python examples/int8_cache_perplexity.py [--steps N]
"""

import argparse
import os
import time

import keras
import numpy as np
from keras import ops

from keras_attention.data import load_language_model_texts
from keras_attention.models import GPT

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"

LENGTH = 128
BATCH = 32
VOCABULARY = 128  # ASCII; every other character shares id 127
SIZES = dict(
    max_length=LENGTH,
    hidden_dim=128,
    num_heads=4,  # head_dim 32: the int8 cache is 34 / 128 = 0.27x float32
    num_layers=2,
    intermediate_dim=256,
    dropout=0.0,
    input_positions=None,
    attention_positions="rotary",
)


def character_ids(documents):
    """The documents as one stream of character ids, each ended by id 3."""
    text = "\x03".join(documents) + "\x03"
    ids = np.array([min(ord(c), VOCABULARY - 1) for c in text], "int32")
    return np.where(ids == 0, VOCABULARY - 1, ids)


def mean_nll(model, inputs, targets, cached):
    """Mean negative log-likelihood per character, through the cache or by
    the full forward pass."""
    total = 0.0
    for b in range(0, len(inputs), 64):
        x, y = inputs[b : b + 64], targets[b : b + 64]
        if cached:
            logits, _ = model.call_with_cache(x, model.initial_cache(len(x), LENGTH), 0)
        else:
            logits = model(x)
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        log_probs = ops.convert_to_numpy(log_probs)
        total -= np.take_along_axis(log_probs, y[..., None], -1).sum()
    return total / targets.size


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2 if TINY else 400)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    texts = load_language_model_texts("fortunes")
    train, test = character_ids(texts["train"]), character_ids(texts["test"])
    model = GPT(VOCABULARY, **SIZES)
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    rng = np.random.default_rng(0)
    start = time.time()
    for _ in range(args.steps):
        at = rng.integers(0, len(train) - LENGTH - 1, BATCH)
        x = np.stack([train[i : i + LENGTH] for i in at])
        y = np.stack([train[i + 1 : i + LENGTH + 1] for i in at])
        loss = model.train_on_batch(x, y)
    print(
        f"trained {args.steps} steps of {BATCH}x{LENGTH} characters in "
        f"{time.time() - start:.0f} s, last loss {float(loss):.3f}"
    )
    int8 = GPT(VOCABULARY, cache_dtype="int8", **SIZES)
    int8.set_weights(model.get_weights())

    windows = min((len(test) - 1) // LENGTH, 8) if TINY else (len(test) - 1) // LENGTH
    inputs = test[: windows * LENGTH].reshape(windows, LENGTH)
    targets = test[1 : windows * LENGTH + 1].reshape(windows, LENGTH)
    full = mean_nll(model, inputs, targets, cached=False)
    float_cache = mean_nll(model, inputs, targets, cached=True)
    int8_cache = mean_nll(int8, inputs, targets, cached=True)
    print(
        f"held-out perplexity over {targets.size} characters: full pass "
        f"{np.exp(full):.4f}, float cache {np.exp(float_cache):.4f}, int8 "
        f"cache {np.exp(int8_cache):.4f}"
    )
    prompts = inputs[:8, :16]
    float_tokens = ops.convert_to_numpy(model.generate(prompts, max_length=80))
    int8_tokens = ops.convert_to_numpy(int8.generate(prompts, max_length=80))
    new = slice(16, None)
    agree = np.mean(float_tokens[:, new] == int8_tokens[:, new])
    print(f"greedy tokens after 8 prompts of 16: {agree:.1%} the same")


if __name__ == "__main__":
    main()
