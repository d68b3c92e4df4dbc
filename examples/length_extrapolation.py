"""Train short, test long: which position encodings keep their loss on
sequences longer than those they were trained on?

Character-level GPTs on the Debian fortunes, alike but for how positions
enter: added to the tokens (sinusoidal, as in the 2017 Transformer), or
inside the attention (RoPE rotations, ALiBi's linear biases; Press et al.
2022 report that ALiBi extrapolates and sinusoidal positions do not).
Each trains for the same number of steps on windows of `TRAIN_LENGTH`
characters, then reads the held-out test split in windows of 1x, 2x and 4x
that length. Learned position embeddings have no position past the training
length, so they are only measured at 1x. Writes `metrics.json` and
`extrapolation.png` under the output folder (default
`runs/length_extrapolation`); about 15 minutes on 2 CPU cores.

    python examples/length_extrapolation.py [OUT_DIR] [--steps N]
"""

import argparse
import json
import os
import time

import keras
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from keras_attention.data import (  # noqa: E402
    character_tokenizer,
    language_model_dataset,
    load_language_model_texts,
    token_stream,
)
from keras_attention.tasks.lm import build_model, perplexity  # noqa: E402

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"

TRAIN_LENGTH = 64
EVAL_FACTORS = (1, 2, 4)
# Each encoding's positions: added to the token embeddings
# (`input_positions`) or inside the attention (`attention_positions`).
ENCODINGS = {
    "learned": {"input_positions": "learned"},
    "sinusoidal": {"input_positions": "sinusoidal"},
    "rotary": {"input_positions": None, "attention_positions": "rotary"},
    "alibi": {"input_positions": None, "attention_positions": "alibi"},
}
if TINY:  # one encoding measured at 1x only, one at every length
    ENCODINGS = {name: ENCODINGS[name] for name in ("learned", "alibi")}
SIZES = {"hidden_dim": 128, "num_heads": 4, "num_layers": 4, "intermediate_dim": 512}
if TINY:  # one narrow layer: XLA compiles its programs faster
    SIZES = {"hidden_dim": 16, "num_heads": 2, "num_layers": 1, "intermediate_dim": 32}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="runs/length_extrapolation")
    parser.add_argument("--steps", type=int, default=2 if TINY else 1500)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    tokenizer = character_tokenizer()
    texts = load_language_model_texts("fortunes")
    train_ids = token_stream(texts["train"], tokenizer)
    test_ids = token_stream(texts["test"][: 20 if TINY else None], tokenizer)
    print(f"{len(train_ids):,} training and {len(test_ids):,} test characters")

    results = {}
    for encoding, positions in ENCODINGS.items():
        keras.utils.set_random_seed(0)
        print(f"== {encoding}: {args.steps} steps on windows of {TRAIN_LENGTH}")
        model = build_model(
            "gpt",
            tokenizer.vocabulary_size(),
            TRAIN_LENGTH,
            tokenizer=tokenizer,
            **positions,
            dropout=0.0,
            **SIZES,
        )
        model.compile(
            optimizer=keras.optimizers.AdamW(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=True,
        )
        train, _ = language_model_dataset(
            train_ids, TRAIN_LENGTH, args.batch_size, shuffle=True, repeat=True
        )
        start = time.perf_counter()
        model.fit(train, steps_per_epoch=args.steps, epochs=1, verbose=2)
        seconds = time.perf_counter() - start
        # Only a learned table has no positions past the training length.
        learned = positions["input_positions"] == "learned"
        factors = (1,) if learned else EVAL_FACTORS
        by_length = {
            TRAIN_LENGTH * f: perplexity(model, test_ids, TRAIN_LENGTH * f)
            for f in factors
        }
        results[encoding] = {
            "perplexity": by_length,
            "ratio_to_train_length": {
                length: p / by_length[TRAIN_LENGTH] for length, p in by_length.items()
            },
            "train_seconds": seconds,
            "parameters": model.count_params(),
        }
        print(f"   test perplexity by window length: {by_length}")

    metrics = {
        "train_length": TRAIN_LENGTH,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "sizes": SIZES,
        "results": results,
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    plot(results, os.path.join(args.out, "extrapolation.png"))
    print(json.dumps(results, indent=2))


def plot(results, path):
    fig, ax = plt.subplots(figsize=(6, 4))
    for encoding, result in results.items():
        lengths = list(result["perplexity"])
        ax.plot(lengths, list(result["perplexity"].values()), "o-", label=encoding)
    ax.axvline(TRAIN_LENGTH, color="grey", linestyle=":", label="training length")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation window (characters)")
    ax.set_ylabel("test perplexity per character")
    ax.set_title("Trained on 64 characters, read at 64 to 256")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
