"""`keras-attention bench`."""

from keras_attention.cli.arguments import positive_float
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
        "devices (JAX); gpu: about 6 minutes of one GPU on JAX: attention "
        "fwd+bwd in bfloat16 over T = 1k-32k, ours vs cuDNN, XLA and PyTorch "
        "SDPA as a fraction of the chip's peak, Transformer vs RNN training "
        "tokens/s, decoding ms per token (--quick: a dry run on a CPU); all: "
        "every suite but gpu",
    )
    add_run_options(parser)


def add_run_options(parser):
    """`--quick`, `--out` and `--peak-tflops`, the options of a run of the
    suites: here and in `python -m keras_attention.bench`."""
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--out", default="runs/bench", help="output folder")
    parser.add_argument(
        "--peak-tflops",
        type=positive_float,
        help="gpu suite: the chip's dense bfloat16 TFLOP/s that its fractions "
        "divide by (default 989, an H100 / H200 SXM)",
    )


def run(args):
    from keras_attention.bench import run_suites

    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    run_suites(args.suite, quick=args.quick, out=args.out, peak_flops=peak)
