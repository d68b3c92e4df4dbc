"""`keras-attention demo`."""

from keras_attention.cli.arguments import non_negative_int, positive_int

HELP = (
    "train a small attention RNN to reverse digit strings and write its "
    "attention heatmap (about a minute on 2 CPU cores)"
)


def add_arguments(parser):
    parser.add_argument("--out", default="runs/demo", help="output folder")
    parser.add_argument(
        "--epochs", type=positive_int, default=6, help="training epochs"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="random seed")


def run(args):
    from keras_attention.tasks.demo import run_demo

    run_demo(args.out, epochs=args.epochs, seed=args.seed)
