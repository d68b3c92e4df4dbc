"""What decoding keeps: a decoder's cache filled from a prompt (`prefill`),
and the compiled searches kept on a model (`_compiled`), so that `generate`
compiles once per shape and search."""

from keras import ops

from keras_attention.utils.backend import compile_function


def prefill(model, token_ids, cache):
    """`model`'s decoder cache after the tokens `(B, T)` at positions
    `0..T-1`: in one pass through `model.call_with_cache` when it has one
    (queries at an offset into the cache, causal to the lower right), else
    token by token through `model.decode_step`."""
    if hasattr(model, "call_with_cache"):
        return model.call_with_cache(token_ids, cache, 0)[1]
    batch_size = ops.shape(token_ids)[0]

    def step(index, cache):
        token = ops.squeeze(ops.slice(token_ids, [0, index], [batch_size, 1]), 1)
        return model.decode_step(token, cache, index)[1]

    return ops.fori_loop(0, token_ids.shape[1], step, cache)


def _compiled(model, key, fn, jit_compile, variables=()):
    """`fn` compiled once per `key` for `model` (which it reads), kept on the
    model: a model's `generate` compiles once per shape and search."""
    if not hasattr(model, "_generate_functions"):
        model._generate_functions = {}
    if key not in model._generate_functions:
        model._generate_functions[key] = compile_function(
            fn,
            [*model.trainable_variables, *model.non_trainable_variables, *variables],
            jit_compile=jit_compile,
        )
    return model._generate_functions[key]
