"""`keras-attention lm`."""

from keras_attention.cli.arguments import (
    add_data_option,
    add_model_option,
    add_training_options,
    add_transformer_size_options,
    at_least,
    load_model,
    positive_float,
    positive_int,
    probability,
    read_inputs,
    run_or_compare,
    training_options,
    transformer_sizes,
)
from keras_attention.cli.checks import CommandError, check_draft
from keras_attention.names import (
    LM_DATA,
    LM_GPT_SIZES,
    LM_MODELS,
    LM_SAMPLERS,
    LM_VOCABULARY_SIZE,
)

HELP = (
    "train a character-level language model (GPT, or an LSTM with as many "
    "parameters) and measure its held-out perplexity, or continue text with a "
    "trained one"
)
TRAINS = True


def add_arguments(parser):
    add_data_option(
        parser,
        LM_DATA,
        "file",
        default="fortunes",
        help="fortunes (Debian fortunes, 2.5 million characters) or a text file "
        "of documents separated by lines holding only %% (or by blank lines)",
    )
    add_model_option(parser, LM_MODELS, "gpt", "compares them")
    parser.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        default=100,
        help="training batches per epoch",
    )
    add_transformer_size_options(parser, "GPT", LM_GPT_SIZES)
    parser.add_argument(
        "--pack",
        action="store_true",
        help="train on rows packed with whole documents, each attending only "
        "to itself, positions restarting at each (default: windows of the "
        "text read across documents); gpt only",
    )
    parser.add_argument(
        "--prompt",
        action="append",
        dest="prompts",
        default=None,
        metavar="TEXT",
        help="with --load: text to continue (repeat for several; default: "
        "standard input, one per line)",
    )
    parser.add_argument(
        "--sampler",
        choices=LM_SAMPLERS,
        default="top_p",
        help="how the next character is chosen (keras-hub samplers); a training "
        "run writes samples.txt with greedy search and this one",
    )
    parser.add_argument(
        "--temperature",
        type=positive_float,
        default=0.8,
        help="divides the logits before sampling (below 1: safer choices)",
    )
    parser.add_argument(
        "--top-k", type=positive_int, default=10, help="k of --sampler top_k"
    )
    parser.add_argument(
        "--top-p", type=probability, default=0.9, help="p of --sampler top_p"
    )
    parser.add_argument(
        "--length",
        type=at_least(2),
        default=None,
        help="with --load: characters to generate, prompt included (default: "
        "the model's window, 256)",
    )
    parser.add_argument(
        "--draft",
        default=None,
        metavar="PATH",
        help="a smaller GPT over the same characters (another lm run's "
        "OUT/model.keras) that proposes characters for the model to check in "
        "one pass (speculative decoding): a training run's greedy samples are "
        "decoded so and metrics.json gets the acceptance and the speed-up "
        "against greedy search; with --load, continues greedily so (needs "
        "--sampler greedy); gpt only",
    )
    parser.add_argument(
        "--draft-tokens",
        type=positive_int,
        default=4,
        help="with --draft: the characters the draft proposes per round",
    )
    add_training_options(
        parser,
        out="runs/lm",
        batch_size=32,
        epochs=10,
        num_train_help="train on this many documents only (default: all)",
        seed_help="random seed (of the split, the training and the samples)",
    )
    parser.set_defaults(inputs="prompts")


def check(args):
    if transformer_sizes(args) and args.load:
        raise CommandError(
            "--width, --heads and --blocks size a model to train; with --load "
            "nothing is trained",
            2,
        )
    if args.pack and args.load:
        raise CommandError(
            "--pack is how a model trains; with --load nothing is trained", 2
        )
    if args.pack and "lstm" in args.model:
        raise CommandError(
            "--pack needs --model gpt: the lstm would carry its state from one "
            "document of a row into the next",
            2,
        )
    if args.draft:
        if "lstm" in args.model and not args.load:
            raise CommandError(
                "--draft proposes characters for a GPT: it needs --model gpt", 2
            )
        if args.load and args.sampler != "greedy":
            raise CommandError(
                "--draft with --load continues greedily: give --sampler greedy", 2
            )
        check_draft(args.draft, args.command, LM_VOCABULARY_SIZE, args.load)


def sampler_settings(args):
    """The sampler's settings, for `use` and the training's samples."""
    return {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}


def use(model, args):
    from keras_attention.tasks import lm_generation

    sampler = lm_generation.make_sampler(
        args.sampler, seed=args.seed, **sampler_settings(args)
    )
    draft = load_model(args.draft) if args.draft else None
    first = True
    for prompts in read_inputs(args.prompts, "prompts"):
        texts = lm_generation.continue_texts(
            model, prompts, args.length, sampler, draft, args.draft_tokens
        )
        for text in texts:
            print(text if first else f"%\n{text}", flush=True)
            first = False


def run(args):
    from keras_attention.tasks import lm

    task_arguments = {
        **sampler_settings(args),
        "data": args.data,
        "sampler": args.sampler,
        "steps_per_epoch": args.steps_per_epoch,
        "pack": args.pack,
        "draft": args.draft,
        "draft_tokens": args.draft_tokens,
        "options": training_options(args),
        **transformer_sizes(args),
    }
    run_or_compare(args, lm.run_lm, lm.compare, **task_arguments)
