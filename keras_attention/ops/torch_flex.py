"""PyTorch's FlexAttention behind `dot_product_attention`: the `"torch_flex"`
kernel of `keras_attention.ops.fused`.

`torch.nn.attention.flex_attention.flex_attention` over the call's
`AttentionSpec`: the mask parts become one `mask_mod` and the `BlockMask`
that `create_block_mask` builds from it (tiles that no query sees are
skipped), the score parts one `score_mod`. The kinds the spec names are
written here with torch operations (the causal mask, a window, packed
documents, a padding mask over keys or any dense mask read by index, a dense
bias, ALiBi, the soft cap); a user's `mask_mod` and `score_mod`, written with
`keras.ops`, are called as they are (Keras' PyTorch operations run under
FlexAttention's `vmap` and, as far as they are traceable, under
`torch.compile`). Every mod sees `q_idx + query_offset`, as the spec's do.

On a CUDA device FlexAttention runs compiled (`torch.compile(flex_attention)`,
once per process; `create_block_mask(_compile=True)`): the fused Triton
kernel, memory O(T). A call whose own `mask_mod` or `score_mod` does not
compile (T5's bucketed table, `mods.relative_position_score_mod`, fails
Inductor's lowering on PyTorch 2.13's CPU kernel) warns once and runs
uncompiled, which is exact but holds the `(T, S)` scores, as the standard
path does. The plan keeps a `score_mod` with `score_mod_inputs` off this
kernel: the gradient of a table read with Keras' gather does not trace
under FlexAttention's backward (a torch-native read does). Off a GPU
it runs uncompiled: PyTorch's compiled CPU kernel has no backward and no
log-sum-exp, and PyTorch refuses FlexAttention's backward on a CPU, so there
the plan does not choose it; tests call it directly.

A query that sees no key gives zeros and a log-sum-exp of -inf: FlexAttention
returns both itself (tests/ops/test_torch_flex.py checks it).

References:
    - [He et al., 2024. FlexAttention](https://pytorch.org/blog/flexattention/)
"""

import functools
import warnings
import weakref

import torch
from keras import ops
from torch.nn.attention.flex_attention import (
    AuxRequest,
    create_block_mask,
    flex_attention,
)

from keras_attention.ops.plan import KernelUnavailable, is_zero_offset

# The `fn`s of custom parts that `torch.compile` could not compile: their
# calls run uncompiled from then on, without trying again.
_UNCOMPILED = weakref.WeakSet()


def torch_flex_attention(query, key, value, spec, return_lse=False):
    """`(B, T, N, H_v)` attention of `(B, T, N, H)` queries over `(B, S,
    N_kv, H)` keys and values as `spec` describes it, and the float32
    log-sum-exp `(B, N, T)` too with `return_lse`."""
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    batch, heads, query_length, _ = q.shape
    key_length = k.shape[2]
    device = q.device
    offset = None
    if not is_zero_offset(spec.query_offset):
        # A tensor, not a Python int, so that a decoding step at the next
        # position reuses the compiled kernel.
        offset = _tensor(spec.query_offset, device, torch.int32)
    lengths = (query_length, key_length)
    custom = [p.fn for p in (*spec.mask_parts, *spec.score_parts) if p.kind == "custom"]
    compiled = _compiles(device) and not any(fn in _UNCOMPILED for fn in custom)
    block_mask = None
    mask_mod, per_batch, per_head = _mask_mod(spec, offset, lengths, device)
    if mask_mod is not None:

        def make_block_mask(compile_it):
            return create_block_mask(
                mask_mod,
                batch if per_batch else None,
                heads if per_head else None,
                query_length,
                key_length,
                device=device,
                _compile=compile_it,
            )

        block_mask, compiled = _run(make_block_mask, compiled, custom)
    options = {
        "score_mod": _score_mod(spec, offset, lengths, device),
        "block_mask": block_mask,
        "scale": float(spec.scale),
        "enable_gqa": heads != k.shape[1],
    }
    if return_lse:
        options["return_aux"] = AuxRequest(lse=True)

    def attend(compile_it):
        kernel = _compiled_flex_attention() if compile_it else flex_attention
        return kernel(q, k, v, **options)

    result, _ = _run(attend, compiled, custom)
    if not return_lse:
        return result.transpose(1, 2)
    output, aux = result
    return output.transpose(1, 2), aux.lse.to(torch.float32)


def _compiles(device):
    """Whether FlexAttention runs compiled on `device`: on GPUs only (module
    docstring); a test patches it to compile on a CPU."""
    return device.type == "cuda"


@functools.cache
def _compiled_flex_attention():
    return torch.compile(flex_attention)


def _run(call, compiled, custom):
    """`(call(compiled), compiled)`; where the compilation of a call with
    custom parts fails, `(call(False), False)` after a warning. Where even
    the uncompiled call cannot trace a custom part (FlexAttention traces the
    mods with Dynamo: Keras 3.11's torch ops do not trace), raises
    `KernelUnavailable`, and the op takes a `keras.ops` path."""
    if compiled:
        try:
            return call(True), True
        except torch._dynamo.exc.TorchDynamoException as error:
            if not custom:
                raise
            _UNCOMPILED.update(custom)
            warnings.warn(
                "torch.compile could not compile FlexAttention with this call's "
                f"`mask_mod` or `score_mod` ({type(error).__name__}); it runs "
                "uncompiled from now on, which holds the (T, S) scores in "
                "memory. Writing the function with torch operations may let it "
                "compile.",
                stacklevel=4,
            )
    try:
        return call(False), False
    except torch._dynamo.exc.TorchDynamoException as error:
        if not custom:
            raise
        raise KernelUnavailable(
            "PyTorch's FlexAttention cannot trace this call's `mask_mod` or "
            f"`score_mod` ({type(error).__name__}: {str(error).splitlines()[0]})."
        ) from error


def _tensor(x, device, dtype=None):
    """`x` (an array, a Keras variable, a tensor) as a tensor on `device`."""
    return ops.convert_to_tensor(x).to(device=device, dtype=dtype)


def _positions(offset):
    """`q_idx` -> the query's absolute position."""
    if offset is None:
        return lambda q_idx: q_idx
    return lambda q_idx: q_idx + offset


def _reader(tensor, lengths, device, dtype):
    """`fn(b, h, q_idx, kv_idx)` reading a tensor broadcastable to `(B, N,
    T, S)` at the raw query row (an axis of size 1 read at 0; rows and keys
    past the end, which a kernel's last tile may ask for, read the last),
    and whether it depends on `b` and on `h`."""
    tensor = _tensor(tensor, device, dtype)
    while tensor.dim() < 4:
        tensor = tensor.unsqueeze(0)
    sizes = tensor.shape

    def read(b, h, q_idx, kv_idx):
        rows = q_idx.clamp(max=lengths[0] - 1) if sizes[2] > 1 else 0
        cols = kv_idx.clamp(max=lengths[1] - 1) if sizes[3] > 1 else 0
        return tensor[b if sizes[0] > 1 else 0, h if sizes[1] > 1 else 0, rows, cols]

    return read, sizes[0] > 1, sizes[1] > 1


def _mask_mod(spec, offset, lengths, device):
    """`(mask_mod, per_batch, per_head)` of the dense mask and the mask
    parts, `(None, False, False)` without either."""
    position = _positions(offset)
    natives = []  # (mask_mod, depends on b, depends on h)
    if spec.mask is not None:
        natives.append(_reader(spec.mask, lengths, device, torch.bool))
    for part in spec.mask_parts:
        if part.kind == "causal":
            natives.append((_causal(position), False, False))
        elif part.kind == "window":
            natives.append((_window(position, part.window), False, False))
        elif part.kind == "documents":
            query_ids, key_ids = (_tensor(x, device) for x in part.data)
            natives.append((_documents(query_ids, key_ids, lengths), True, False))
    fns = [fn for fn, _, _ in natives]
    users = _users(spec.mask_parts)
    if not fns and not users:
        return None, False, False

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = None
        for fn in fns:
            now = fn(b, h, q_idx, kv_idx)
            allowed = now if allowed is None else allowed & now
        for fn in users:
            now = fn(b, h, position(q_idx), kv_idx)
            allowed = now if allowed is None else allowed & now
        return allowed

    per_batch = bool(users) or any(m[1] for m in natives)
    return mask_mod, per_batch, bool(users) or any(m[2] for m in natives)


def _users(parts):
    """The `fn`s of the custom parts, a tuple that `mask_mod` and `score_mod`
    read directly: Dynamo makes an int in a function's closure symbolic once
    it sees another value at the same place, which Keras' operations do not
    all take, so only the user's functions pass there, never the kernel's
    own windows, lengths and caps."""
    return tuple(part.fn for part in parts if part.kind == "custom")


def _causal(position):
    def mask_mod(b, h, q_idx, kv_idx):
        return position(q_idx) >= kv_idx

    return mask_mod


def _window(position, window):
    def mask_mod(b, h, q_idx, kv_idx):
        return (position(q_idx) - kv_idx).abs() < window

    return mask_mod


def _documents(query_ids, key_ids, lengths):
    def mask_mod(b, h, q_idx, kv_idx):
        rows = q_idx.clamp(max=lengths[0] - 1)
        return query_ids[b, rows] == key_ids[b, kv_idx.clamp(max=lengths[1] - 1)]

    return mask_mod


def _score_mod(spec, offset, lengths, device):
    """The dense bias and the score parts, in the spec's order (the kernel's
    own kinds before the user's function and the soft cap after it, the
    order of `build_spec`), as one `score_mod`, or None."""
    position = _positions(offset)
    before, after = [], []
    if spec.bias is not None:
        before.append(_bias(_reader(spec.bias, lengths, device, torch.float32)[0]))
    users = _users(spec.score_parts)
    for part in spec.score_parts:
        if part.kind == "alibi":
            slopes = _tensor(part.data[0], device, torch.float32)
            before.append(_alibi(slopes, position))
        elif part.kind == "soft_cap":
            # A tensor: a Python float that changes between calls becomes
            # an unbacked symbol that FlexAttention's backward cannot trace.
            after.append(_soft_cap(_tensor(part.data[0], device, torch.float32)))
    if not (before or users or after):
        return None
    inputs = tuple(map(ops.convert_to_tensor, spec.score_mod_inputs))

    def score_mod(score, b, h, q_idx, kv_idx):
        for fn in before:
            score = fn(score, b, h, q_idx, kv_idx)
        for fn in users:
            modified = fn(score, b, h, position(q_idx), kv_idx, *inputs)
            score = modified.to(score.dtype)
        for fn in after:
            score = fn(score, b, h, q_idx, kv_idx)
        return score

    return score_mod


def _bias(read):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + read(b, h, q_idx, kv_idx).to(score.dtype)

    return score_mod


def _alibi(slopes, position):
    def score_mod(score, b, h, q_idx, kv_idx):
        distance = (position(q_idx) - kv_idx).abs().to(score.dtype)
        return score - slopes[h].to(score.dtype) * distance

    return score_mod


def _soft_cap(cap):
    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cap) * cap

    return score_mod
