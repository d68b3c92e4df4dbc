"""`keras-attention translate`."""

from keras_attention.cli.arguments import (
    add_confidence_option,
    add_data_option,
    add_model_option,
    add_training_options,
    positive_int,
    print_confidence_lines,
    read_inputs,
    run_or_compare,
    training_options,
)
from keras_attention.names import TRANSLATION_DATA, TRANSLATION_MODELS

HELP = (
    "train and evaluate a translation model (RNN with or without attention, "
    "Transformer), or translate with a trained one"
)
TRAINS = True


def add_arguments(parser):
    parser.add_argument(
        "sentences",
        nargs="*",
        help="with --load: sentences to translate (default: standard input, "
        "one per line)",
    )
    add_data_option(
        parser,
        TRANSLATION_DATA,
        "file",
        default="dates",
        help="dates (generated), de-en (Debian trans-de-en), messages-de "
        "(software messages of Debian packages' German catalogs) or a "
        "source<TAB>target file",
    )
    add_model_option(parser, TRANSLATION_MODELS, "transformer", "plots them together")
    parser.add_argument("--beam", type=positive_int, default=4, help="beam width")
    add_confidence_option(parser)
    add_training_options(parser, out="runs/translate", batch_size=64)
    parser.set_defaults(inputs="sentences")


def use(model, args):
    from keras_attention.tasks import translate

    for texts in read_inputs(args.sentences, "sentences to translate"):
        results = translate.translate_with_confidence(
            model, texts, beam_width=args.beam
        )
        print_confidence_lines(texts, results, args.min_confidence)


def run(args):
    from keras_attention.tasks import translate

    run_or_compare(
        args,
        translate.run_translate,
        translate.compare,
        data=args.data,
        beam_width=args.beam,
        options=training_options(args),
    )
