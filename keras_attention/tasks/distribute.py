"""Training on several devices or machines with `tf.distribute`.

The training subcommands take `--strategy default|mirrored|multi-worker|tpu`
(`strategy=` in Python, where a `tf.distribute.Strategy` object is accepted
too). The model is built and compiled in the strategy's scope and Keras'
`fit` splits every batch between the replicas, so `--batch-size` is the
global batch: each of R replicas trains on `batch_size / R` examples per step
and the gradients are summed over replicas from losses divided by R, which
makes a step the same as one step on one device over the whole batch.
"""

import contextlib
import json
import os

import keras

from keras_attention.tasks.common import prepare_output
from keras_attention.utils.backend import num_workers

STRATEGIES = ("default", "mirrored", "multi-worker", "tpu")


def make_strategy(strategy="default"):
    """The `tf.distribute.Strategy` called `strategy`.

    Args:
        strategy: a strategy object (returned as is) or one of `STRATEGIES`:
            `"default"`, the one device TensorFlow places work on;
            `"mirrored"`, `MirroredStrategy` over every GPU, or over every
            logical CPU device where there is no GPU and the CPU has been
            split into several (`tf.config.set_logical_device_configuration`);
            `"multi-worker"`, `MultiWorkerMirroredStrategy` over the machines
            listed in the `TF_CONFIG` environment variable (every worker runs
            the same command); `"tpu"`, `TPUStrategy` on the TPU that
            `TPUClusterResolver` finds.

    Returns:
        The strategy, or None for `"default"` (no distribution).
    """
    if not isinstance(strategy, str):
        return strategy
    if strategy not in STRATEGIES:
        raise ValueError(
            f"`strategy` must be one of {STRATEGIES}; received {strategy!r}."
        )
    if strategy == "default":
        return None
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"`strategy={strategy!r}` uses tf.distribute and needs the TensorFlow "
            f"backend; the backend is {keras.backend.backend()!r} (on JAX, "
            "distribute with `keras.distribution` instead)."
        )
    import tensorflow as tf

    if strategy == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if strategy == "multi-worker":
        _check_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise ValueError(f"`strategy='tpu'` found no TPU to use: {error}") from error
    return tf.distribute.TPUStrategy(resolver)


def _check_tf_config():
    text = os.environ.get("TF_CONFIG")
    example = (
        'TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
        '"task": {"type": "worker", "index": 0}}\''
    )
    if not text:
        raise ValueError(
            "`strategy='multi-worker'` reads the cluster from the TF_CONFIG "
            f"environment variable, which is not set; set it on every worker, "
            f"e.g. {example}."
        )
    try:
        config = json.loads(text)
        workers = config["cluster"]["worker"]
        task = config["task"]
        task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"TF_CONFIG must be JSON with cluster.worker (a list of host:port) "
            f"and task.type/task.index, e.g. {example}; received {text!r} "
            f"({type(error).__name__}: {error})."
        ) from None
    if not isinstance(workers, list) or not workers:
        raise ValueError(
            f"TF_CONFIG cluster.worker must be a non-empty list of host:port; "
            f"received {workers!r}."
        )


def num_replicas(strategy):
    return 1 if strategy is None else strategy.num_replicas_in_sync


def scope(strategy):
    """The context to build and compile a model in, for `strategy`."""
    return contextlib.nullcontext() if strategy is None else strategy.scope()


# The train steps that `keras-attention bench --suite xla` measured slower
# with XLA than as a TensorFlow graph on a CPU (time with XLA / without, three
# runs on a 2-core AMD EPYC, November 2026): the HAN 1.01-1.13, the captioner
# 1.02-1.03, the SAGAN 1.20-1.31. Their GRUs, LSTM cells and convolutions run
# TensorFlow's own CPU kernels in a graph. Every other model trains faster with
# XLA there (1.1-2.6x), and accelerators always compile. The LSTM language
# model was timed alone (not by the suite): at the `lm` subcommand's sizes
# (batch 32 x 256 characters, 2 x 224 units) 2.17 s per step with XLA, 0.92
# without, on the same machine; its GPT takes 0.56 with XLA, 1.03 without.
SLOWER_WITH_XLA_ON_CPU = ("classify/han", "caption/attention", "gan/sagan", "lm/lstm")


def jit_for(strategy, jit_compile, model_key=None):
    """Whether to train with XLA, and why, as `(bool, str)`.

    Args:
        strategy: the distribution strategy or None. Under one, XLA is off:
            Keras compiles the step of all replicas as one XLA function,
            which cannot hold variables on several devices (TPUStrategy
            compiles with XLA by itself).
        jit_compile: True or False forces the choice; None takes what was
            measured faster: off for the models of `SLOWER_WITH_XLA_ON_CPU`
            on the TensorFlow backend with no GPU, on otherwise.
        model_key: `"task/model"` as the `xla` suite names it.
    """
    if strategy is not None:
        return False, "no XLA under a distribution strategy"
    if jit_compile is not None:
        return bool(jit_compile), "XLA" if jit_compile else "no XLA (--no-xla)"
    if model_key in SLOWER_WITH_XLA_ON_CPU and _tensorflow_on_cpu_only():
        return False, (
            "no XLA: its train step measured faster as a TensorFlow graph on "
            "a CPU (--xla compiles it anyway)"
        )
    return True, "XLA"


def _tensorflow_on_cpu_only():
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.config.list_logical_devices("GPU")


def worker_output(out_dir, strategy):
    """Where this process writes: `out_dir` on the chief (and on a single
    machine), `out_dir/worker-N` on the other workers of a multi-worker run,
    so that workers sharing a file system never write the same file."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    task_id = getattr(resolver, "task_id", None)
    if task_type is None or task_type == "chief":
        return out_dir
    has_chief = "chief" in (resolver.cluster_spec().as_dict() or {})
    if task_type == "worker" and task_id == 0 and not has_chief:
        return out_dir
    return os.path.join(out_dir, f"{task_type}-{task_id}")


def training_scope(model, strategy):
    """The context to train `model` in with `fit`, adapting it to several
    workers where `strategy` spans them.

    Keras (3.15) cannot `fit` a model under `MultiWorkerMirroredStrategy`
    over several workers (keras-team/keras#20329): it reduces the first
    batch with `Strategy.reduce`, which takes one tensor, not the
    `(inputs, targets)` pairs these tasks train on; and it averages a step's
    outputs over workers along axis 0, which the scalar losses and metrics of
    its own train step do not have. On one worker neither happens, and
    nothing is changed (for `None` or a one-machine strategy the context does
    nothing).

    Over several workers, two changes to this model object, nothing in
    Keras: the model forgets the strategy it was built in, so that `fit`
    takes it from the scope this returns instead (Keras then builds the
    metrics when it traces the step, as it does with no strategy, rather than
    from a reduced first batch); and its `train_step` and `test_step` return
    each figure with a batch axis of one, which Keras averages over the
    replicas. Each replica's figures are those of its share of the batch, so
    the averages are the global batch's figures where the shares weigh the
    same (losses and metrics over examples), and means of the shares' means
    where they do not (the padding-weighted token losses).

    The step is otherwise Keras' own, with one difference from one device
    that Keras has under any strategy: with `clipnorm`, each replica clips
    its share of the gradient before the shares are summed.

    Args:
        model: the compiled model, built in `strategy`'s scope.
        strategy: the strategy it trains under, or None.

    Returns:
        A context manager to call `fit` (`fit_resumable`) in.
    """
    if num_workers(strategy) <= 1:
        return contextlib.nullcontext()
    if getattr(model, "_distribute_strategy", None) is not strategy:
        raise RuntimeError(
            f"training_scope expects a model built in the scope of {strategy!r}; "
            f"this Keras version ({keras.__version__}) or this model keeps "
            f"{getattr(model, '_distribute_strategy', 'no strategy')!r}."
        )
    model._distribute_strategy = None
    model.train_step = _with_batch_axis(model.train_step)
    model.test_step = _with_batch_axis(model.test_step)
    return strategy.scope()


def _with_batch_axis(step):
    def step_with_batch_axis(data):
        return {
            name: keras.ops.reshape(value, (1,)) for name, value in step(data).items()
        }

    return step_with_batch_axis


def prepare(strategy, out_dir, batch_size=None):
    """Makes the strategy and this worker's output folder for a run.

    The strategy comes first: a multi-worker one must exist before any other
    TensorFlow op. Then `batch_size`, where given, must split evenly between
    the replicas.

    Returns:
        `(strategy, out_dir)`: the strategy (None for `"default"`) and the
        created folder this process writes to (`worker_output`).
    """
    strategy = make_strategy(strategy)
    if batch_size is not None:
        check_global_batch(batch_size, strategy)
    return strategy, prepare_output(worker_output(out_dir, strategy))


def check_global_batch(batch_size, strategy):
    """Fails unless `batch_size` splits evenly between the replicas."""
    replicas = num_replicas(strategy)
    if batch_size % replicas:
        raise ValueError(
            f"The batch size is the global batch, split evenly between the "
            f"{replicas} replicas of the strategy; received {batch_size}, which "
            f"is not a multiple of {replicas}."
        )


def describe(strategy):
    """One line about where training runs."""
    if strategy is None:
        return "one device"
    return f"{type(strategy).__name__} over {num_replicas(strategy)} replicas"
