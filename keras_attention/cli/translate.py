"""`keras-attention translate`."""

from keras_attention.cli.arguments import (
    add_confidence_option,
    add_training_options,
    dataset,
    load_model,
    model_list,
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
    parser.add_argument(
        "--data",
        type=dataset(TRANSLATION_DATA, "file"),
        default="dates",
        help="dates (generated), de-en (Debian trans-de-en), messages-de "
        "(software messages of Debian packages' German catalogs) or a "
        "source<TAB>target file",
    )
    parser.add_argument(
        "--model",
        type=model_list(TRANSLATION_MODELS),
        default=("transformer",),
        help="one of " + ", ".join(TRANSLATION_MODELS) + "; a comma-separated "
        "list trains each in OUT/<model> and plots them together (default: "
        "transformer)",
    )
    parser.add_argument("--beam", type=positive_int, default=4, help="beam width")
    add_confidence_option(parser)
    add_training_options(parser, out="runs/translate", batch_size=64)
    parser.set_defaults(inputs="sentences")


def run(args):
    from keras_attention.tasks import translate

    if args.load:
        model = load_model(args.load)
        for texts in read_inputs(args.sentences, "sentences to translate"):
            results = translate.translate_with_confidence(
                model, texts, beam_width=args.beam
            )
            print_confidence_lines(texts, results, args.min_confidence)
        return
    run_or_compare(
        args,
        translate.run_translate,
        translate.compare,
        data=args.data,
        beam_width=args.beam,
        options=training_options(args),
    )
