"""Training on several devices or machines, with TensorFlow's
`tf.distribute` or with Keras' own `keras.distribution` on JAX.

The training subcommands take `--strategy`: `default` (one device);
`mirrored`, `multi-worker` and `tpu`, the `tf.distribute` strategies of the
TensorFlow backend; `data-parallel` and `model-parallel`, the
`keras.distribution` distributions of the JAX backend (`strategy=` in
Python, where a `tf.distribute.Strategy` or `keras.distribution.Distribution`
object is accepted too). The model is built and compiled in the strategy's
scope and every batch is split between the replicas, so `--batch-size` is the
global batch: each of R replicas trains on `batch_size / R` examples per step
and their gradients are averaged, which makes a step the same as one step on
one device over the whole batch.
"""

import contextlib
import json
import os

import keras

from keras_attention.names import (
    KERAS_DISTRIBUTIONS,
    SLOWER_WITH_XLA_ON_CPU,
    STRATEGIES,
    TF_STRATEGIES,
)
from keras_attention.tasks.common import prepare_output
from keras_attention.utils import keras_internals
from keras_attention.utils.backend import num_workers


def make_strategy(strategy="default", model_shards=None):
    """The `tf.distribute.Strategy` or `keras.distribution.Distribution`
    called `strategy`.

    Args:
        strategy: a strategy or distribution object (returned as is) or one
            of `STRATEGIES`: `"default"`, the one device the backend places
            work on; on TensorFlow, `"mirrored"`, `MirroredStrategy` over
            every GPU, or over every logical CPU device where there is no GPU
            and the CPU has been split into several
            (`tf.config.set_logical_device_configuration`), `"multi-worker"`,
            `MultiWorkerMirroredStrategy` over the machines listed in the
            `TF_CONFIG` environment variable (every worker runs the same
            command), and `"tpu"`, `TPUStrategy` on the TPU that
            `TPUClusterResolver` finds; on JAX, `"data-parallel"`,
            `keras.distribution.DataParallel` over every device, and
            `"model-parallel"`, `keras.distribution.ModelParallel` over a
            `(batch, model)` mesh of every device, the Transformer blocks'
            attention and feed-forward kernels split along `model`
            (`models.transformer_layout_map`). On JAX, several processes
            (one per host) join when the `KERAS_DISTRIBUTION_JOB_ADDRESSES`,
            `KERAS_DISTRIBUTION_NUM_PROCESSES` and
            `KERAS_DISTRIBUTION_PROCESS_ID` environment variables are set
            (`keras.distribution.initialize`); the devices are then those of
            every process.
        model_shards: with `"model-parallel"`, the devices of the `model`
            axis (default: all of them); the others make the `batch` axis.

    Returns:
        The strategy or distribution, or None for `"default"`.
    """
    if not isinstance(strategy, str):
        return strategy
    if strategy not in STRATEGIES:
        raise ValueError(
            f"`strategy` must be one of {STRATEGIES}; received {strategy!r}."
        )
    if model_shards is not None and strategy != "model-parallel":
        raise ValueError(
            f"`model_shards` applies to `strategy='model-parallel'`; received "
            f"model_shards={model_shards!r} with strategy={strategy!r}."
        )
    if strategy == "default":
        return None
    if strategy in KERAS_DISTRIBUTIONS:
        return _keras_distribution(strategy, model_shards)
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"`strategy={strategy!r}` uses tf.distribute and needs the TensorFlow "
            f"backend; the backend is {keras.backend.backend()!r} (on JAX, "
            f"train with --strategy {' or '.join(KERAS_DISTRIBUTIONS)} instead)."
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


def _keras_distribution(name, model_shards):
    if keras.backend.backend() != "jax":
        raise ValueError(
            f"`strategy={name!r}` uses keras.distribution, which trains on the "
            f"JAX backend (KERAS_BACKEND=jax); the backend is "
            f"{keras.backend.backend()!r} (on TensorFlow, train with "
            f"--strategy {' or '.join(TF_STRATEGIES)})."
        )
    _join_processes()
    devices = keras.distribution.list_devices()
    # Over several processes each reads its own share of a batch
    # (`local_batches`): Keras' own sharding needs a batch size that it can
    # read from the data set, which the tasks' mapped pipelines do not show.
    if name == "data-parallel":
        return keras.distribution.DataParallel(
            devices=devices, auto_shard_dataset=False
        )
    shards = len(devices) if model_shards is None else model_shards
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(
            f"`model_shards` must be a positive integer; received {shards!r}."
        )
    if len(devices) % shards:
        raise ValueError(
            f"`model_shards` must divide the {len(devices)} devices into a "
            f"(batch, model) mesh; received model_shards={shards}."
        )
    if _num_processes() > 1 and shards > len(devices) // _num_processes():
        raise ValueError(
            f"`model_shards={shards}` would split weights between processes "
            f"({_num_processes()} processes of {len(devices) // _num_processes()} "
            "devices), and Keras 3.15 cannot save (checkpoint) a variable whose "
            "shards live in other processes; use at most "
            f"{len(devices) // _num_processes()} model shards, so that each "
            "process holds whole weights, or data-parallel."
        )
    from keras_attention.models import transformer_layout_map

    mesh = keras.distribution.DeviceMesh(
        (len(devices) // shards, shards), ("batch", "model"), devices
    )
    return keras.distribution.ModelParallel(
        layout_map=transformer_layout_map(mesh),
        batch_dim_name="batch",
        auto_shard_dataset=False,
    )


def _num_processes():
    import jax

    return jax.process_count()


def _join_processes():
    """`keras.distribution.initialize` once, where the environment names
    several processes (before JAX does anything else)."""
    global _joined
    if _joined:
        return
    if int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1") or 1) <= 1:
        return
    for name in ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_PROCESS_ID"):
        if not os.environ.get(name):
            raise ValueError(
                f"KERAS_DISTRIBUTION_NUM_PROCESSES is set, {name} is not: set "
                "KERAS_DISTRIBUTION_JOB_ADDRESSES (the coordinator's host:port "
                "first), KERAS_DISTRIBUTION_NUM_PROCESSES and "
                "KERAS_DISTRIBUTION_PROCESS_ID (0, 1, ...) on every process."
            )
    keras.distribution.initialize()
    _joined = True


_joined = False


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


def is_keras_distribution(strategy):
    return isinstance(
        strategy, (keras.distribution.DataParallel, keras.distribution.ModelParallel)
    )


def spans_processes(strategy):
    """Whether `strategy` is a `keras.distribution` over several processes."""
    return is_keras_distribution(strategy) and _num_processes() > 1


class BatchEndsInTheLoop(keras.callbacks.Callback):
    """Makes Keras call every callback's batch-end methods in the training
    loop, between steps, as it does on TensorFlow.

    On JAX and PyTorch, Keras runs them in a thread of their own when every
    callback leaves them to the base class (or says `async_safe`): that
    thread turns the step's outputs into numbers while the loop goes on.
    With a distribution over several processes, that reading and the loop's
    next programs both involve arrays that span the processes, and two CI
    runs hung there, in both processes the loop computing the validation
    metrics and the other thread waiting for a step's outputs. A callback
    with batch-end methods of its own (these do nothing) turns that thread
    off.
    """

    def on_train_batch_end(self, batch, logs=None):
        pass

    def on_test_batch_end(self, batch, logs=None):
        pass

    def on_predict_batch_end(self, batch, logs=None):
        pass


def callbacks_for(strategy):
    """The callbacks `fit` needs under `strategy`: `BatchEndsInTheLoop`
    where it spans processes, none otherwise."""
    return [BatchEndsInTheLoop()] if spans_processes(strategy) else []


def num_replicas(strategy):
    """How many shares every batch is split into."""
    if strategy is None:
        return 1
    if is_keras_distribution(strategy):
        mesh = strategy.device_mesh
        return mesh.shape[list(mesh.axis_names).index(strategy.batch_dim_name)]
    return strategy.num_replicas_in_sync


def scope(strategy):
    """The context to build and compile a model in, for `strategy`."""
    return contextlib.nullcontext() if strategy is None else strategy.scope()


def jit_for(strategy, jit_compile, model_key=None):
    """Whether to train with XLA, and why, as `(bool, str)`.

    Args:
        strategy: the distribution strategy or None. Under a `tf.distribute`
            one, XLA is off: Keras compiles the step of all replicas as one
            XLA function, which cannot hold variables on several devices
            (TPUStrategy compiles with XLA by itself). Under a
            `keras.distribution` one (JAX), every step is compiled.
        jit_compile: True or False forces the choice; None takes what was
            measured faster: off for the models of `SLOWER_WITH_XLA_ON_CPU`
            on the TensorFlow backend with no GPU, on otherwise.
        model_key: `"task/model"` as the `xla` suite names it.
    """
    if is_keras_distribution(strategy):
        return True, "XLA (JAX compiles every step)"
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
    machine), `out_dir/worker-N` on the other workers of a multi-worker run
    (`out_dir/process-N` on the other processes of a `keras.distribution`
    run), so that workers sharing a file system never write the same file."""
    if is_keras_distribution(strategy):
        import jax

        index = jax.process_index()
        return out_dir if index == 0 else os.path.join(out_dir, f"process-{index}")
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

    Under a `keras.distribution` distribution this is its scope, in which
    Keras' JAX trainer splits every batch along the mesh's batch axis (and,
    for `ModelParallel`, the model must have weights the layout map splits).

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
    if is_keras_distribution(strategy):
        _check_sharded(model, strategy)
        # Keras' JAX trainer shards each batch by the distribution in scope.
        return strategy.scope()
    if num_workers(strategy) <= 1:
        return contextlib.nullcontext()
    if keras_internals.model_strategy(model) is not strategy:
        raise RuntimeError(
            f"training_scope expects a model built in the scope of {strategy!r}; "
            f"this Keras version ({keras.__version__}) or this model keeps "
            f"{keras_internals.model_strategy(model)!r}."
        )
    keras_internals.forget_model_strategy(model)
    model.train_step = _with_batch_axis(model.train_step)
    model.test_step = _with_batch_axis(model.test_step)
    return strategy.scope()


def _check_sharded(model, distribution):
    """Fails where model parallelism would split nothing (a model without
    Transformer blocks): every weight would be copied on every device."""
    if not isinstance(distribution, keras.distribution.ModelParallel):
        return
    for variable in model.weights:
        layout = distribution.get_variable_layout(variable)
        if any(axis is not None for axis in layout.axes):
            return
    raise ValueError(
        f"--strategy model-parallel splits the attention and feed-forward "
        f"kernels of Transformer blocks between devices; {type(model).__name__} "
        "has none, so every device would hold every weight. Use --strategy "
        "data-parallel."
    )


def _with_batch_axis(step):
    def step_with_batch_axis(data):
        return {
            name: keras.ops.reshape(value, (1,)) for name, value in step(data).items()
        }

    return step_with_batch_axis


def prepare(strategy, out_dir, batch_size=None, seed=None):
    """Makes the strategy and this worker's output folder for a run.

    The strategy comes first: a multi-worker one must exist before any other
    TensorFlow op. Then `batch_size`, where given, must split evenly between
    the replicas; and `seed`, where given, seeds every random number
    generator, so that what the run draws (the order its data are shuffled
    in, its initial weights) depends on the seed alone, not on what ran
    before in the process (`keras.distribution.initialize`, say, which seeds
    them at random).

    Returns:
        `(strategy, out_dir)`: the strategy (None for `"default"`) and the
        created folder this process writes to (`worker_output`).
    """
    strategy = make_strategy(strategy)
    if batch_size is not None:
        check_global_batch(batch_size, strategy)
    if seed is not None:
        keras.utils.set_random_seed(seed)
    return strategy, prepare_output(worker_output(out_dir, strategy))


def local_batches(dataset, strategy, uneven=False):
    """The batches of `dataset` this process trains on under `strategy`.

    Keras' JAX trainer places every batch on the mesh's batch axis, which
    needs a batch size that the axis divides, and, over several processes,
    takes from each process its own share of the global batch. Under a
    `keras.distribution`: with `uneven`, batches the batch axis cannot split
    evenly (the last, partial batch of a validation split, say) lose their
    last rows, fewer than the axis's size;
    over several processes, every process reads the whole data set and keeps
    its slice of every batch (the first process the first slice), so that
    all processes take the same steps. Under anything else, `dataset` is
    returned as is (`tf.distribute` splits batches itself).
    """
    if not is_keras_distribution(strategy):
        return dataset
    replicas = num_replicas(strategy)
    if uneven and replicas > 1:

        def not_empty(*batch):
            return _batch_size(batch) > 0

        dataset = _cut_batches(
            dataset, lambda size: (0, size // replicas * replicas)
        ).filter(not_empty)
    processes = _num_processes()
    if processes > 1:
        import jax

        index = jax.process_index()

        def own_share(size):
            share = size // processes
            return index * share, (index + 1) * share

        dataset = _cut_batches(dataset, own_share)
    return dataset


def _batch_size(batch):
    import tensorflow as tf

    return tf.shape(tf.nest.flatten(batch)[0])[0]


def _cut_batches(dataset, rows):
    """`dataset` with every batch cut to its rows `start:stop`, where
    `(start, stop) = rows(batch size)`."""
    import tensorflow as tf

    def cut(*batch):
        start, stop = rows(_batch_size(batch))
        batch = tf.nest.map_structure(lambda t: t[start:stop], batch)
        return batch if len(batch) > 1 else batch[0]

    return dataset.map(cut)


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
    if is_keras_distribution(strategy):
        mesh = strategy.device_mesh
        axes = " x ".join(
            f"{name} {size}"
            for name, size in zip(mesh.axis_names, mesh.shape, strict=True)
        )
        return (
            f"{type(strategy).__name__} over {mesh.devices.size} devices "
            f"({axes}; {_num_processes()} process(es))"
        )
    return f"{type(strategy).__name__} over {num_replicas(strategy)} replicas"
