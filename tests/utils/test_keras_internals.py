"""Keras internals only through `keras_attention.utils.keras_internals`.

Scans the package for imports of `keras.src` and for uses of `_`-prefixed
members that Keras' classes define, outside the adapter, and checks that
every internal the adapter lists exists in the installed Keras (CI runs this
on each Keras release of the matrix)."""

import ast
import inspect
import pathlib
import re

import keras
import numpy as np
import pytest

from keras_attention import layers
from keras_attention.utils import keras_internals
from keras_attention.utils.backend import value_and_grad

PACKAGE = pathlib.Path(keras_internals.__file__).resolve().parents[1]
ADAPTER = pathlib.Path(keras_internals.__file__).resolve()

# The internals the package touches today, all in the adapter. A new one
# means a new entry there, with why the package needs it and the releases it
# was checked on, and here.
EXPECTED_INTERNALS = {
    "keras.src.backend.get_keras_mask",
    "keras.src.backend.set_keras_mask",
    "keras.src.random.seed_generator.draw_seed",
    "keras.src.backend.common.stateless_scope.StatelessScope",
}


def package_files():
    return sorted(PACKAGE.rglob("*.py"))


def keras_private_names():
    """`_`-prefixed names that Keras' public classes define: their class
    attributes and the instance attributes of a few built objects."""
    classes = set()
    for module in (
        keras.layers,
        keras.models,
        keras.optimizers,
        keras.callbacks,
        keras.losses,
        keras.metrics,
        keras.initializers,
        keras.regularizers,
        keras.constraints,
        keras.random,
        keras.saving,
        keras.dtype_policies,
        keras,
    ):
        classes |= {o for o in vars(module).values() if inspect.isclass(o)}
    names = {n for c in classes for n in dir(c)}
    x = np.ones((1, 3, 8), "float32")
    objects = [
        keras.Model(),
        keras.optimizers.Adam(),
        keras.random.SeedGenerator(1),
        keras.Variable(np.ones(2)),
    ]
    for layer, args in (
        (keras.layers.MultiHeadAttention(2, 4, dropout=0.1), (x, x)),
        (keras.layers.GroupQueryAttention(4, 2, 1, dropout=0.1), (x, x)),
        (keras.layers.EinsumDense("abc,cd->abd", (None, 4)), (x,)),
        (keras.layers.Dense(3), (x,)),
        (keras.layers.Dropout(0.1), (x,)),
        (keras.layers.Embedding(5, 3), (np.ones((1, 2), "int32"),)),
        (keras.layers.LayerNormalization(), (x,)),
    ):
        layer(*args)
        objects.append(layer)
    for obj in objects:
        names |= set(vars(obj))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def own_private_names():
    """`_`-prefixed names the package's classes define themselves: their
    methods, and the attributes they assign (`self._x = ...`)."""
    names = set()
    for path in package_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names |= {
                    item.name for item in node.body if isinstance(item, ast.FunctionDef)
                }
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = getattr(node, "targets", None) or [node.target]
                names |= {
                    leaf.attr
                    for target in targets
                    for leaf in ast.walk(target)
                    if isinstance(leaf, ast.Attribute)
                    and isinstance(leaf.value, ast.Name)
                    and leaf.value.id == "self"
                }
    return {n for n in names if n.startswith("_")}


def test_keras_src_is_imported_only_by_the_adapter():
    found = []
    for path in package_files():
        if path == ADAPTER:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Attribute) and node.attr == "src":
                modules = ["keras.src" if _is_keras(node.value) else ""]
            found += [
                f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {m}"
                for m in modules
                if m == "keras.src" or m.startswith("keras.src.")
            ]
    assert not found, "keras.src outside the adapter:\n" + "\n".join(found)


def _is_keras(node):
    return isinstance(node, ast.Name) and node.id == "keras"


def test_private_members_of_keras_classes_only_through_the_adapter():
    keras_names = keras_private_names() - own_private_names()
    found = []
    for path in package_files():
        if path == ADAPTER:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in keras_names:
                found.append(
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno} .{node.attr}"
                )
            # getattr(obj, "_name") counts as much as obj._name.
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in keras_names
            ):
                found.append(
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno} "
                    f"{node.func.id}(..., {node.args[1].value!r})"
                )
    assert not found, (
        "Keras internals outside keras_attention/utils/keras_internals.py:\n"
        + "\n".join(found)
    )


def test_the_adapter_lists_what_the_package_touches():
    listed = {f"{i.module}.{i.name}" for i in keras_internals.INTERNALS.values()}
    assert listed == EXPECTED_INTERNALS
    for internal in keras_internals.INTERNALS.values():
        assert internal.why and internal.releases


def test_every_listed_internal_exists_in_this_keras():
    assert keras_internals.missing() == [], keras.__version__


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the model's remembered tf.distribute strategy is TensorFlow's",
)
def test_the_model_strategy_attribute_exists_in_this_keras():
    import tensorflow as tf

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    assert keras_internals.model_strategy(model) is strategy
    keras_internals.forget_model_strategy(model)
    assert keras_internals.model_strategy(model) is None


def test_the_symbolic_build_method_exists_in_this_keras():
    assert callable(getattr(keras.Model, keras_internals.SYMBOLIC_BUILD_METHOD))


class CountsTraces(keras.Sequential):
    """Counts the calls of its `train_step`: on TensorFlow, one per trace."""

    traces = 0

    def train_step(self, data):
        self.traces += 1
        return super().train_step(data)


def _compiled_counting_model():
    model = CountsTraces([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse", metrics=["mae"], jit_compile=False)
    return model


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="only Keras' TensorFlow trainer builds inside the first step's trace",
)
@pytest.mark.parametrize("dataset", [True, False], ids=["dataset", "arrays"])
def test_the_training_state_built_before_fit_traces_its_step_once(dataset):
    import tensorflow as tf

    x, y = np.ones((8, 3), "float32"), np.ones((8, 2), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4) if dataset else (x, y)
    model = _compiled_counting_model()
    keras_internals.build_training_state(model, data)
    assert model.optimizer.built and model.optimizer.variables
    assert model.metrics_variables  # the loss tracker and the metric's
    model.fit(*((data,) if dataset else data), epochs=2, verbose=0)
    assert model.traces == 1
    # Left to Keras, the trainer creates them in the first trace, and
    # `tf.function` traces a step that created variables again.
    model = _compiled_counting_model()
    model.fit(*((data,) if dataset else data), epochs=2, verbose=0)
    assert model.traces == 2


class BuildsFirstAndCountsTraces(keras_internals.BuildsTrainingStateFirst, keras.Model):
    """A functional model with the mixin that counts the traces of its steps."""

    train_traces = test_traces = 0

    def train_step(self, data):
        self.train_traces += 1
        return super().train_step(data)

    def test_step(self, data):
        self.test_traces += 1
        return super().test_step(data)

    def compute_loss(self, x=None, y=None, y_pred=None, *args, **kwargs):
        if y is None:  # data of inputs alone: a loss of the outputs
            return keras.ops.mean(y_pred**2)
        return super().compute_loss(x, y, y_pred, *args, **kwargs)


def forever(batch):
    while True:
        yield batch


class Batches(keras.utils.PyDataset):
    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return self.x[index * 4 : index * 4 + 4], self.y[index * 4 : index * 4 + 4]


def _tf_trainer_builds_in_the_trace():
    return pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="only Keras' TensorFlow trainer builds inside the first step's trace",
    )


def test_the_hook_the_mixin_overrides_exists_in_this_keras():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras' TensorFlow trainer calls the hook")
    assert callable(getattr(keras.Model, keras_internals.MAYBE_BUILD_METHOD))


@_tf_trainer_builds_in_the_trace()
@pytest.mark.parametrize(
    "form", ["arrays", "dataset", "generator", "py_dataset", "x_only", "on_batch"]
)
def test_a_model_with_the_mixin_traces_its_steps_once(form):
    """Whatever form `fit` is given its data in, the mixin builds the
    training state first: each step is traced once (twice without it)."""
    import tensorflow as tf

    x, y = np.ones((8, 3), "float32"), np.ones((8, 2), "float32")
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(2)(inputs)
    model = BuildsFirstAndCountsTraces(inputs, hidden)
    if form == "x_only":
        model.compile(optimizer="adam", jit_compile=False)
    else:
        model.compile(optimizer="adam", loss="mse", metrics=["mae"], jit_compile=False)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    data = {
        "arrays": (x, y),
        "dataset": (batches,),
        "generator": (forever((x[:4], y[:4])),),
        "py_dataset": (Batches(x, y),),
        "x_only": (x,),
    }.get(form)
    if form == "on_batch":
        model.train_on_batch(x, y)
        model.train_on_batch(x, y)
        model.test_on_batch(x, y)
    else:
        model.fit(*data, epochs=2, verbose=0, steps_per_epoch=2)
        model.evaluate(*data, verbose=0, steps=2)
    assert (model.train_traces, model.test_traces) == (1, 1)


def test_the_training_state_is_left_to_fit_for_data_of_unknown_shapes():
    model = _compiled_counting_model()
    keras_internals.build_training_state(model, iter([]))
    assert not model.optimizer.built


def test_the_training_state_is_left_to_fit_for_specs_without_a_shape():
    # As the per-replica specs of a dataset that a strategy distributed.
    class PerReplicaLike:
        pass

    model = _compiled_counting_model()
    x = np.ones((8, 3), "float32")
    keras_internals.build_training_state(model, (PerReplicaLike(), x))
    assert not model.optimizer.built


def test_an_assignment_in_a_straight_through_scope_passes_the_gradient_on():
    # SAGAN's JAX step relies on `Variable.assign` reaching the scope's
    # `add_update`: the assigned value is read on, and the gradient with
    # respect to the variable is taken at that value (x), not through the
    # assignment (3 * x), as on TensorFlow and PyTorch.
    variable = keras.Variable(np.array([1.0, 2.0], "float32"))
    x = keras.ops.convert_to_tensor(np.array([5.0, 7.0], "float32"))

    def loss(delta):
        with keras_internals.StraightThroughScope(
            [(variable, variable.value)], [(variable, delta)]
        ) as scope:
            variable.assign(3.0 * variable.value)
            loss = keras.ops.sum(variable.value * x)
        assert scope.get_current_value(variable) is not None
        return loss

    value, (grad,) = value_and_grad(loss)(keras.ops.zeros((2,)))
    assert float(keras.ops.convert_to_numpy(value)) == 3.0 * 5.0 + 6.0 * 7.0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(grad), [5.0, 7.0])
    # The variable itself is untouched.
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), [1.0, 2.0])


MASK_READERS = {
    "multi_head": lambda x: layers.MultiHeadAttention(2, 2, dtype=HALF)(x, x),
    "score": lambda x: layers.AdditiveAttention(units=3, dtype=HALF)([x, x]),
    "pooling": lambda x: layers.AttentionPooling(units=3, dtype=HALF)(x),
    "encoder_block": lambda x: layers.TransformerEncoderBlock(
        num_heads=2, intermediate_dim=4, dtype=HALF
    )(x),
}
HALF = "mixed_float16"


@pytest.mark.parametrize("name", sorted(MASK_READERS))
def test_layers_read_keras_masks_under_a_mixed_policy(name):
    """Keras before 3.14 casts a layer's inputs to float16 before reading
    their Keras masks and dropped them on PyTorch (`KeepsKerasMasksWhenCast`):
    the padding holds NaN here, which a layer that attends to it spreads."""
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    x[0, 2:] = np.nan
    inputs = keras.ops.convert_to_tensor(x)
    keras_internals.set_keras_mask(
        inputs, keras.ops.convert_to_tensor(np.array([[1, 1, 0], [1, 1, 1]], bool))
    )
    keras.utils.set_random_seed(0)
    output = keras.ops.convert_to_numpy(
        keras.ops.cast(MASK_READERS[name](inputs), "float32")
    )
    real = output if output.ndim == 2 else output[[0, 0, 1, 1, 1], [0, 1, 0, 1, 2]]
    assert np.all(np.isfinite(real)), output


def test_a_missing_internal_names_keras_the_tested_range_and_what(monkeypatch):
    monkeypatch.setitem(
        keras_internals.INTERNALS,
        "draw_seed",
        keras_internals.Internal("keras.src.random", "gone", "draws seeds", "3.11"),
    )
    with pytest.raises(keras_internals.KerasInternalMissing) as error:
        from keras_attention.layers import Dropout

        Dropout(0.1)
    message = str(error.value)
    assert keras.__version__ in message
    assert "keras.src.random.gone" in message
    assert keras_internals.OLDEST_TESTED in message
    assert keras_internals.NEWEST_TESTED in message


def test_the_tested_range_is_the_keras_matrix_and_the_declared_floor():
    root = pathlib.Path(__file__).resolve().parents[2]
    matrix = (root / ".ci" / "keras_matrix").read_text()
    releases = re.search(r"releases=\(([^)]*)\)", matrix).group(1).split()
    assert releases[0] == keras_internals.OLDEST_TESTED
    assert releases[-1] == keras_internals.NEWEST_TESTED
    floor = re.search(r"keras>=([\d.]+)", (root / "setup.cfg").read_text()).group(1)
    assert keras_internals.OLDEST_TESTED.startswith(floor + ".")
    # One release per minor version, from the floor to the newest.
    minors = [int(release.split(".")[1]) for release in releases]
    assert minors == list(range(minors[0], minors[-1] + 1))


def test_an_internal_is_imported_once_so_a_traced_call_never_imports(monkeypatch):
    """torch.compile breaks the graph at `importlib` (15 breaks in one
    AdditiveAttention call before): the second look-up is a dict's."""
    tensor = keras.ops.ones((2,))
    keras_internals.get_keras_mask(tensor)

    def imports_again(name):
        raise AssertionError(f"{name} imported again")

    monkeypatch.setattr(keras_internals.importlib, "import_module", imports_again)
    assert keras_internals.get_keras_mask(tensor) is None


def test_compile_arguments_are_those_compile_received():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    assert keras_internals.compile_arguments(model) is None

    def loss(y, p):
        return keras.ops.mean(p)

    optimizer = keras.optimizers.SGD(0.1)
    model.compile(optimizer=optimizer, loss=loss, metrics=["mae"])
    arguments = keras_internals.compile_arguments(model)
    assert arguments["optimizer"] is optimizer and arguments["loss"] is loss
    assert arguments["metrics"] == ["mae"]
