"""The fused kernels lower for a GPU, proved on a CPU: every configuration
that `plan_kernel` can send to a fused kernel on JAX, through the public
`dot_product_attention` inside a function exported for CUDA with
`jax.export` (`tests/ops/fake_gpu.py`: the plan sees a GPU, Pallas does not
interpret, cuDNN 9.10 on an H100 is faked), forward and forward plus
backward.

For each configuration, dtype and head size, with `flash_attention=None`
(the default) and `True`, the test checks that

- `attention_path` (same arguments) names the path of the table `PATHS`, and
- the exported module calls that path's kernel: Pallas' Triton call (once
  forward; three times with the gradient: the forward kernel that saves the
  log-sum-exp, and the two backward kernels) for `"jax_pallas"`, cuDNN's
  fused attention (its backward call too with the gradient) for
  `"jax_cudnn"`, and neither kernel for the `keras.ops` paths.

What this proves: Pallas' Triton lowering accepts every operation of the
kernels for these calls (the Triton IR is built at lowering, inside the
custom call), and JAX's cuDNN attention accepts the calls `fused.py` makes.
What it does not: nothing is compiled or run, so Triton's compilation
(shared memory, register pressure: a head size of 256 with 128-wide tiles)
and the kernels' numbers on a GPU stay unchecked here.

`PATHS` is the plan's table: a change of the plan is a change of its cells.
"""

import collections

import keras
import pytest

if keras.backend.backend() != "jax":
    pytest.skip(
        "lowers JAX functions for CUDA with jax.export; the Keras backend is "
        f"{keras.backend.backend()}",
        allow_module_level=True,
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from keras_attention.ops import (  # noqa: E402
    alibi_slopes,
    attention_path,
    dot_product_attention,
)
from tests.ops.fake_gpu import (  # noqa: E402
    CUDNN,
    CUDNN_BACKWARD,
    CUDNN_FORWARD,
    TRITON,
    custom_call_counts,
    exported_text,
    fake_hopper_gpu,
    lowered_custom_calls,
    require_calls,
)

B, T, S, N = 2, 256, 256, 4
OFFSET_QUERIES = 128  # T of the calls at an offset: the last 128 of 256 keys
WINDOW = 128
SOFT_CAP = 30.0
SINKS = np.linspace(-1.0, 1.0, N).astype("float32")  # GPT-OSS's, one per head
DTYPES = ("bfloat16", "float32")
HEAD_SIZES = (64, 128, 256)


class Config(
    collections.namedtuple(
        "Config", "call inputs query_length kv_heads", defaults=((), T, N)
    )
):
    """One configuration: `call`, `dot_product_attention`'s static keyword
    arguments; `inputs`, those that are arguments of the exported function
    (`"mask"`: a padding mask `(B, 1, 1, S)`, `"segments"`: the documents'
    ids, `"offset"`: `query_offset` as a traced int32 scalar)."""


CONFIGS = {
    "plain": Config({}),
    "causal": Config({"is_causal": True}),
    "causal+window": Config({"is_causal": True, "sliding_window": WINDOW}),
    "window": Config({"sliding_window": WINDOW}),
    "causal@offset": Config(
        {"is_causal": True, "query_offset": S - OFFSET_QUERIES},
        query_length=OFFSET_QUERIES,
    ),
    "causal@traced_offset": Config(
        {"is_causal": True}, ("offset",), query_length=OFFSET_QUERIES
    ),
    "padding": Config({}, ("mask",)),
    "causal+padding": Config({"is_causal": True}, ("mask",)),
    "documents": Config({}, ("segments",)),
    "alibi": Config({"alibi_slopes": alibi_slopes(N)}),
    "soft_cap": Config({"attn_logits_soft_cap": SOFT_CAP}),
    "gqa": Config({}, kv_heads=2),
    "causal+padding+soft_cap+gqa": Config(
        {"is_causal": True, "attn_logits_soft_cap": SOFT_CAP}, ("mask",), kv_heads=2
    ),
    "documents+alibi": Config({"alibi_slopes": alibi_slopes(N)}, ("segments",)),
    "causal+sinks": Config({"is_causal": True, "sinks": SINKS}),
    "causal+window+padding+sinks+gqa": Config(
        {"is_causal": True, "sliding_window": WINDOW, "sinks": SINKS},
        ("mask",),
        kv_heads=2,
    ),
}

# The path of each configuration, with flash_attention=None (the default)
# and True, per dtype and head size: C = "jax_cudnn", P = "jax_pallas",
# S = "standard", K = "chunked". On a GPU the default is fused wherever a
# kernel computes the call: cuDNN where it takes it whole (padding as
# lengths, with the Pallas kernel compiled beside it for left padding), the
# Pallas kernel for the rest.
CELLS = (
    ("bfloat16", 64), ("bfloat16", 128), ("bfloat16", 256),
    ("float32", 64), ("float32", 128), ("float32", 256),
)  # fmt: skip
PATH_OF = {"C": "jax_cudnn", "P": "jax_pallas", "S": "standard", "K": "chunked"}
# fmt: off
PATHS = {
    #                                 default          flash_attention=True
    #                               bfloat16 float32    bfloat16 float32
    #                               64 128 256 64 128 256  64 128 256 64 128 256
    "plain":                       ("C  C  C   P  P  P",  "C  C  C   P  P  P"),
    "causal":                      ("C  C  C   P  P  P",  "C  C  C   P  P  P"),
    "causal+window":               ("C  C  C   P  P  P",  "C  C  C   P  P  P"),
    "window":                      ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "causal@offset":               ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "causal@traced_offset":        ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "padding":                     ("C  C  C   P  P  P",  "C  C  C   P  P  P"),
    "causal+padding":              ("C  C  C   P  P  P",  "C  C  C   P  P  P"),
    "documents":                   ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "alibi":                       ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "soft_cap":                    ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "gqa":                         ("C  C  C   P  P  P",  "C  C  C   P  P  P"),
    "causal+padding+soft_cap+gqa": ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "documents+alibi":             ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    # Sinks read the log-sum-exp, which cuDNN through jax.nn does not give.
    "causal+sinks":                ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
    "causal+window+padding+sinks+gqa":
                                   ("P  P  P   P  P  P",  "P  P  P   P  P  P"),
}
# fmt: on

# Calls that do not lower, by configuration and path, with the error (none
# today: a window without the causal mask, which jax.nn's cuDNN refuses,
# goes to the Pallas kernel).
LOWERING_FAILURES = {}


# The backward pass, whose lowering takes twice the forward's, for every
# configuration at these cells only: both kernels at the smallest head, the
# Pallas kernel at the largest and in float32 (the whole table: 60 s here
# instead of 40).
BACKWARD_CELLS = (("bfloat16", 64), ("bfloat16", 256), ("float32", 128))


def _cases():
    cases = []
    for name, (default, flash) in PATHS.items():
        for flash_attention, row in ((None, default), (True, flash)):
            letters = row.split()
            assert len(letters) == len(CELLS), name
            for (dtype, head_dim), letter in zip(CELLS, letters, strict=True):
                path = PATH_OF[letter]
                marks = ()
                failure = LOWERING_FAILURES.get((name, path))
                if failure:
                    marks = pytest.mark.xfail(
                        raises=ValueError, strict=True, reason=failure
                    )
                asked = "flash" if flash_attention else "default"
                grads = [False]
                if (dtype, head_dim) in BACKWARD_CELLS:
                    grads.append(True)
                for grad in grads:
                    direction = "backward" if grad else "forward"
                    case_id = f"{name}-{dtype}-{head_dim}-{asked}-{direction}"
                    args = (name, dtype, head_dim, flash_attention, path, grad)
                    cases.append(pytest.param(*args, marks=marks, id=case_id))
    return cases


CASES = _cases()


@pytest.fixture(autouse=True)
def _hopper(monkeypatch):
    fake_hopper_gpu(monkeypatch)


def structs(config, dtype, head_dim):
    """The exported function's arguments: queries, keys, values, then
    `config.inputs`'s."""
    length = config.query_length
    args = [
        jax.ShapeDtypeStruct((B, length, N, head_dim), dtype),
        jax.ShapeDtypeStruct((B, S, config.kv_heads, head_dim), dtype),
        jax.ShapeDtypeStruct((B, S, config.kv_heads, head_dim), dtype),
    ]
    for name in config.inputs:
        if name == "mask":
            args.append(jax.ShapeDtypeStruct((B, 1, 1, S), jnp.bool_))
        elif name == "segments":
            args.append(jax.ShapeDtypeStruct((B, length), jnp.int32))
            args.append(jax.ShapeDtypeStruct((B, S), jnp.int32))
        else:
            args.append(jax.ShapeDtypeStruct((), jnp.int32))
    return args


def attention_function(config, flash_attention, paths):
    """`fn(query, key, value, *inputs)`: `dot_product_attention` of the
    configuration; appends `attention_path`'s answer for the same arguments
    (traced ones included) to `paths` each time it is traced."""

    def fn(query, key, value, *inputs):
        call = dict(config.call, flash_attention=flash_attention)
        inputs = list(inputs)
        for name in config.inputs:
            if name == "mask":
                call["mask"] = inputs.pop(0)
            elif name == "segments":
                call["segment_ids"] = (inputs.pop(0), inputs.pop(0))
            else:
                call["query_offset"] = inputs.pop(0)
        paths.append(attention_path(query, value, **call))
        return dot_product_attention(query, key, value, **call)

    return fn


def check_kernel_calls(path, counts, grad, padded=False):
    """The custom calls of a module lowered through `path` (`padded`: a
    padding mask, which cuDNN reads as lengths where it is right padding,
    the Pallas kernel compiled beside it for the other cases)."""
    calls = set(counts)
    if path == "jax_pallas":
        require_calls(calls, TRITON, path)
        assert not calls & CUDNN, calls
        # Forward: one kernel; with the gradient, the forward kernel (which
        # saves the log-sum-exp) and the two backward kernels (dQ, dK/dV).
        assert sum(counts[name] for name in TRITON) == (3 if grad else 1), counts
    elif path == "jax_cudnn":
        require_calls(calls, CUDNN_FORWARD, path)
        if padded:
            require_calls(calls, TRITON, "the left padding's branch")
        else:
            assert not calls & TRITON, calls
        if grad:
            require_calls(calls, CUDNN_BACKWARD, path)
        else:
            assert not calls & CUDNN_BACKWARD, calls
    else:
        assert not calls & (TRITON | CUDNN), calls


@pytest.mark.parametrize(
    ("config", "dtype", "head_dim", "flash_attention", "expected", "grad"), CASES
)
def test_the_planned_kernel_lowers_for_cuda(
    config, dtype, head_dim, flash_attention, expected, grad
):
    config = CONFIGS[config]
    paths = []
    fn = attention_function(config, flash_attention, paths)
    text = exported_text(fn, *structs(config, dtype, head_dim), grad=grad)
    assert paths and set(paths) == {expected}, paths
    padded = "mask" in config.inputs
    check_kernel_calls(expected, custom_call_counts(text), grad, padded)


def test_every_configuration_has_its_paths():
    assert set(PATHS) == set(CONFIGS)
    assert {case.values[4] for case in CASES} >= {"jax_cudnn", "jax_pallas"}


# The helper itself: it finds no kernel where there is none, and the fakes
# are what make the kernels lower.


def test_the_standard_path_has_no_kernel_call():
    config = CONFIGS["causal"]
    paths = []
    fn = attention_function(config, False, paths)
    calls = lowered_custom_calls(fn, *structs(config, "bfloat16", 64), grad=True)
    assert paths == ["standard"]
    assert not calls & (TRITON | CUDNN), calls
    with pytest.raises(AssertionError, match="no custom call of"):
        require_calls(calls, TRITON, "standard")
    with pytest.raises(AssertionError, match="no custom call of"):
        check_kernel_calls("jax_pallas", custom_call_counts(""), grad=False)


def test_interpreted_pallas_lowers_without_triton(monkeypatch):
    from keras_attention.ops import fused

    monkeypatch.setattr(fused, "_pallas_interprets", lambda: True)
    config = CONFIGS["soft_cap"]
    paths = []
    fn = attention_function(config, True, paths)
    calls = lowered_custom_calls(fn, *structs(config, "bfloat16", 64))
    assert paths == ["jax_pallas"]
    assert not calls & TRITON, calls


def test_cudnn_refuses_to_lower_without_the_fake(monkeypatch):
    from jax._src.lib import cuda_versions

    if cuda_versions is not None:
        pytest.skip("JAX's CUDA plugin is installed: cuDNN may be there")
    monkeypatch.undo()
    from keras_attention.ops import plan

    monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
    config = CONFIGS["causal"]
    fn = attention_function(config, None, [])
    with pytest.raises(RuntimeError, match="cuDNN is not detected"):
        lowered_custom_calls(fn, *structs(config, "bfloat16", 64))
