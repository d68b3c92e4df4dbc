"""`keras-attention caption`."""

import os
import sys

from keras_attention.cli.arguments import (
    add_confidence_option,
    add_data_option,
    add_model_option,
    add_training_options,
    non_negative_float,
    positive_int,
    print_confidence_lines,
    run_or_compare,
    training_options,
)
from keras_attention.cli.checks import CommandError
from keras_attention.names import CAPTION_DATA, CAPTION_MODELS

HELP = (
    "train and evaluate an image captioner (Show, Attend and Tell, or the same "
    "decoder without attention) with attention overlays, or caption images "
    "with a trained one"
)
TRAINS = True
# With --load, the overlays go to --out.
WRITES_WITH_LOAD = True


def add_arguments(parser):
    parser.add_argument("images", nargs="*", help="with --load: images to caption")
    add_data_option(
        parser,
        CAPTION_DATA,
        "folder",
        default="scenes",
        help="scenes (Fashion-MNIST items composed with spatial captions, from "
        "the Debian dataset-fashion-mnist) or a folder of images with a "
        "captions.tsv (image file<TAB>caption per line)",
    )
    add_model_option(parser, CAPTION_MODELS, "attention", "compares their BLEU")
    parser.add_argument("--beam", type=positive_int, default=3, help="beam width")
    parser.add_argument(
        "--doubly-stochastic",
        type=non_negative_float,
        default=1.0,
        help="strength lambda of the doubly stochastic attention regularization "
        "(0 turns it off)",
    )
    add_confidence_option(parser)
    add_training_options(
        parser,
        out=None,
        out_help="output folder (default: runs/caption; with --load, the model's "
        "folder, where the overlays go)",
        batch_size=32,
        num_train_help="train on this many scenes only (default: all 20,000)",
    )
    parser.set_defaults(inputs="images")


def check(args):
    if not args.load:
        return
    for path in args.images:
        if not os.path.isfile(path):
            raise CommandError(f"image {path!r}: no such file", 2)
    if not args.images:
        raise CommandError("caption --load needs the image files to caption", 2)


def use(model, args):
    from keras_attention.tasks import caption

    results = caption.caption_files_with_confidence(
        model, args.images, args.out, args.beam
    )
    print_confidence_lines(args.images, results, args.min_confidence)
    if model.attention:
        print(f"attention overlays written to {args.out}", file=sys.stderr)


def run(args):
    from keras_attention.tasks import caption

    task_arguments = {
        "data": args.data,
        "beam_width": args.beam,
        "doubly_stochastic": args.doubly_stochastic,
        "options": training_options(args),
    }
    run_or_compare(args, caption.run_caption, caption.compare, **task_arguments)
