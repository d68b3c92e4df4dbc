"""`keras-attention pretrain`."""

from keras_attention.cli.arguments import (
    add_data_option,
    add_training_options,
    add_transformer_size_options,
    dataset,
    positive_float,
    training_options,
    transformer_sizes,
)
from keras_attention.cli.checks import CommandError, check_pretraining
from keras_attention.names import CLASSIFICATION_DATA, PRETRAIN_EXTRA_TEXTS

HELP = (
    "pretrain the Transformer classifier's encoder as a masked language model "
    "(BERT's masking, keras-hub) on unlabelled text, for "
    "`classify --encoder OUT/encoder.keras`"
)
TRAINS = True


def add_arguments(parser):
    add_data_option(
        parser,
        CLASSIFICATION_DATA,
        "file",
        default="reviews",
        help="the classification data whose training texts (labels unused) are "
        "pretrained on and whose vocabulary is learned: reviews, fortunes or a "
        "CSV file with text,label columns; its validation texts are held out",
    )
    parser.add_argument(
        "--add-text",
        dest="extra_texts",
        action="append",
        type=dataset(PRETRAIN_EXTRA_TEXTS, "file"),
        default=[],
        metavar="TEXT",
        help="more unlabelled text: fortunes (all Debian fortunes, 15,134 texts), "
        "bible (the King James Bible in passages of up to 120 words, 7,939 "
        "texts), messages (the English side of the software messages, joined "
        "per package into texts of up to 120 words) or a text file of documents "
        "separated by %% lines or blank lines (repeat for several)",
    )
    add_transformer_size_options(parser, "the encoder (without --continue-from)")
    parser.add_argument(
        "--continue-from",
        default=None,
        metavar="MODEL.keras",
        help="continue the pretraining saved as OUT/model.keras by another run, "
        "from its weights, sizes and vocabulary, on this run's texts (a general "
        "pretraining continued on the task's own text; default: a new encoder)",
    )
    parser.add_argument(
        "--learning-rate", type=positive_float, default=1e-3, help="Adam's"
    )
    parser.add_argument(
        "--pack",
        action="store_true",
        help="pretrain on rows packed with whole texts, each attending only to "
        "itself, positions restarting at each (default: one text a row, "
        "batched by length)",
    )
    add_training_options(
        parser,
        out="runs/pretrain",
        batch_size=32,
        epochs=30,
        num_train_help="pretrain on this many texts of --data only (default: all)",
        load=False,
    )
    parser.set_defaults(load=None)


def check(args):
    if transformer_sizes(args) and args.continue_from:
        raise CommandError(
            "--continue-from brings its own sizes; --width, --heads and --blocks "
            "are for a new encoder",
            2,
        )
    if args.continue_from:
        check_pretraining(args.continue_from, args.command)
    if len(set(args.extra_texts)) < len(args.extra_texts):
        raise CommandError(
            f"--add-text names a text twice: {', '.join(args.extra_texts)}", 2
        )
    if args.data == "fortunes" and "fortunes" in args.extra_texts:
        raise CommandError(
            "--add-text fortunes holds the held-out fortunes of --data fortunes", 2
        )


def run(args):
    from keras_attention.tasks.pretrain import run_pretrain

    run_pretrain(
        args.out,
        data=args.data,
        extra_texts=args.extra_texts,
        learning_rate=args.learning_rate,
        pack=args.pack,
        continue_from=args.continue_from,
        options=training_options(args),
        **transformer_sizes(args),
    )
