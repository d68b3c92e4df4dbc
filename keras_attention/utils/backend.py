"""One dispatch over the Keras backends for what `keras.ops` does not cover:
compiling a function with XLA, taking gradients, and reading a `tf.distribute`
strategy (inspected as given: nothing here imports TensorFlow unless the
backend is TensorFlow)."""

import keras


def compile_function(fn, variables=(), jit_compile=True):
    """`fn(*tensors)` compiled with XLA for the backend.

    On TensorFlow through `tf.function(jit_compile=True)`; on JAX through
    `jax.jit`, with `variables` passed in as arguments so that every call
    sees their current values (a jitted function would otherwise bake them in
    as constants). PyTorch, other backends and `jit_compile=False` run `fn`
    eagerly.

    Args:
        fn: a function of tensors (nested structures allowed) that may read
            `variables`.
        variables: the Keras variables `fn` reads (a model's `variables`, say).
        jit_compile: False returns `fn` itself.

    Returns:
        A function with the signature of `fn`.
    """
    backend = keras.backend.backend()
    if not jit_compile:
        return fn
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True, reduce_retracing=True, autograph=False)
    if backend == "jax":
        import jax

        variables = list(variables)
        if not variables:
            return jax.jit(fn)

        @jax.jit
        def stateless(values, *args):
            with keras.StatelessScope(
                state_mapping=list(zip(variables, values, strict=True))
            ):
                return fn(*args)

        return lambda *args: stateless([v.value for v in variables], *args)
    return fn


def value_and_grad(loss_fn):
    """`f(*tensors) -> (loss, grads)`: `loss_fn(*tensors)`, a scalar, and its
    gradients with respect to each argument (each a tensor or a nested
    structure of tensors), on TensorFlow, JAX and PyTorch.

    The result is a pure function of its arguments and can be compiled with
    `compile_function`.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def tf_fn(*tensors):
            with tf.GradientTape() as tape:
                tape.watch(tensors)
                loss = loss_fn(*tensors)
            return loss, tuple(tape.gradient(loss, list(tensors)))

        return tf_fn
    if backend == "jax":
        import jax

        def jax_fn(*tensors):
            argnums = tuple(range(len(tensors)))
            return jax.value_and_grad(loss_fn, argnums=argnums)(*tensors)

        return jax_fn
    if backend == "torch":
        import torch

        def torch_fn(*tensors):
            leaves = [
                t.detach().requires_grad_(True) for t in keras.tree.flatten(tensors)
            ]
            loss = loss_fn(*keras.tree.pack_sequence_as(tensors, leaves))
            grads = torch.autograd.grad(loss, leaves)
            return loss.detach(), tuple(keras.tree.pack_sequence_as(tensors, grads))

        return torch_fn
    raise NotImplementedError(f"no gradients for backend {backend!r}")


def vector_jacobian_product(fn, primals, cotangent):
    """`(fn(*primals), grads)`: `grads[i]` is `cotangent` times the Jacobian
    of `fn` with respect to `primals[i]` (float tensors), on TensorFlow, JAX
    and PyTorch; usable inside a custom gradient and a compiled loop."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(primals)
            output = fn(*primals)
        grads = tape.gradient(
            output,
            list(primals),
            output_gradients=cotangent,
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return output, tuple(grads)
    if backend == "jax":
        import jax

        output, pullback = jax.vjp(fn, *primals)
        return output, tuple(pullback(cotangent))
    if backend == "torch":
        import torch

        with torch.enable_grad():
            leaves = [p.detach().requires_grad_(True) for p in primals]
            output = fn(*leaves)
            grads = torch.autograd.grad(
                output, leaves, cotangent, allow_unused=True, materialize_grads=True
            )
        return output.detach(), tuple(grads)
    raise NotImplementedError(f"no gradients for backend {backend!r}")


def hoist_closure(fn, example_args, name="the function"):
    """`(fn2, hoisted)`: `fn2(*args, *hoisted)` computes `fn(*args)`, where
    `hoisted` are the tensors `fn` reads from its closure that take part in
    a differentiation, now explicit arguments that a custom gradient can
    return gradients for. On JAX through `jax.closure_convert`; on
    TensorFlow and PyTorch, which have no such conversion, `fn` itself after
    checking, on `example_args`, that it reads no trainable variable
    (TensorFlow) and no tensor that requires a gradient (PyTorch): a
    ValueError naming `name` then says to pass the tensor as an argument."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        converted, hoisted = jax.closure_convert(fn, *example_args)
        return converted, tuple(hoisted)
    reads_trainable = False
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            fn(*example_args)
        reads_trainable = bool(tape.watched_variables())
    elif backend == "torch":
        import torch

        with torch.enable_grad():
            output = fn(*(x.detach() for x in example_args))
        reads_trainable = bool(getattr(output, "requires_grad", False))
    if reads_trainable:
        raise ValueError(
            f"{name} reads a trainable tensor from its closure, which the "
            "memory-efficient path's custom gradient cannot reach on the "
            f"{backend} backend: take it as an argument and pass it in "
            "`score_mod_inputs`, so that its gradient is exact."
        )
    return fn, ()


def variable_gradients(variables, loss_fn):
    """The gradients of `loss_fn()` (a scalar that reads `variables`) with
    respect to each of `variables`, as tensors of the backend."""
    variables = list(variables)

    def loss_of(values):
        with keras.StatelessScope(
            state_mapping=list(zip(variables, values, strict=True))
        ):
            return loss_fn()

    values = [keras.ops.convert_to_tensor(v.value) for v in variables]
    return list(value_and_grad(loss_of)(values)[1][0])


def num_workers(strategy):
    """The number of machines (worker and chief tasks) that a multi-worker
    strategy spans; 1 for any other strategy or None."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict() or {}
    return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))


def is_traced(tensor):
    """Whether `tensor` belongs to code being traced (`jax.jit`,
    `tf.function`, `torch.compile`), where Keras' global seed generator
    cannot draw."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return isinstance(tensor, jax.core.Tracer)
    if backend == "tensorflow":
        import tensorflow as tf

        return not tf.executing_eagerly()
    if backend == "torch":
        import torch

        return bool(torch.compiler.is_compiling())
    return False
