"""`keras-attention bench`."""

from keras_attention.names import BENCH_SUITES

HELP = (
    "XLA benchmarks: attention against Keras and against RNNs, XLA on and off; "
    "ratios measured side by side, written as JSON, Markdown and PNG"
)
# Needs only what the benchmarks import beyond the library.
APPLICATION_MODULES = ("matplotlib",)


def add_arguments(parser):
    parser.add_argument(
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
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--out", default="runs/bench", help="output folder")


def run(args):
    from keras_attention.bench import run_suites

    run_suites(args.suite, quick=args.quick, out=args.out)
