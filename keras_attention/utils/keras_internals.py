"""Every Keras internal the package uses, in one place.

Keras' public API (`keras.layers`, `keras.ops`, ...) is stable across
releases; `keras.src` and the `_`-prefixed members of Keras' classes are not.
The few internals the package cannot do without go through this module and
nowhere else (`tests/utils/test_keras_internals.py` scans the package for any
other use). Each entry of `INTERNALS` says what it is, why the package needs
it and the Keras releases it was checked on; a missing one raises
`KerasInternalMissing` naming the installed Keras, the tested range and what
is missing, when a layer that needs it is constructed rather than deep in a
call.
"""

import contextlib
import importlib
from typing import NamedTuple

import keras

# The releases CI tests (`.ci/run`, the Keras matrix); setup.cfg declares the
# lowest as its floor.
OLDEST_TESTED = "3.11.3"
NEWEST_TESTED = "3.15.1"


class KerasInternalMissing(ImportError):
    """A Keras internal the package relies on is not in the installed Keras."""


class Internal(NamedTuple):
    module: str
    name: str
    why: str
    releases: str  # the Keras releases it was checked on


INTERNALS = {
    "get_keras_mask": Internal(
        "keras.src.backend",
        "get_keras_mask",
        "reads the Keras mask a tensor carries (masking layers attach it)",
        "3.11-3.15",
    ),
    "set_keras_mask": Internal(
        "keras.src.backend",
        "set_keras_mask",
        "hides the inputs' Keras masks from the projections of "
        "MultiHeadAttention, which consumes them itself",
        "3.11-3.15",
    ),
    "draw_seed": Internal(
        "keras.src.random.seed_generator",
        "draw_seed",
        "turns a sampler's `seed` (int, SeedGenerator or None) into a seed "
        "tensor as keras.random does, for the hashed dropout",
        "3.11-3.15",
    ),
    "stateless_scope": Internal(
        "keras.src.backend.common.stateless_scope",
        "StatelessScope",
        "hands every `Variable.assign` made inside the scope to the scope's "
        "`add_update`, which `StraightThroughScope` overrides so that SAGAN's "
        "JAX step differentiates an assigned variable as TensorFlow and "
        "PyTorch do",
        "3.11-3.15",
    ),
}

# The private attribute `model._distribute_strategy` (TensorFlow trainer):
# the strategy a model was built under, which `fit` reuses instead of the one
# in scope (keras-team/keras#20329); keras 3.11-3.15.
MODEL_STRATEGY_ATTRIBUTE = "_distribute_strategy"


# Each internal once found (keyed by its `Internal`, so that a changed entry
# of INTERNALS is looked up afresh): a layer reads it on every call, and a
# call that `torch.compile` traces must not reach `importlib` (where Dynamo
# breaks the graph: AdditiveAttention's first compiled predict took 16.6 s on
# PyTorch, most of it compiling the pieces between 15 breaks).
_FOUND = {}


def _resolve(key):
    internal = INTERNALS[key]
    if internal in _FOUND:
        return _FOUND[internal]
    try:
        found = getattr(importlib.import_module(internal.module), internal.name)
    except (ImportError, AttributeError) as error:
        raise KerasInternalMissing(
            f"keras_attention needs `{internal.module}.{internal.name}` "
            f"(it {internal.why}), which Keras {keras.__version__} "
            f"does not have; keras_attention is tested with Keras "
            f"{OLDEST_TESTED} to {NEWEST_TESTED}."
        ) from error
    _FOUND[internal] = found
    return found


def require(*keys):
    """Raises `KerasInternalMissing` unless every internal in `keys` exists in
    the installed Keras (a layer calls it when it is constructed)."""
    for key in keys:
        _resolve(key)


def missing():
    """The internals the installed Keras lacks, as `module.name` strings."""
    gone = []
    for key, internal in INTERNALS.items():
        try:
            _resolve(key)
        except KerasInternalMissing:
            gone.append(f"{internal.module}.{internal.name}")
    return gone


def get_keras_mask(x):
    """The Keras mask `x` carries, or None."""
    return _resolve("get_keras_mask")(x)


def set_keras_mask(x, mask):
    """Attaches `mask` to `x` as its Keras mask (None removes it)."""
    _resolve("set_keras_mask")(x, mask)


def draw_seed(seed):
    """A seed tensor from an int, a `keras.random.SeedGenerator` or None,
    drawn as Keras' own samplers draw it."""
    if isinstance(seed, int) and keras.backend.backend() == "torch":
        # Keras' PyTorch seeds are int32: Keras 3.14 reads an int seed's low
        # 32 bits as a signed int32, as here; before, a seed of 2**31 or more
        # overflowed.
        seed = (seed & 0xFFFFFFFF ^ 0x80000000) - 0x80000000
    return _resolve("draw_seed")(seed)


def model_strategy(model):
    """The `tf.distribute` strategy `model` was built under, or None."""
    return getattr(model, MODEL_STRATEGY_ATTRIBUTE, None)


# The private attribute `model._compile_config` (every trainer): the
# arguments `compile` received, which Keras keeps to save them; keras
# 3.11-3.15. Its public `get_compile_config()` serializes them, which fails
# for a lambda loss or metric.
COMPILE_CONFIG_ATTRIBUTE = "_compile_config"


def compile_arguments(model):
    """The arguments `model`'s `compile` received, as a dict; None for a
    model that is not compiled."""
    saved = getattr(model, COMPILE_CONFIG_ATTRIBUTE, None)
    if not getattr(model, "compiled", False) or saved is None:
        return None
    return dict(saved.config)


# The private attribute `layer._parent_path`: the name scope a layer's
# variables are created under, taken from the layer being built when it was
# made; keras 3.15 (the keras-hub integration's release).
PARENT_PATH_ATTRIBUTE = "_parent_path"


def place_at_top_level(layer):
    """Makes `layer` create its variables at the top of the variable paths
    (`name/kernel`), as a layer made outside any other layer's build does."""
    setattr(layer, PARENT_PATH_ATTRIBUTE, "")


# The private method `model._symbolic_build(data_batch=...)` (every trainer):
# builds the model, its compiled loss and metrics and its optimizer from
# symbolic inputs; keras 3.11-3.15.
SYMBOLIC_BUILD_METHOD = "_symbolic_build"


def build_training_state(model, data):
    """Builds `model`'s optimizer, compiled loss and metrics before `fit`
    traces its first training step, as Keras does under a strategy.

    Keras' TensorFlow trainer, without a `tf.distribute` strategy, builds
    them inside that trace (keras 3.11-3.15, `_maybe_symbolic_build`). A
    `tf.function` that creates variables is traced twice, so the first step
    cost two traces: built here, one. Measured on a 2-core CPU, the
    translation Transformer's first `fit` step (XLA, with accuracy) took
    34 s, and 15 s once built here (in 0.8 s). On the other backends, and
    under a strategy, `fit` builds before tracing itself.

    Args:
        model: a compiled model.
        data: what `fit` will train on: a `tf.data.Dataset` (its
            `element_spec` gives the shapes and dtypes) or a batch
            `(x, y[, sample_weight])` of arrays. Other data is left to `fit`,
            as is data without a shape (the per-replica specs of a dataset
            distributed by a strategy).
    """
    build = getattr(model, SYMBOLIC_BUILD_METHOD, None)
    spec = getattr(data, "element_spec", data if isinstance(data, tuple) else None)
    if (
        build is None  # a later Keras: fit builds as it sees fit
        or spec is None
        or keras.backend.backend() != "tensorflow"
        or model_strategy(model) is not None
        # Last: the mixin calls this at every `fit`, on every backend.
        or not all(
            leaf is None or hasattr(leaf, "shape") for leaf in keras.tree.flatten(spec)
        )
    ):
        return
    build(data_batch=spec)


# The private hook Keras' TensorFlow trainer calls in `fit`, `evaluate`,
# `train_on_batch` and `test_on_batch` before it traces a step (it builds
# only under a strategy), and the dataset its epoch iterator made of the
# data; keras 3.11-3.15.
MAYBE_BUILD_METHOD = "_maybe_symbolic_build"
EPOCH_DATASET_ATTRIBUTE = "_distributed_dataset"


class BuildsTrainingStateFirst:
    """Mixin for a `keras.Model`: `fit`, `evaluate`, `train_on_batch` and
    `test_on_batch` build the optimizer, compiled loss and metrics before
    TensorFlow traces the first step (`build_training_state`), from the
    element spec of the data `fit` batched, whatever its form (arrays,
    `tf.data`, a generator, a `PyDataset`). The step is then traced once,
    not twice, for users who call `fit` themselves. Measured on a 2-core
    CPU: the translation Transformer's first epoch of `fit` on arrays (XLA,
    640 pairs) took 22.6 s without it, 17.5 and 19.5 s with it."""

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        spec = data_batch
        if spec is None and iterator is not None:
            dataset = getattr(iterator, EPOCH_DATASET_ATTRIBUTE, None)
            spec = getattr(dataset, "element_spec", None)
        if spec is not None:
            # As Keras unpacks a batch: a list is (x, y, ...), anything else
            # not a tuple is x alone.
            if not isinstance(spec, (tuple, list)):
                spec = (spec,)
            build_training_state(self, tuple(spec))
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)


def forget_model_strategy(model):
    """Makes `fit` take the strategy in scope instead of the one `model` was
    built under."""
    setattr(model, MODEL_STRATEGY_ATTRIBUTE, None)


@contextlib.contextmanager
def hidden_keras_masks(*tensors):
    """Hides the Keras masks of `tensors` while inside, then restores them (a
    layer that consumed the masks calls sublayers that do not support
    masking, which would warn that they drop them)."""
    masks = [get_keras_mask(t) for t in tensors]
    for t in tensors:
        set_keras_mask(t, None)
    try:
        yield
    finally:
        for t, mask in zip(tensors, masks, strict=True):
            if mask is not None:
                set_keras_mask(t, mask)


class KeepsKerasMasksWhenCast:
    """Mixin for a layer that reads the Keras masks of its inputs: it casts
    each input that carries one to the layer's input dtype itself and
    attaches the mask again, before Keras' `Layer.__call__` converts the
    inputs. An input already of that dtype passes Keras' conversion
    unchanged, its mask with it.

    Keras before 3.14 converts a layer's inputs (under a mixed policy, a
    cast to float16 or bfloat16) before it reads their Keras masks, and the
    cast tensor carries none: under `mixed_float16` on PyTorch, Keras 3.11.3
    to 3.13, the package's attention layers attended to the padding that an
    `Embedding(mask_zero=True)` upstream had marked. Keras 3.14 keeps the
    masks itself; this does the same on every release.
    """

    def __call__(self, *args, **kwargs):
        args, kwargs = keras.tree.map_structure(
            self._cast_keeping_keras_mask, (args, kwargs)
        )
        return super().__call__(*args, **kwargs)

    def _cast_keeping_keras_mask(self, x):
        mask = get_keras_mask(x)
        if mask is None or not keras.ops.is_tensor(x):
            return x
        cast = self.dtype_policy.convert_input(x, self.autocast, self.input_dtype)
        if cast is not x:
            set_keras_mask(cast, mask)
        return cast


class OptimizerGroup:
    """Several optimizers in the place of `model.optimizer`, for a model
    whose own `train_step` applies each to its part of the model (a GAN's
    two networks) on the JAX backend.

    Keras' JAX trainer keeps the whole training state outside the variables
    while `fit` runs and hands it to `train_step`; the optimizers' part of it
    is `model.optimizer.variables`. With `model.optimizer` None it fails, and
    with one of the optimizers there the other's state would never reach the
    step: this group lists the variables of all of them, in order, and is
    built. Those two members are all the trainer reads of `model.optimizer`
    when `train_step` is the model's own (`variables` to gather the state,
    purge the variables while `fit` runs and write them back in
    `jax_state_sync`; `built` before the first step; Keras 3.15.1, checked by
    SAGAN's JAX test). It is not a Keras object, so saving skips it (each
    optimizer saves itself as an attribute of the model).
    """

    built = True

    def __init__(self, optimizers):
        self.optimizers = tuple(optimizers)

    @property
    def variables(self):
        return [v for optimizer in self.optimizers for v in optimizer.variables]


class StraightThroughScope(keras.StatelessScope):
    """A `keras.StatelessScope` in which `differentiated` variables read as
    their value plus a tensor `delta` (zeros, the argument of a JAX
    gradient), and an assignment to one of them keeps its value but passes
    the gradient straight through to that `delta`.

    On TensorFlow and PyTorch an assignment is not differentiable: a
    gradient with respect to a variable is the gradient with respect to its
    value as read after the last assignment. Keras' `SpectralNormalization`
    relies on it: in training it assigns the normalized kernel to the
    layer's (trainable) kernel, the layer then uses it, and the optimizer
    updates the normalized kernel. Under a plain stateless scope the JAX
    gradient would flow through the normalization instead; here it is the
    same as on the other backends. Keras hands each assignment made inside
    a stateless scope to the scope's `add_update` (the `"stateless_scope"`
    internal).

    Args:
        state_mapping: `(variable, value)` pairs of every variable read
            inside the scope.
        differentiated: `(variable, delta)` pairs, a subset of the variables.
    """

    def __init__(self, state_mapping, differentiated):
        require("stateless_scope")
        self.deltas = {id(variable): delta for variable, delta in differentiated}
        super().__init__(
            state_mapping=[
                (variable, value + self.deltas[id(variable)])
                if id(variable) in self.deltas
                else (variable, value)
                for variable, value in state_mapping
            ]
        )

    def add_update(self, update):
        variable, value = update
        delta = self.deltas.get(id(variable))
        if delta is not None:
            value = keras.ops.stop_gradient(value) + delta
        super().add_update((variable, value))
