"""Beam search against greedy search, generic against ancestry, in one process.

    python benchmarks/beam.py [--max-length 128] [--beam-width 4] [--repeats 3]
    KERAS_BACKEND=jax python benchmarks/beam.py --gpu-suite   # the GPU decode case

The seq2seq `Transformer` of issue 37 (d_model 256, 8 heads, 4 + 4 blocks,
feed-forward 1024, vocabulary 1000, sources of 32 tokens, batch 16), every
search compiled with XLA and run the full `max_length` steps (no end token),
timed in turns (`time_alternating`): greedy search, the generic
`decoding.beam_search` (cache repeated per beam and gathered by the surviving
beams at every step) and `decoding.ancestry_beam_search` (what `generate`
runs for the Transformer: no cache gathered), and greedy search over the
sources repeated `beam_width` times (`greedy_x_k_rows`: the dense work of
`k` beams per source with nothing gathered or ranked, the floor of any
beam search that runs its beams as rows). Prints each median, the time per
step and the beam / greedy time ratios; checks that both beam searches
agree (every row under float32; under a mixed policy the two attend over
differently laid out caches, so a near tie may round either way: the share
of rows that agree is printed, not required).

`--gpu-suite` takes the GPU suite's decode case (`keras_attention.bench.gpu`:
the `seq2seq` suite's Transformer, `bench.seq2seq.build_model`, at width 512,
8 heads, 2 + 2 blocks; batch 32, sources of 64 tokens, 256 steps,
`mixed_bfloat16`, median of 5); the other options override it. It needs
only Keras and the backend (JAX on a GPU: no TensorFlow, no keras-hub).
"""

import argparse
import os

import numpy as np

NO_END_TOKEN = -1
DEFAULTS = {
    "max_length": 128,
    "beam_width": 4,
    "batch_size": 16,
    "source_length": 32,
    "vocabulary": 1000,
    "width": 256,
    "heads": 8,
    "blocks": 4,
    "policy": "float32",
    "repeats": 3,
}
# `keras_attention.bench.gpu`'s decode case (its FULL["decode"]).
GPU_SUITE = {
    **DEFAULTS,
    "max_length": 256,
    "batch_size": 32,
    "source_length": 64,
    "width": 512,
    "heads": 8,
    "blocks": 2,
    "policy": "mixed_bfloat16",
    "repeats": 5,
}


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gpu-suite",
        action="store_true",
        help="the GPU suite's decode case (the other options override it)",
    )
    for name, value in DEFAULTS.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=type(value), default=None)
    args = parser.parse_args(argv)
    config = GPU_SUITE if args.gpu_suite else DEFAULTS
    for name, value in config.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def build(args):
    from keras_attention.models import Transformer

    if args.gpu_suite:  # the suite's own model (heads of 64, 2 + 2 blocks)
        from keras_attention.bench.seq2seq import build_model

        return build_model(
            "transformer",
            args.width,
            args.source_length,
            args.vocabulary,
            target_length=args.max_length,
        )
    return Transformer(
        args.vocabulary,
        args.vocabulary,
        hidden_dim=args.width,
        num_heads=args.heads,
        num_encoder_layers=args.blocks,
        num_decoder_layers=args.blocks,
        intermediate_dim=4 * args.width,
        max_source_length=args.source_length,
        max_target_length=args.max_length,
    )


def main(argv=None):
    args = parse(argv)

    import keras
    from keras import ops

    from keras_attention.bench.common import time_alternating
    from keras_attention.decoding import (
        beam_search,
        greedy_search,
        model_beam_search,
    )
    from keras_attention.utils.backend import compile_function

    keras.config.set_dtype_policy(args.policy)
    keras.utils.set_random_seed(0)
    model = build(args)
    source = np.random.default_rng(0).integers(
        4, args.vocabulary, (args.batch_size, args.source_length)
    )
    source = source.astype("int32")
    length, k = args.max_length, args.beam_width

    def greedy(source):
        cache = model.initial_cache(source, length)
        return greedy_search(
            model.decode_step,
            cache,
            ops.shape(source)[0],
            length,
            model.start_token_id,
            NO_END_TOKEN,
        )

    def greedy_rows(source):  # the dense work of k beams, nothing moved
        return greedy(ops.repeat(source, k, axis=0))

    def generic(source):
        cache = model.initial_cache(source, length)
        return beam_search(
            model.decode_step,
            cache,
            ops.shape(source)[0],
            length,
            model.start_token_id,
            NO_END_TOKEN,
            beam_width=k,
        )

    def ancestry(source):
        return model_beam_search(model, source, length, k, end_id=NO_END_TOKEN)

    variables = [*model.trainable_variables, *model.non_trainable_variables]
    calls = {
        name: (compile_function(fn, variables, jit_compile=True), (source,))
        for name, fn in (
            ("greedy", greedy),
            ("greedy_x_k_rows", greedy_rows),
            ("beam_generic", generic),
            ("beam_ancestry", ancestry),
        )
    }
    generic_tokens = np.asarray(calls["beam_generic"][0](source))
    ancestry_tokens = np.asarray(calls["beam_ancestry"][0](source))
    agree = np.all(generic_tokens == ancestry_tokens, axis=-1)
    timings = time_alternating(calls, repeats=args.repeats)
    device = keras.backend.backend()
    if device == "jax":
        import jax

        device += f" on {jax.devices()[0].device_kind}"
    print(
        f"{device}, XLA, {args.policy}; d={args.width}, "
        f"{model.decoder_blocks[0].num_heads} heads, {len(model.encoder_blocks)}"
        f"+{len(model.decoder_blocks)} blocks, batch {args.batch_size}, source "
        f"{args.source_length}, {length} tokens, beam width {k}; median of "
        f"{args.repeats}, alternating"
    )
    for name, timing in timings.items():
        print(
            f"{name:16s} {1e3 * timing['median_s']:9.1f} ms "
            f"({1e3 * timing['min_s']:.1f}-{1e3 * timing['max_s']:.1f}), "
            f"{1e3 * timing['median_s'] / length:.3f} ms/step"
        )
    greedy_s = timings["greedy"]["median_s"]
    for name in ("greedy_x_k_rows", "beam_generic", "beam_ancestry"):
        print(f"{name} / greedy: {timings[name]['median_s'] / greedy_s:.2f}x")
    print(f"beam searches agree on {int(agree.sum())}/{agree.size} rows")
    exact = args.policy == "float32" or os.environ.get("BEAM_REQUIRE_AGREEMENT")
    return 1 if exact and not agree.all() else 0


if __name__ == "__main__":
    raise SystemExit(main())
