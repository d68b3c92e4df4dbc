"""keras-hub's Gemma 4 causal LM generating over our int8 cache.

Gemma 4's `call_with_cache` does more than the other tasks' (images,
audio, per-layer inputs, layers reading another layer's cache), and slices
and stacks its cache as one tensor `(B, layers, 2, S, N, H)`, `H` the
largest head size. Its int8 cache is therefore one int8 tensor too, the
"packed" cache `(B, layers, 2, S, N, H + 2)`: the int8 values of each row,
then the two bytes of the row's int16 scale code (see
`keras_attention.layers.key_value_cache`). keras-hub's `call_with_cache`
slices and stacks it unchanged; our Gemma 4 attention unpacks its corner
into the quantized pair `(values, scales)` our layers read and write, and
packs it back. The bytes are those of the pair: about a quarter of a
float32 cache.

keras-hub's speculative decoding casts the target's cache to floats for
the assistant draft: `generate` with an `assistant_model` is refused over
the int8 cache.
"""

from keras import ops

from keras_attention.integrations.keras_hub.swap import registered_subclass
from keras_attention.layers.key_value_cache import empty_cache

# The bytes of a scale code after a row's values.
_CODE_BYTES = 2


def is_packed_cache(cache):
    """Whether `cache` is a packed int8 cache (a tensor of int8)."""
    return not isinstance(cache, (tuple, list)) and "int8" in str(cache.dtype)


def pack(values, codes):
    """The packed cache of the quantized pair: int8 `values` `(..., N, H)`
    and int16 scale `codes` `(..., N)` as one int8 tensor `(..., N, H + 2)`
    (the code's high byte, then its low byte less 128)."""
    return ops.concatenate([values, _code_bytes(codes)], axis=-1)


def _code_bytes(codes):
    """int16 `codes` `(..., N)` as int8 bytes `(..., N, 2)`."""
    codes = ops.cast(codes, "int32")
    high = ops.floor_divide(codes, 256)
    low = codes - high * 256 - 128
    return ops.cast(ops.stack([high, low], axis=-1), "int8")


def unpack(packed, heads=None, size=None):
    """The quantized pair `(values, scales)` of the first `heads` heads and
    `size` features (default: all) of a packed cache."""
    width = packed.shape[-1] - _CODE_BYTES
    heads = packed.shape[-2] if heads is None else heads
    size = width if size is None else size
    values = packed[..., :heads, :size]
    high = ops.cast(packed[..., :heads, width], "int32")
    low = ops.cast(packed[..., :heads, width + 1], "int32")
    return values, ops.cast(high * 256 + low + 128, "int16")


def write_corner(packed, values, codes):
    """`packed` with the quantized pair of its first heads and features (a
    layer of smaller heads, or fewer) written in place."""
    width = packed.shape[-1] - _CODE_BYTES
    if tuple(values.shape[-2:]) == (packed.shape[-2], width):
        return pack(values, codes)
    packed = ops.slice_update(packed, (0,) * len(packed.shape), values)
    start = (0,) * (len(packed.shape) - 1) + (width,)
    return ops.slice_update(packed, start, _code_bytes(codes))


def empty_packed_cache(batch_size, num_layers, max_length, heads, size):
    """An empty packed cache `(B, layers, 2, max_length, heads, size + 2)`."""
    layer = pack(*empty_cache(batch_size, max_length, heads, size, "int8"))
    return ops.stack([layer] * num_layers, axis=1)


def quantized_cache_task(task_class):
    """The registered subclass of keras-hub's `Gemma4CausalLM` (`task_class`)
    whose `generate` decodes over the packed int8 cache."""

    def build_cache(self, token_ids, *inputs, **keyword_inputs):
        # keras-hub's `_build_cache` with the packed cache, sized as its own
        # float one: the backbone's key/value heads, the largest head size.
        # Its inputs after `token_ids` are `call_with_cache`'s after the
        # cache and its index, in the same order: they pass on as given.
        backbone = self.backbone
        shape = ops.shape(token_ids)
        cache = empty_packed_cache(
            shape[0],
            backbone.num_layers,
            shape[1],
            backbone.num_key_value_heads,
            max(backbone.head_dim, backbone.global_head_dim or 0),
        )
        _, hidden_states, cache = self.call_with_cache(
            token_ids, cache, 0, *inputs, **keyword_inputs
        )
        return hidden_states, cache

    def generate_step(self, inputs, stop_token_ids=None):
        if getattr(self, "_assistant_model", None) is not None:
            raise ValueError(
                "keras-hub's Gemma 4 assistant reads the target's cache as "
                "floats: speculative decoding needs the float cache. Swap "
                "the model without `cache_dtype`, or generate without "
                "`assistant_model`."
            )
        return task_class.generate_step(self, inputs, stop_token_ids=stop_token_ids)

    return registered_subclass(
        task_class,
        {
            "_build_cache": build_cache,
            "generate_step": generate_step,
            "__module__": __name__,
            "__doc__": (
                f"keras-hub's `{task_class.__name__}` decoding over "
                "keras_attention's cache quantized to int8 "
                "(`swap_attention(causal_lm, cache_dtype='int8')`), packed "
                "in one int8 tensor `(B, layers, 2, S, N, H + 2)`: each "
                "row's values, then its scale code's two bytes."
            ),
            "keras_hub_task_class": task_class,
        },
    )
