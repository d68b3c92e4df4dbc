"""Test support: seeded random attention calls and the arguments that put a
call on each path, shared by the differential tests of the op
(tests/ops/test_never_read.py, tests/ops/test_sinks.py).

Each call mixes grouped heads, T != S, dense masks of every shape (with
empty rows), the causal mask at an offset, a sliding window, documents
(pairs too), mask functions (head-dependent ones too), ALiBi and a soft cap.
Paths: the standard and chunked paths, the Pallas kernel (JAX, Pallas'
interpreter, the device faked as a GPU), PyTorch's SDPA and FlexAttention
(a CUDA device faked, uncompiled)."""

import keras
import numpy as np
from keras import ops

from keras_attention.ops import alibi_slopes
from keras_attention.ops import mods as mod_library
from keras_attention.utils.backend import compile_function, value_and_grad

BACKEND = keras.backend.backend()


def _stripes(b, h, q_idx, kv_idx):
    """Keys at positions 2 mod 5 are hidden from every query."""
    return ops.not_equal(ops.mod(kv_idx, 5), 2)


def _head_dependent(b, h, q_idx, kv_idx):
    """Head h does not see keys with `kv_idx + h` a multiple of 4: a key hidden
    from one head of a group may be seen by another."""
    return ops.not_equal(ops.mod(kv_idx + h, 4), 0)


def _both(first, second):
    def mask_mod(*grids):
        return ops.logical_and(first(*grids), second(*grids))

    return mask_mod


def _sorted_ids(rng, batch, length):
    return np.sort(rng.integers(0, 3, size=(batch, length)), axis=1).astype("int32")


def random_case(rng):
    """One call: the arguments and the sizes, drawn until some key is unseen."""
    while True:
        batch, heads = int(rng.integers(1, 3)), int(rng.choice([2, 4]))
        kv_heads = int(rng.choice([d for d in (1, 2, heads) if heads % d == 0]))
        q_len, k_len = int(rng.integers(3, 10)), int(rng.integers(3, 12))
        call, numpy_parts = {}, []
        if rng.random() < 0.5:
            shape = [
                (batch, 1, 1, k_len),
                (batch, 1, q_len, k_len),
                (batch, heads, q_len, k_len),
            ][int(rng.integers(3))]
            mask = rng.random(shape) > 0.35
            if shape[2] > 1:
                mask[0, :, int(rng.integers(q_len))] = False  # an empty row
            call["mask"] = mask
        if rng.random() < 0.4:
            call["is_causal"] = True
        if rng.random() < 0.35:
            call["sliding_window"] = int(rng.integers(1, 4))
        if rng.random() < 0.5 and ("is_causal" in call or "sliding_window" in call):
            call["query_offset"] = int(rng.integers(0, max(k_len - q_len, 0) + 3))
        if rng.random() < 0.35:
            keys = _sorted_ids(rng, batch, k_len)
            if q_len == k_len and rng.random() < 0.5:
                call["segment_ids"] = keys
            else:
                call["segment_ids"] = (_sorted_ids(rng, batch, q_len), keys)
        choice = rng.random()
        if choice < 0.25:
            prefix = rng.integers(0, k_len, size=batch).astype("int32")
            call["mask_mod"] = _both(mod_library.prefix_lm_mask_mod(prefix), _stripes)
            numpy_parts.append(("prefix", prefix))
            numpy_parts.append(("stripes",))
        elif choice < 0.45:
            call["mask_mod"] = _head_dependent
            numpy_parts.append(("head",))
        if rng.random() < 0.3:
            call["alibi_slopes"] = alibi_slopes(heads)
        if rng.random() < 0.25:
            call["attn_logits_soft_cap"] = 3.0
        sizes = (batch, q_len, k_len, heads, kv_heads)
        unseen = unseen_keys(call, numpy_parts, sizes)
        if unseen.any():
            return call, sizes, unseen


def allowed_keys(call, numpy_parts, sizes):
    """Bool `(B, N, T, S)`: where query `t` of head `n` may see key `s`."""
    batch, q_len, k_len, heads, _ = sizes
    offset = call.get("query_offset", 0)
    q_pos = (np.arange(q_len) + offset)[None, None, :, None]
    k_pos = np.arange(k_len)[None, None, None, :]
    head = np.arange(heads)[None, :, None, None]
    allowed = np.ones((batch, heads, q_len, k_len), bool)
    if "mask" in call:
        allowed &= call["mask"]
    if call.get("is_causal"):
        allowed &= k_pos <= q_pos
    if "sliding_window" in call:
        allowed &= np.abs(q_pos - k_pos) < call["sliding_window"]
    if "segment_ids" in call:
        ids = call["segment_ids"]
        q_ids, k_ids = ids if isinstance(ids, tuple) else (ids, ids)
        allowed &= q_ids[:, None, :, None] == k_ids[:, None, None, :]
    for part in numpy_parts:
        if part[0] == "prefix":
            in_prefix = k_pos < part[1][:, None, None, None]
            allowed &= in_prefix | (q_pos >= k_pos)
        elif part[0] == "stripes":
            allowed &= k_pos % 5 != 2
        else:
            allowed &= (k_pos + head) % 4 != 0
    return allowed


def unseen_keys(call, numpy_parts, sizes):
    """Bool `(B, S, N_kv)`: the keys no query of the heads sharing them sees."""
    batch, _, k_len, heads, kv_heads = sizes
    seen = allowed_keys(call, numpy_parts, sizes).any(axis=2)  # (B, N, S)
    seen = seen.reshape(batch, kv_heads, heads // kv_heads, k_len).any(axis=2)
    return ~np.transpose(seen, (0, 2, 1))


def outputs_and_gradients(attend):
    """`f(q, k, v, weights) -> [output, dq, dk, dv]` of `sum(output * weights)`
    in one pass: the gradient of the weights is the output. Compiled on JAX,
    whose eager ops compile one by one for each new shape."""

    def loss(q, k, v, weights):
        return ops.sum(attend(q, k, v) * weights)

    gradients = compile_function(
        lambda *tensors: value_and_grad(loss)(*tensors)[1],
        jit_compile=BACKEND == "jax",
    )

    def run(tensors, weights):
        tensors = [ops.convert_to_tensor(x) for x in (*tensors, weights)]
        dq, dk, dv, output = (ops.convert_to_numpy(g) for g in gradients(*tensors))
        return output, [dq, dk, dv]

    return run


def path_call(path, monkeypatch):
    """The extra arguments that put a call on `path`, or None where this
    backend has no such path."""
    if path == "standard":
        return {"flash_attention": False}
    if path == "chunked":
        return {"chunk_size": 4}
    if path == "pallas" and BACKEND == "jax":
        from keras_attention.ops import fused, plan

        # Faked GPU, Pallas' interpreter; tiles of 4 so that one call has
        # empty, partial and full tiles; every mask and score part taken
        # (custom ones run in the interpreter, not through Triton).
        monkeypatch.setattr(plan, "_jax_platform", lambda: "gpu")
        monkeypatch.setattr(
            plan, "_pallas_takes", lambda spec, query: spec.bias is None
        )
        monkeypatch.setattr(fused, "PALLAS_BLOCK_SIZE", 4)
        return {"flash_attention": True}
    if path == "sdpa" and BACKEND == "torch":
        return {}
    if path == "flex" and BACKEND == "torch":
        import torch.nn.attention.flex_attention as flex

        from keras_attention.ops import plan

        # A CUDA device faked: FlexAttention (uncompiled here) takes what
        # SDPA does not take as its own arguments; its backward, refused on
        # a CPU before it runs, is the math the GPU's kernel fuses.
        monkeypatch.setattr(plan, "_torch_platform", lambda: "gpu")
        monkeypatch.setattr(flex, "_validate_device", lambda *tensors: None)
        return {}
    return None


EXPECTED_PATH = {
    "standard": "standard",
    "chunked": "chunked",
    "pallas": "jax_pallas",
    "sdpa": "torch_sdpa",
    "flex": "torch_flex",
}
