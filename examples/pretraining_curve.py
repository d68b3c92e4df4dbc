"""Does masked-language-model pretraining pay when labels are few? A learning
curve over the number of labelled reviews: a Transformer trained from
scratch, the same Transformer started from a pretrained encoder, and the
bi-LSTM, each with several seeds.

The encoder is pretrained on every English text the project reads offline,
labels dropped: the 3,600 training reviews of seed 0's split, the Debian
fortunes, the King James Bible (`apt-get install bible-kjv`) and the English
side of the software messages (about 3 million WordPiece tokens); never the
validation or test reviews, which every fine-tuning run keeps as seed 0's
split (`keras-attention classify --labelled N`).

    python examples/pretraining_curve.py --out runs/pretraining-curve

The same with the command line, one point at a time:

    keras-attention pretrain --add-text fortunes --add-text bible \\
        --add-text messages --width 128 --heads 4 --blocks 2 --epochs 100 \\
        --time-budget 35 --out runs/pretraining-curve/pretrain
    keras-attention classify --labelled 100 --encoder \\
        runs/pretraining-curve/pretrain/encoder.keras --seed 0 --out OUT

With `--continue-minutes M`, the pretrained encoder is then pretrained M
minutes more on the 3,600 training reviews alone (the task's own text, as
Gururangan et al. 2020 continue RoBERTa), and a fourth arm, `continued`,
fine-tunes that one:

    keras-attention pretrain --continue-from \
        runs/pretraining-curve/pretrain/model.keras --epochs 100 \
        --time-budget 14 --out runs/pretraining-curve/pretrain-reviews

Its control, the `longer` arm, is pretrained the same M minutes more on the
same four texts as before, so that what the reviews add is told apart from
what more pretraining adds (the same command with `--add-text fortunes
--add-text bible --add-text messages`, out `pretrain-longer`).

Writes `learning_curve.json` and `learning_curve.png` under `--out`; every
run keeps its folder, and a re-run reads the finished ones. About 1 hour 45
minutes on 2 CPU cores with the defaults (35 minutes of pretraining, then 60
fine-tuning runs of 15 to 140 seconds). Figures: docs/tutorials/pretraining.md.
"""

import argparse
import os

from keras_attention.tasks.classify import learning_curve
from keras_attention.tasks.pretrain import run_pretrain

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few texts and one
# epoch, without the extra texts: CI's check that the example still runs (its
# figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"
# A TINY run's pretraining: one epoch on 512 reviews (batched by length,
# fewer would leave no full batch of 32).
TINY_RUN = {"epochs": 1, "num_train": 512} if TINY else {"epochs": 100}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--out", default="runs/pretraining-curve")
parser.add_argument("--sizes", default="8" if TINY else "100,300,1000,3600")
parser.add_argument("--seeds", type=int, default=1 if TINY else 5)
parser.add_argument("--pretrain-minutes", type=float, default=35.0)
parser.add_argument(
    "--continue-minutes",
    type=float,
    default=0.0,
    help="then pretrain the encoder this long on the reviews alone, for the "
    "`continued` arm (default: no continued pretraining)",
)
parser.add_argument(
    "--arms",
    default="pretrained" if TINY else "pretrained,scratch,bilstm",
    help="which to run: pretrained, scratch, bilstm and, with "
    "--continue-minutes, continued and longer",
)
parser.add_argument(
    "--monitor",
    default="val_loss",
    choices=("val_loss", "val_macro_f1"),
    help="what early stopping follows in every fine-tuning run",
)
args = parser.parse_args()

# The encoder's sizes, which the Transformer from scratch shares (a TINY run:
# one narrow layer on texts cut to 64 tokens, one batch shape instead of
# three, whose XLA programs compile faster).
SIZES = {"hidden_dim": 128, "num_heads": 4, "num_layers": 2, "intermediate_dim": 256}
if TINY:
    SIZES = {
        "hidden_dim": 16,
        "num_heads": 2,
        "num_layers": 1,
        "intermediate_dim": 32,
        "max_length": 64,
    }

EXTRA_TEXTS = [] if TINY else ["fortunes", "bible", "messages"]
chosen = args.arms.split(",")
pretrain_dir = os.path.join(args.out, "pretrain")
arms = {
    "pretrained": {
        "model": "transformer",
        "encoder": os.path.join(pretrain_dir, "encoder.keras"),
    },
    "scratch": {"model": "transformer", **SIZES},
    "bilstm": {"model": "bilstm"},
}
# The further pretraining of each arm that continues the general encoder:
# the reviews alone, or (the control) the same mixture as before.
continuations = {"continued": [], "longer": EXTRA_TEXTS}
if args.continue_minutes > 0:
    for name, folder in (
        ("continued", "pretrain-reviews"),
        ("longer", "pretrain-longer"),
    ):
        arms[name] = {
            "model": "transformer",
            "encoder": os.path.join(args.out, folder, "encoder.keras"),
        }
if not chosen or set(chosen) - set(arms):
    needs = (
        ""
        if args.continue_minutes > 0
        else " (continued and longer need --continue-minutes)"
    )
    parser.error(
        f"--arms: expected some of {', '.join(arms)}{needs}; got {args.arms!r}"
    )

if set(chosen) - {"scratch", "bilstm"}:
    run_pretrain(
        pretrain_dir,
        data="reviews",
        extra_texts=EXTRA_TEXTS,
        time_budget_minutes=args.pretrain_minutes,
        **TINY_RUN,
        **SIZES,
    )
for name in [name for name in continuations if name in chosen]:
    run_pretrain(
        os.path.dirname(arms[name]["encoder"]),
        data="reviews",
        extra_texts=continuations[name],
        continue_from=os.path.join(pretrain_dir, "model.keras"),
        **TINY_RUN,
        time_budget_minutes=args.continue_minutes,
    )
learning_curve(
    args.out,
    arms={name: {**arms[name], "monitor": args.monitor} for name in chosen},
    sizes=[int(size) for size in args.sizes.split(",")],
    seeds=range(args.seeds),
    **({"epochs": 1} if TINY else {}),
)
