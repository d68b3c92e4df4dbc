"""Training runs under `keras.distribution` on the JAX backend, each in a
fresh process (the backend, the virtual CPU devices and the processes'
coordinator are fixed when JAX starts). Run with `KERAS_BACKEND=jax` and
`XLA_FLAGS=--xla_force_host_platform_device_count=N`:

- `python -m tests.tasks.distribution_runs train STRATEGY OUT [SHARDS]`
  trains the Transformer with `--strategy STRATEGY` (and SHARDS model
  shards) in OUT; one run per process, as the command line runs it;
- `python -m tests.tasks.distribution_runs shardings OUT` writes to
  `OUT/shardings.json` the mesh axes each weight of a Transformer is split
  along under model parallelism with two shards, and whether a model without
  Transformer blocks is refused;
- `python -m tests.tasks.distribution_runs subcommands OUT CAPTIONS_FOLDER
  CORPUS` trains `caption`, `lm` (on the text file CORPUS) and `gan`
  data-parallel over every device, one epoch each at a tiny size;
- `python -m tests.tasks.distribution_runs processes STRATEGY OUT`, started
  once per process with the `KERAS_DISTRIBUTION_*` variables set, trains
  with `data-parallel` or `model-parallel` over every process's devices
  (processes other than 0 write `OUT/process-N`), and prints whether every
  batch end ran in the training loop's thread.
"""

import faulthandler
import json
import os
import sys

from tests.tasks.held_out import score_few_held_out_pairs

# Set by the tests: after this many seconds print where every thread is and
# exit, so that a run hung in a collective says where.
if os.environ.get("DISTRIBUTION_RUNS_HANG_SECONDS"):
    faulthandler.dump_traceback_later(
        int(os.environ["DISTRIBUTION_RUNS_HANG_SECONDS"]), exit=True
    )

# A tiny Transformer on the date task, two epochs of a global batch of 32,
# without dropout (its masks would differ with the layout of the batch).
TRANSLATE = {
    "data": "dates",
    "model": "transformer",
    "epochs": 2,
    "num_train": 320,
    "batch_size": 32,
    "beam_width": 1,
    "verbose": 0,
    "dropout": 0.0,
    "hidden_dim": 32,
    "num_heads": 4,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "intermediate_dim": 64,
}


def train(strategy, out, model_shards=None):
    from keras_attention.tasks import distribute
    from keras_attention.tasks.translate import run_translate

    shards = None if model_shards is None else int(model_shards)
    strategy = distribute.make_strategy(strategy, model_shards=shards)
    score_few_held_out_pairs()
    run_translate(out, strategy=strategy, **TRANSLATE)


def shardings(out):
    from keras_attention.models import RNNSeq2Seq, Transformer
    from keras_attention.tasks import distribute

    distribution = distribute.make_strategy("model-parallel", model_shards=2)
    options = {
        key: TRANSLATE[key]
        for key in ("hidden_dim", "num_heads", "intermediate_dim", "dropout")
    }
    with distribution.scope():
        model = Transformer(
            100,
            120,
            num_encoder_layers=1,
            num_decoder_layers=1,
            max_source_length=8,
            max_target_length=8,
            **options,
        )
        rnn = RNNSeq2Seq(100, 120, hidden_dim=16, attention="bahdanau")
    results = {
        "replicas": distribute.num_replicas(distribution),
        "shardings": {
            variable.path: list(variable.value.sharding.spec)
            for variable in model.weights
        },
    }
    try:
        with distribute.training_scope(rnn, distribution):
            pass
    except ValueError as error:
        results["rnn_refused"] = str(error)
    with open(os.path.join(out, "shardings.json"), "w") as f:
        json.dump(results, f)


def processes(strategy, out):
    from keras_attention.tasks import distribute
    from keras_attention.tasks.translate import run_translate

    # Model parallelism splits the weights within each process, of two
    # devices here (see `distribute.make_strategy`).
    shards = 2 if strategy == "model-parallel" else None
    strategy = distribute.make_strategy(strategy, model_shards=shards)
    score_few_held_out_pairs()
    where = WhereBatchEndsRun()
    run_translate(out, strategy=strategy, callbacks=[where], **TRANSLATE)
    print(f"batch ends ran in the training loop only: {where.threads == {True}}")


def WhereBatchEndsRun():
    """A callback that records, for every batch end, whether Keras called it
    in the training loop's thread; it leaves Keras free to call it in a
    thread of its own (`async_safe`)."""
    import threading

    import keras

    class Recorder(keras.callbacks.Callback):
        async_safe = True

        def __init__(self):
            super().__init__()
            self.threads = set()

        def _record(self, batch, logs=None):
            self.threads.add(threading.current_thread() is threading.main_thread())

        on_train_batch_end = on_test_batch_end = _record

    return Recorder()


def subcommands(out, captions_folder, corpus):
    # Every subcommand takes its strategy through the same runner
    # (tasks/runner.py: the scope, the distributed datasets, the folder);
    # these three cover what differs between them under a distribution:
    # Keras' step with a model loss on images and tokens, then beam search
    # and the attention plots on the replicated weights (caption); batches
    # that repeat for a fixed number of steps, then perplexity (lm); a step
    # of the model's own (gan). translate, Keras' step without a model loss:
    # the `train` runs above. classify and pretrain train with Keras' step on
    # token ids like lm, and ran here until CI's time was cut (38 and 15 s
    # of this run's 138 s).
    from keras_attention.tasks import caption, distribute, gan, lm

    strategy = distribute.make_strategy("data-parallel")
    tiny = {"epochs": 1, "verbose": 0, "strategy": strategy}
    caption.run_caption(
        os.path.join(out, "caption"),
        data=captions_folder,
        batch_size=16,
        beam_width=1,
        encoder_filters=(4, 8),
        units=16,
        **tiny,
    )
    lm.run_lm(
        os.path.join(out, "lm"),
        data=corpus,
        num_train=500,
        batch_size=8,
        steps_per_epoch=3,
        hidden_dim=32,
        num_heads=2,
        num_layers=1,
        intermediate_dim=64,
        **tiny,
    )
    # SAGAN's own step: one program over the global batch, whose batch-norm
    # statistics need no cross-replica synchronization.
    gan.run_gan(
        os.path.join(out, "gan"),
        data="digits",
        steps_per_epoch=2,
        batch_size=32,
        width=8,
        fid_samples=50,
        ema_decay=0.9,
        **tiny,
    )


if __name__ == "__main__":
    modes = {
        "train": train,
        "shardings": shardings,
        "processes": processes,
        "subcommands": subcommands,
    }
    modes[sys.argv[1]](*sys.argv[2:])
