"""Packed against padded rows: GPT's training throughput and held-out
perplexity on the fortunes (`keras-attention lm --pack`).

    python benchmarks/packing.py [--quick] [--out DIR] [--seeds 0 1 2]

Both layouts hold whole documents (`keras_attention.data.packing`): *padded*
puts one document (or a row-long piece of a long one) per row, the rest
padding, and feeds GPT the token ids; *packed* fills each row with documents
by best fit and feeds GPT `{"token_ids", "segment_ids"}`, so that each
document attends only to itself and its positions restart. The two train
in one process, in turns: each round trains the padded model `--steps`
steps of `--batch-size` rows of `--sequence-length` tokens, then the packed
one, each timed (the first round, which compiles, is not counted). Tokens
per second count real (not padding) target tokens. The packed batches hold
the same number of real tokens as the padded ones:

- `--packed-batch matched` (the default): fewer packed rows a batch (as many
  as hold the padded batch's real tokens), the same number of steps: both
  models take the same steps on the same amount of text, so their held-out
  perplexities compare;
- `--packed-batch same`: batches of the same shape, the packed model taking
  fewer steps (as many as hold the same real tokens): the throughput at one
  batch shape.

After the rounds, both models have trained on the same number of real
tokens; their perplexity is measured on the same held-out documents (the
test split of `lm`, each document read alone). Every seed starts both models
from the same weights.

Writes `packing.json` and `packing.png` under `--out` (default
`runs/bench`).
"""

import argparse
import json
import os
import statistics
import sys
import time

FULL = {
    "batch_size": 16,
    "sequence_length": 256,
    "steps": 10,
    "rounds": 11,
    "seeds": (0, 1, 2),
    "model": {},
    "packed_batch": "matched",
}
QUICK = {
    "batch_size": 4,
    "sequence_length": 64,
    "steps": 2,
    "rounds": 3,
    "seeds": (0,),
    "model": {"hidden_dim": 32, "num_heads": 2, "num_layers": 1},
    "num_train": 300,
    "packed_batch": "matched",
}


def _batches(rows, batch_size, seed, packed):
    """An endless iterator of NumPy batches `(inputs, targets, weights)`."""
    from keras_attention.data.packing import packed_dataset

    dataset = packed_dataset(
        rows,
        batch_size,
        None if packed else (lambda token_ids, segment_ids: token_ids),
        shuffle=True,
        seed=seed,
        repeat=True,
    )
    return dataset.as_numpy_iterator()


def _train(model, batches, steps):
    """Trains `steps` batches; returns `(seconds, real target tokens)`."""
    tokens = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        inputs, targets, weights = next(batches)
        model.train_on_batch(inputs, targets, sample_weight=weights)
        tokens += float(weights.sum())
    return time.perf_counter() - start, tokens


def run_seed(config, data, seed):
    """Both layouts trained in turns from the same weights; their figures."""
    import keras

    from keras_attention.data.packing import pack_documents, padding_fraction
    from keras_attention.tasks import runner
    from keras_attention.tasks.lm import build_model, packed_perplexity

    length, batch_size = config["sequence_length"], config["batch_size"]
    rows = {
        "padded": pack_documents(data["train"], length, "padded", seed=seed),
        "packed": pack_documents(data["train"], length, "packed", seed=seed),
    }
    fractions = {name: padding_fraction(r) for name, r in rows.items()}
    # How many packed rows hold the real tokens of one padded row.
    density = (1 - fractions["padded"]) / (1 - fractions["packed"])
    steps = {"padded": config["steps"], "packed": config["steps"]}
    batch_sizes = {"padded": batch_size, "packed": batch_size}
    if config["packed_batch"] == "same":
        steps["packed"] = max(1, round(config["steps"] * density))
    else:
        batch_sizes["packed"] = max(1, round(batch_size * density))
    models, batches = {}, {}
    for name in rows:
        keras.utils.set_random_seed(seed)  # the same initial weights
        models[name] = runner.compile_with_adam(
            build_model("gpt", data["vocabulary_size"], length, **config["model"]),
            jit_compile=False,
        )
        batches[name] = _batches(rows[name], batch_sizes[name], seed, name == "packed")
    timings = {name: [] for name in rows}
    trained = {name: 0.0 for name in rows}
    order = list(rows)
    for round_ in range(config["rounds"]):
        for name in order if round_ % 2 else order[::-1]:
            seconds, tokens = _train(models[name], batches[name], steps[name])
            trained[name] += tokens
            if round_:  # the first round compiles
                timings[name].append(tokens / seconds)
        print(
            f"seed {seed} round {round_ + 1}/{config['rounds']}: "
            + ", ".join(
                f"{name} {timings[name][-1]:,.0f} tokens/s"
                for name in order
                if timings[name]
            ),
            flush=True,
        )
    result = {"seed": seed}
    for name in order:
        result[name] = {
            "rows": int(len(rows[name]["token_ids"])),
            "padding_fraction": fractions[name],
            "steps_per_round": steps[name],
            "batch_size": batch_sizes[name],
            "train_tokens": trained[name],
            "tokens_per_second": timings[name],
            "median_tokens_per_second": statistics.median(timings[name]),
            "perplexity": packed_perplexity(
                models[name], data["test_rows"], batch_size
            ),
        }
    result["speedup"] = (
        result["packed"]["median_tokens_per_second"]
        / result["padded"]["median_tokens_per_second"]
    )
    return result


def load_data(config):
    """The fortunes' training documents and the held-out test rows."""
    from keras_attention.data.language_modeling import (
        character_tokenizer,
        load_language_model_texts,
    )
    from keras_attention.data.packing import pack_documents, split_stream
    from keras_attention.data.pipeline import token_stream

    splits = load_language_model_texts("fortunes", seed=0)
    tokenizer = character_tokenizer()
    train = splits["train"][: config.get("num_train")]
    test = splits["test"][: config.get("num_train")]
    return {
        "vocabulary_size": tokenizer.vocabulary_size(),
        "train": split_stream(token_stream(train, tokenizer)),
        "test_rows": pack_documents(
            split_stream(token_stream(test, tokenizer)), config["sequence_length"]
        ),
        "train_documents": len(train),
        "test_documents": len(test),
    }


def summarize(results):
    seeds = results["seeds"]
    summary = {"speedup": [s["speedup"] for s in seeds]}
    for name in ("padded", "packed"):
        perplexities = [s[name]["perplexity"] for s in seeds]
        summary[name] = {
            "median_tokens_per_second": statistics.median(
                s[name]["median_tokens_per_second"] for s in seeds
            ),
            "padding_fraction": statistics.mean(
                s[name]["padding_fraction"] for s in seeds
            ),
            "perplexity_mean": statistics.mean(perplexities),
            "perplexity_min": min(perplexities),
            "perplexity_max": max(perplexities),
        }
    return summary


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"padded": "tab:gray", "packed": "tab:blue"}
    figure, (speed, quality) = plt.subplots(1, 2, figsize=(10, 4))
    for seed in results["seeds"]:
        for name, color in colors.items():
            values = seed[name]["tokens_per_second"]
            speed.plot(
                range(2, len(values) + 2),
                values,
                "o-",
                color=color,
                alpha=0.7,
                label=f"{name}" if seed is results["seeds"][0] else None,
            )
    speed.set_xlabel("round")
    speed.set_ylabel("real tokens per second (training)")
    speed.set_ylim(bottom=0)
    speed.legend()
    speed.set_title(
        f"packed / padded: {statistics.median(results['summary']['speedup']):.2f}x"
    )
    for i, name in enumerate(colors):
        values = [s[name]["perplexity"] for s in results["seeds"]]
        quality.scatter([i] * len(values), values, color=colors[name], s=40)
    quality.set_xticks([0, 1], list(colors))
    quality.set_xlim(-0.5, 1.5)
    quality.set_ylabel("held-out perplexity per character (a dot a seed)")
    steps = results["config"]["rounds"] * results["config"]["steps"]
    quality.set_title(f"after the same real tokens ({steps} padded steps)")
    config = results["config"]
    first = results["seeds"][0]
    figure.suptitle(
        f"GPT on the fortunes: padded {first['padded']['batch_size']} x "
        f"{config['sequence_length']}, packed {first['packed']['batch_size']} x "
        f"{config['sequence_length']} tokens a batch "
        f"({results['machine']['cores']} cores, {results['machine']['backend']})"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny run (a test)")
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="padded steps a round")
    parser.add_argument("--batch-size", type=int, default=None, help="padded rows")
    parser.add_argument(
        "--packed-batch",
        choices=("matched", "same"),
        default=None,
        help="packed batches of as many real tokens in fewer rows, the same "
        "steps (matched, default), or of as many rows, fewer steps (same)",
    )
    args = parser.parse_args(argv)
    config = dict(QUICK if args.quick else FULL)
    for key in ("seeds", "rounds", "steps", "batch_size", "packed_batch"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    if config["rounds"] < 2:
        parser.error("--rounds must be at least 2 (the first one compiles)")

    from keras_attention.bench.common import machine
    from keras_attention.utils.files import write_text

    started = time.perf_counter()
    data = load_data(config)
    results = {
        "suite": "packing",
        "quick": args.quick,
        "command": "python benchmarks/packing.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "config": {**config, "seeds": list(config["seeds"])},
        "train_documents": data["train_documents"],
        "test_documents": data["test_documents"],
        "test_tokens": int(data["test_rows"]["weights"].sum()),
        "seeds": [run_seed(config, data, seed) for seed in config["seeds"]],
    }
    results["summary"] = summarize(results)
    results["seconds"] = time.perf_counter() - started
    os.makedirs(args.out, exist_ok=True)
    write_text(
        os.path.join(args.out, "packing.json"), json.dumps(results, indent=2) + "\n"
    )
    plot(results, os.path.join(args.out, "packing.png"))
    summary = results["summary"]
    print(
        f"packed {summary['packed']['median_tokens_per_second']:,.0f} vs padded "
        f"{summary['padded']['median_tokens_per_second']:,.0f} real tokens/s "
        f"(speedups {', '.join(f'{s:.2f}x' for s in summary['speedup'])}); "
        f"perplexity packed {summary['packed']['perplexity_mean']:.3f} "
        f"[{summary['packed']['perplexity_min']:.3f}, "
        f"{summary['packed']['perplexity_max']:.3f}], padded "
        f"{summary['padded']['perplexity_mean']:.3f} "
        f"[{summary['padded']['perplexity_min']:.3f}, "
        f"{summary['padded']['perplexity_max']:.3f}]; padding "
        f"{summary['packed']['padding_fraction']:.1%} vs "
        f"{summary['padded']['padding_fraction']:.1%}; wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
