"""How much does speculative decoding save on the fortunes?

Trains two character-level GPTs on the Debian fortunes with the task behind
`keras-attention lm` (`tasks.lm.run_lm`; rotary positions, windows of 128
characters, 4 epochs of 100 batches of 32): a target of 2 blocks of width 128
(0.43 M parameters) and a draft of one block of width 64, in `OUT/target` and
`OUT/draft` (a finished run is loaded, not trained again; `--target` and
`--draft` take models trained elsewhere, `keras-attention lm` runs'
`model.keras`). Then each model continues the first 32 characters of held-out
test fortunes by 128 new characters (the end-of-text token switched off, so
that every row gets all 128), one prompt at a time (batch 1) and all at once:
the target's own greedy `generate` and `speculative_generate` with the draft
(`k` proposals per round), both compiled with XLA, run once, then timed in
turn `--repeats` times (median). Prints the tokens per target pass, the
proposals kept, and the speed-up; the outputs are checked to be equal.

    KERAS_BACKEND=jax nice python examples/speculative_fortunes.py \
        --out runs/speculative
"""

import argparse
import json
import os
import platform

import keras
import numpy as np

from keras_attention.data import load_language_model_texts
from keras_attention.data.tokenization import END_ID
from keras_attention.tasks import lm

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"

PROMPT = 32
NEW_TOKENS = 8 if TINY else 128
# Rotary positions (they learn faster than `lm`'s learned table in a few
# hundred steps) and windows of 128 characters: small enough to train both
# on 2 CPU cores in minutes.
COMMON = {
    "sequence_length": 128,
    "input_positions": None,
    "attention_positions": "rotary",
}
TARGET_SIZES = {"hidden_dim": 128, "num_heads": 4, "num_layers": 2, **COMMON}
DRAFT_SIZES = {
    "hidden_dim": 64,
    "num_heads": 2,
    "num_layers": 1,
    "intermediate_dim": 256,
    **COMMON,
}
if TINY:  # narrow models: XLA compiles their programs faster
    TARGET_SIZES = {**TARGET_SIZES, "hidden_dim": 32, "num_heads": 2}
    DRAFT_SIZES = {**DRAFT_SIZES, "hidden_dim": 16, "intermediate_dim": 32}


def train(out, epochs):
    """The target at `lm`'s sizes and the draft, trained by the `lm` task
    (or loaded where a run finished); their `model.keras` paths."""
    paths = {}
    for name, sizes in (("target", TARGET_SIZES), ("draft", DRAFT_SIZES)):
        folder = f"{out}/{name}"
        # A TINY run trains without XLA: compiling took most of its time
        # (the example 55 -> 35 s; the XLA path: tests/models/test_gpt.py).
        tiny = {"steps_per_epoch": 2, "num_train": 64, "jit_compile": False}
        lm.run_lm(
            folder, epochs=epochs[name], verbose=0, **(tiny if TINY else {}), **sizes
        )
        paths[name] = f"{folder}/model.keras"
    return paths


def prompts(count):
    """The first `PROMPT` characters of the first `count` held-out test
    fortunes that are longer, each after the end-of-text token (ids)."""
    tokenizer = lm.character_tokenizer()
    texts = [
        t for t in load_language_model_texts("fortunes")["test"] if len(t) > PROMPT
    ]
    rows = [
        [END_ID, *np.asarray(tokenizer(text[:PROMPT])).tolist()]
        for text in texts[:count]
    ]
    return np.array(rows, "int32")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/speculative")
    parser.add_argument("--target", help="a trained target's model.keras")
    parser.add_argument("--draft", help="a trained draft's model.keras")
    parser.add_argument("--target-epochs", type=int, default=1 if TINY else 4)
    parser.add_argument("--draft-epochs", type=int, default=1 if TINY else 4)
    # One prompt when TINY: batch 1 and "all" then share their compiled programs.
    parser.add_argument("--prompts", type=int, default=1 if TINY else 8)
    parser.add_argument(
        "--k", default="2" if TINY else "2,4,6", help="proposals per round"
    )
    parser.add_argument("--repeats", type=int, default=1 if TINY else 3)
    args = parser.parse_args()

    paths = {"target": args.target, "draft": args.draft}
    if not (args.target and args.draft):
        epochs = {"target": args.target_epochs, "draft": args.draft_epochs}
        paths = train(args.out, epochs)
    target, draft = (keras.saving.load_model(paths[n]) for n in ("target", "draft"))
    for model in (target, draft):
        model.end_token_id = None  # every row gets all NEW_TOKENS
    rows = prompts(args.prompts)
    max_length = rows.shape[1] + NEW_TOKENS
    print(
        f"{keras.backend.backend()}, {platform.processor() or platform.machine()}; "
        f"target {target.count_params():,} parameters, draft "
        f"{draft.count_params():,}; {len(rows)} prompts of {PROMPT} characters + "
        f"{NEW_TOKENS} new"
    )
    results = []
    for k in (int(v) for v in args.k.split(",")):
        for batch in ("1", "all"):
            groups = [rows[i : i + 1] for i in range(len(rows))]
            groups = groups if batch == "1" else [rows]
            measured = lm.time_speculative(
                target, draft, groups, max_length, k, args.repeats
            )
            assert measured["same_as_greedy"], "speculative output differs"
            result = {"k": k, "batch": 1 if batch == "1" else len(rows), **measured}
            results.append(result)
            print(
                f"k={k} batch {result['batch']}: {result['tokens_per_round']:.2f} "
                f"tokens per target pass, {result['acceptance']:.1%} of proposals "
                f"kept; greedy {result['plain_seconds']:.2f} s, speculative "
                f"{result['seconds']:.2f} s: {result['speedup']:.2f}x",
                flush=True,
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
