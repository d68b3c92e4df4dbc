"""One harness for the contract every public layer keeps, in the spirit of
keras' `run_layer_test` (keras/src/testing/test_case.py): a layer test calls
`run_layer_test` for what all layers must do (build, shapes, config, `.keras`
files, XLA, mixed precision, masks, gradients) and keeps its own assertions
for what only that layer does. `assert_saved_model_matches` is the `.keras`
round trip of a whole model.

Both run on whatever backend `KERAS_BACKEND` selects."""

import inspect
import json
import tempfile
from pathlib import Path

import keras
import numpy as np
from keras import ops

from tests.conftest import trainable_gradients

MIXED_POLICIES = ("mixed_float16", "mixed_bfloat16")


def as_numpy(structure):
    """NumPy copies of every tensor in `structure`, floats as float32 (so
    that bfloat16 compares and prints everywhere); None stays None."""

    def convert(x):
        if x is None or not (ops.is_tensor(x) or isinstance(x, np.ndarray)):
            return x
        if keras.backend.is_float_dtype(keras.backend.standardize_dtype(x.dtype)):
            x = ops.cast(x, "float32")
        return ops.convert_to_numpy(x)

    return keras.tree.map_structure(convert, structure)


def _is_array(x):
    return isinstance(x, np.ndarray)


def decode_token_by_token(layer, x, cache):
    """Causal self-attention of `layer` over `x` one token at a time through
    `cache`, as generation calls it: the step outputs joined along time (as
    `as_numpy` gives them), and the cache after the last step."""
    steps = []
    for t in range(x.shape[1]):
        out, cache = layer(
            x[:, t : t + 1],
            x[:, t : t + 1],
            use_causal_mask=True,
            cache=cache,
            cache_update_index=t,
        )
        steps.append(as_numpy(out))
    return np.concatenate(steps, axis=1), cache


def each_document_alone(call, x, ids):
    """What a packed call must give: `call` on each document of `x` by
    itself (the positions where its row of `ids` holds one id), as
    `as_numpy` gives it, put back at the document's positions. `x` may be a
    tuple of arrays, cut alike and passed as `call`'s arguments. Documents of
    one length, from any rows, go through `call` together, as a batch."""
    ids = np.asarray(ids)
    arrays = x if isinstance(x, tuple) else (x,)
    documents = {}  # length -> [(row, positions)]
    for b, row in enumerate(ids):
        for document in np.unique(row):
            where = row == document
            documents.setdefault(int(where.sum()), []).append((b, where))
    outputs = None
    for group in documents.values():
        batch = [np.stack([a[b, where] for b, where in group]) for a in arrays]
        alone = as_numpy(call(*batch))
        if outputs is None:
            outputs = np.zeros(ids.shape + alone.shape[2:], alone.dtype)
        for (b, where), document_output in zip(group, alone, strict=True):
            outputs[b, where] = document_output
    return outputs


def _call(layer, inputs, kwargs):
    """Calls `layer` as the harness's callers describe it: a dict of inputs
    gives keyword arguments, anything else the first positional one."""
    if isinstance(inputs, dict):
        return layer(**inputs, **kwargs)
    return layer(inputs, **kwargs)


def _leaves(structure):
    return [x for x in keras.tree.flatten(structure) if x is not None]


def _float_leaves(structure):
    return [
        x
        for x in _leaves(structure)
        if keras.backend.is_float_dtype(keras.backend.standardize_dtype(x.dtype))
    ]


def _symbolic(structure):
    """`structure` with every NumPy array replaced by a `keras.Input` of its
    shape (an unknown batch size first) and dtype; returns it with the
    arrays and the inputs, in the same order."""
    arrays, inputs = [], []

    def replace(x):
        if not _is_array(x):
            return x
        symbol = keras.Input(
            batch_shape=(None, *x.shape[1:]),
            dtype=keras.backend.standardize_dtype(x.dtype),
        )
        arrays.append(x)
        inputs.append(symbol)
        return symbol

    return keras.tree.map_structure(replace, structure), arrays, inputs


def _is_shape(x):
    return isinstance(x, (tuple, list)) and all(
        d is None or isinstance(d, (int, np.integer)) for d in x
    )


def _shape_list(shapes):
    """A shape or a (nested) structure of shapes as a flat list of shapes,
    in the order of `keras.tree.flatten`."""
    if _is_shape(shapes):
        return [tuple(shapes)]
    if isinstance(shapes, dict):
        shapes = [shapes[key] for key in sorted(shapes)]
    return [shape for part in shapes for shape in _shape_list(part)]


def _assert_shapes_match(expected, outputs, what):
    """`outputs` (a list of tensors) have the shapes of `expected` (a shape or
    a structure of shapes, None matching any size)."""
    expected = _shape_list(expected)
    got = [tuple(x.shape) for x in outputs]
    assert len(expected) == len(got) and all(
        len(want) == len(shape)
        and all(w is None or w == s for w, s in zip(want, shape, strict=True))
        for want, shape in zip(expected, got, strict=True)
    ), f"{what}: expected shapes {expected}, received {got}"


def _shape_arguments(method, input_data):
    """The arguments of `build` or `compute_output_shape` for `input_data`:
    one shape (or list of shapes), or for a dict the shapes as `NAME_shape`
    keywords where `method` names them so, else positionally in order."""
    shapes = keras.tree.map_structure(
        lambda x: tuple(x.shape) if _is_array(x) else x, input_data
    )
    if not isinstance(shapes, dict):
        return (shapes,), {}
    named = {f"{name}_shape": shape for name, shape in shapes.items()}
    parameters = inspect.signature(method).parameters
    if all(
        name in parameters and parameters[name].kind != inspect.Parameter.VAR_KEYWORD
        for name in named
    ):
        return (), named
    return tuple(named.values()), {}


def _overrides(layer, method):
    return getattr(type(layer), method) is not getattr(keras.layers.Layer, method)


def _check_compute_output_shape(layer, input_data, call_kwargs, eager):
    args, kwargs = _shape_arguments(layer.compute_output_shape, input_data)
    accepted = inspect.signature(layer.compute_output_shape).parameters
    kwargs.update({k: v for k, v in call_kwargs.items() if k in accepted})
    shapes = layer.compute_output_shape(*args, **kwargs)
    outputs = _leaves(eager)
    if "return_attention_scores" not in kwargs and len(outputs) > 1:
        # A layer whose shape method takes only shapes describes its output;
        # the attention scores it may add are checked by the symbolic call.
        outputs = outputs[:1]
    _assert_shapes_match(shapes, outputs, "compute_output_shape")
    assert None not in (d for shape in _shape_list(shapes) for d in shape), (
        f"compute_output_shape left sizes unknown: {shapes}"
    )


def _perturb(layer):
    """Moves every trainable weight off its initial value, so that a weight
    initialized to zero (SAGAN's gamma, biases) still matters in the round
    trips."""
    rng = np.random.default_rng(0)
    for variable in layer.trainable_variables:
        value = ops.convert_to_numpy(ops.cast(variable, "float32"))
        noise = 0.1 * rng.standard_normal(value.shape)
        variable.assign((value + noise).astype(variable.dtype))


def _assert_all_equal(got, want, atol, what):
    for a, b in zip(_leaves(as_numpy(got)), _leaves(as_numpy(want)), strict=True):
        if atol:
            np.testing.assert_allclose(a, b, atol=atol, err_msg=what)
        else:
            np.testing.assert_array_equal(a, b, err_msg=what)


def _all_zero(structure):
    return all(np.all(np.asarray(x) == 0.0) for x in keras.tree.flatten(structure))


def _assert_finite(outputs, what):
    for x in _float_leaves(outputs):
        assert np.all(np.isfinite(as_numpy(x))), f"{what}: non-finite output"


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    call_kwargs=None,
    *,
    expected_output_shape=None,
    masks=None,
    masked_zeros=None,
    run_saving_check=True,
    run_jit_check=True,
    run_mixed_precision_check=True,
    run_gradient_check=True,
    jit_atol=1e-5,
):
    """Checks the contract every public layer keeps.

    Args:
        layer_cls: the layer class, or a function of the keyword arguments
            that returns a layer (for layers made of other layers, whose
            parts must be made anew each time, e.g. with the same `dtype`).
        init_kwargs: the keyword arguments of `layer_cls`.
        input_data: a NumPy array, a list of arrays (passed as the first
            argument, as `[query, value]`), or a dict of arrays (passed as
            keyword arguments, as `query=..., value=...`; `build` and
            `compute_output_shape` then get `NAME_shape` keywords).
        call_kwargs: further call arguments; the NumPy arrays among them
            become inputs of the functional model, as the input data does.
            Every array, there and in `masks`, has the batch axis first.
        expected_output_shape: the eager output's shape, or a structure of
            shapes for several outputs; None matches any size.
        masks: call arguments that pass masks (`{"mask": [None, value_mask]}`,
            `{"padding_mask": mask}`, ...). With them the output must be
            finite, in float32 and in mixed precision, and so must the
            gradients; the functional model takes them as inputs. Give rows
            that are fully masked, to check that they do not produce NaN.
        masked_zeros: a function of the masked outputs (as NumPy, float32)
            returning the part (an array or a structure of arrays) that the
            layer promises to be zero, e.g. the outputs of fully masked
            queries; checked in float32 and in mixed precision.
        run_saving_check: revive the built layer through Keras'
            serialization, save the functional model to `.keras`, load it in
            safe mode and compare.
        run_jit_check: compare `jit_compile=True` predictions with eager ones.
        run_mixed_precision_check: call under `mixed_float16` and
            `mixed_bfloat16`.
        run_gradient_check: differentiate with respect to trainable weights.
        jit_atol: tolerance of the compiled-versus-eager comparison.

    Returns:
        The eager outputs of the first call, as NumPy (float32), for the
        caller's own assertions.
    """
    call_kwargs = dict(call_kwargs or {})
    masks = dict(masks or {})
    masked_kwargs = {**call_kwargs, **masks}

    # An eager call builds the layer and gives the reference shapes.
    layer = layer_cls(**init_kwargs)
    unbuilt_config = layer.get_config()
    eager = _call(layer, input_data, call_kwargs)
    assert layer.built, f"{type(layer).__name__} is not built by its call"
    if expected_output_shape is not None:
        _assert_shapes_match(expected_output_shape, _leaves(eager), "eager output")
    _assert_finite(eager, "eager call")

    # The layer builds from shapes alone, to the weights a call creates.
    shape_built = layer_cls(**init_kwargs)
    args, kwargs = _shape_arguments(shape_built.build, input_data)
    shape_built.build(*args, **kwargs)
    assert shape_built.built
    for kind in ("trainable_weights", "non_trainable_weights"):
        assert [tuple(w.shape) for w in getattr(shape_built, kind)] == [
            tuple(w.shape) for w in getattr(layer, kind)
        ], f"{kind} built from shapes differ from those of a call"

    if _overrides(layer, "compute_output_shape"):
        _check_compute_output_shape(layer, input_data, call_kwargs, eager)

    # Config: from_config(get_config()) gives the same config, before and
    # after building.
    config = layer.get_config()
    for before in (unbuilt_config, config):
        clone = type(layer).from_config(before)
        assert clone.get_config() == before, "from_config(get_config()) differs"
    if run_saving_check:
        # Keras' own serialization of the built layer, as a `.keras` file
        # holds it (with its build config).
        revived = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(layer)
        )
        assert type(revived) is type(layer) and revived.get_config() == config

    # Masks: finite outputs, and zeros where the layer promises them.
    masked = eager
    if masks:
        masked = _call(layer, input_data, masked_kwargs)
        _assert_finite(masked, "masked call")
        if masked_zeros is not None:
            assert _all_zero(masked_zeros(as_numpy(masked))), "masked rows"

    # A symbolic call gives the eager shapes and dtypes; it makes the model
    # of the saving and XLA checks (with the masks as inputs).
    symbolic_layer = layer_cls(**init_kwargs)
    (symbolic_data, symbolic_kwargs), arrays, inputs = _symbolic(
        (input_data, masked_kwargs)
    )
    symbolic = _call(symbolic_layer, symbolic_data, symbolic_kwargs)
    eager_leaves, symbolic_leaves = _leaves(masked), _leaves(symbolic)
    assert len(eager_leaves) == len(symbolic_leaves), "symbolic outputs"
    for e, s in zip(eager_leaves, symbolic_leaves, strict=True):
        assert len(s.shape) == len(e.shape) and all(
            d is None or d == g for d, g in zip(s.shape, e.shape, strict=True)
        ), f"symbolic shape {s.shape} differs from the eager {tuple(e.shape)}"
        assert keras.backend.standardize_dtype(
            s.dtype
        ) == keras.backend.standardize_dtype(e.dtype), "symbolic dtype"
    if run_saving_check or run_jit_check:
        model = keras.Model(inputs, symbolic)
        _perturb(symbolic_layer)
        want = model(arrays)
        if run_saving_check:
            with tempfile.TemporaryDirectory() as folder:
                loaded = assert_saved_model_matches(model, arrays, folder, atol=0)
            revived = loaded.get_layer(symbolic_layer.name)
            assert revived.get_config() == symbolic_layer.get_config()
        if run_jit_check:
            model.compile(jit_compile=True)
            compiled = model.predict(arrays, verbose=0)
            _assert_all_equal(compiled, want, jit_atol, "jit_compile=True")

    if run_mixed_precision_check:
        for policy in MIXED_POLICIES:
            mixed = _check_mixed_precision(
                layer_cls, init_kwargs, input_data, masked_kwargs, policy
            )
            if masked_zeros is not None:
                assert _all_zero(masked_zeros(as_numpy(mixed))), policy

    if run_gradient_check and layer.trainable_variables:
        variables = layer.trainable_variables

        def loss():
            outputs = _call(layer, input_data, masked_kwargs)
            # Every weight enters, with a zero factor, so that one off the
            # call's path (a key projection whose keys come in prepared) gets
            # a zero gradient on every backend rather than None or an error.
            unused = sum(ops.sum(ops.cast(v, "float32")) for v in variables)
            return 0.0 * unused + sum(
                ops.sum(ops.square(ops.cast(x, "float32")))
                for x in _float_leaves(outputs)
            )

        grads = trainable_gradients(variables, loss)
        assert all(np.all(np.isfinite(g)) for g in grads), "non-finite gradients"
        assert any(np.any(g != 0) for g in grads), "no weight gets a gradient"

    return as_numpy(eager)


def _check_mixed_precision(layer_cls, init_kwargs, input_data, kwargs, policy):
    """A layer made with `dtype=policy` gives finite outputs in the policy's
    compute dtype and keeps float32 weights; returns the outputs.

    The policy is the layer's argument, not the global one, so that a part
    the layer does not hand its policy to shows as a wrong dtype. The global
    policy is restored all the same, should the layer set it."""
    previous = keras.config.dtype_policy()
    try:
        layer = layer_cls(**{**init_kwargs, "dtype": policy})
        outputs = _call(layer, input_data, kwargs)
    finally:
        keras.config.set_dtype_policy(previous)
    compute = keras.DTypePolicy(policy).compute_dtype
    for x in _float_leaves(outputs):
        dtype = keras.backend.standardize_dtype(x.dtype)
        assert dtype == compute, f"{policy}: output dtype {dtype}"
    _assert_finite(outputs, policy)
    for weight in layer.weights:
        dtype = keras.backend.standardize_dtype(weight.dtype)
        if keras.backend.is_float_dtype(dtype):
            assert dtype == "float32", f"{policy}: weight {weight.path} is {dtype}"
    return outputs


def _as_json(config):
    """`config` as the `.keras` file stores it (tuples become lists)."""
    return json.loads(json.dumps(config, default=repr))


def assert_saved_model_matches(model, inputs, tmp_path, *, call=None, atol=1e-6):
    """Saves `model` to `.keras`, loads it with `safe_mode=True` and asserts
    that the loaded model is of the same class and config and gives the same
    outputs for `inputs` (exactly with `atol=0`).

    Args:
        model: a built model.
        inputs: what the model is called on.
        tmp_path: the folder of the `.keras` file.
        call: a function `(model, inputs) -> outputs` to compare instead of
            `model(inputs)` (e.g. a sub-network's predictions).
        atol: absolute tolerance.

    Returns:
        The loaded model, for the caller's own checks.
    """
    call = call or (lambda m, x: m(x))
    path = Path(tmp_path) / f"{model.name}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model)
    assert _as_json(loaded.get_config()) == _as_json(model.get_config())
    _assert_all_equal(
        call(loaded, inputs), call(model, inputs), atol, "loaded from .keras"
    )
    return loaded
