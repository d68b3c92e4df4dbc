"""Beam search against greedy search, generic against ancestry, in one process.

    python benchmarks/beam.py [--max-length 128] [--beam-width 4] [--repeats 3]

The seq2seq `Transformer` of issue 37 (d_model 256, 8 heads, 4 + 4 blocks,
feed-forward 1024, vocabulary 1000, sources of 32 tokens, batch 16), every
search compiled with XLA and run the full `max_length` steps (no end token),
timed in turns (`time_alternating`): greedy search, the generic
`decoding.beam_search` (cache repeated per beam and gathered by the surviving
beams at every step) and `decoding.ancestry_beam_search` (what `generate`
runs for the Transformer: no cache gathered), and greedy search over the
sources repeated `beam_width` times (`greedy_x_k_rows`: the dense work of
`k` beams per source with nothing gathered or ranked, the floor of any
beam search that runs its beams as rows). Prints each median and the
beam / greedy time ratios; checks that both beam searches agree.
"""

import argparse

import numpy as np

NO_END_TOKEN = -1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import keras
    from keras import ops

    from keras_attention.bench.common import time_alternating
    from keras_attention.decoding import (
        beam_search,
        greedy_search,
        model_beam_search,
    )
    from keras_attention.models import Transformer
    from keras_attention.utils.backend import compile_function

    keras.utils.set_random_seed(0)
    vocabulary, source_length = 1000, 32
    model = Transformer(
        vocabulary,
        vocabulary,
        hidden_dim=args.width,
        num_heads=args.heads,
        num_encoder_layers=args.blocks,
        num_decoder_layers=args.blocks,
        intermediate_dim=4 * args.width,
        max_source_length=source_length,
        max_target_length=args.max_length,
    )
    source = np.random.default_rng(0).integers(
        4, vocabulary, (args.batch_size, source_length)
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
    same = np.array_equal(
        np.asarray(calls["beam_generic"][0](source)),
        np.asarray(calls["beam_ancestry"][0](source)),
    )
    timings = time_alternating(calls, repeats=args.repeats)
    print(
        f"{keras.backend.backend()}, XLA; d={args.width}, {args.heads} heads, "
        f"{args.blocks}+{args.blocks} blocks, batch {args.batch_size}, "
        f"{length} tokens, beam width {k}; median of {args.repeats}, alternating"
    )
    for name, timing in timings.items():
        print(
            f"{name:14s} {1e3 * timing['median_s']:9.1f} ms "
            f"({1e3 * timing['min_s']:.1f}-{1e3 * timing['max_s']:.1f})"
        )
    greedy_s = timings["greedy"]["median_s"]
    for name in ("greedy_x_k_rows", "beam_generic", "beam_ancestry"):
        print(f"{name} / greedy: {timings[name]['median_s'] / greedy_s:.2f}x")
    print(f"beam searches agree: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
