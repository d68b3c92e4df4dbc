"""keras-hub's causal LMs generating over our int8 cache.

keras-hub's `CausalLM`s build their decoding cache themselves: `_build_cache`
makes one float tensor `(B, layers, 2, S, N, H)` and `call_with_cache` hands
each block its slice `(B, 2, S, N, H)`. Our attention layers also take a
quantized cache, the pair `(values, scales)` (int8 `(B, 2, S, N, H)` and
int16 scale codes `(B, 2, S, N)`, see `keras_attention.layers.key_value_cache`),
about a quarter of a float32 cache. `quantized_cache_class(task_class)` is a
registered subclass of a keras-hub task whose cache is that pair over the
layers, `(B, layers, 2, S, N, H)` int8 and `(B, layers, 2, S, N)` int16:
`swap_attention(causal_lm, cache_dtype="int8")` returns one, and its
`generate` (keras-hub's samplers, which carry any structure of tensors)
decodes with the quantized cache.

The tasks taken are those whose `call_with_cache` is Llama's (embed, the
blocks with `self_attention_cache`, the final norm, the reversed embedding)
or Gemma's (the embedding scaled by `sqrt(hidden_dim)`, the blocks with
`cache`), Phi-3's being Llama's with the blocks' `attention_cache` and
SmolLM 3's Llama's with the final norm named `norm`:
`QUANTIZED_CACHE_TASKS`. A task whose `call_with_cache` is its own (Gemma
4's) names the function making its subclass: `QUANTIZED_CACHE_MAKERS`.
"""

import importlib
import threading

import keras
from keras import ops, tree

from keras_attention.integrations.keras_hub.attention import KerasHubAttention
from keras_attention.integrations.keras_hub.swap import registered_subclass
from keras_attention.layers.key_value_cache import is_quantized_cache

# keras-hub task classes ("module:Name"; subclasses are taken too) -> how
# their `call_with_cache` calls the blocks: whether the embedding is scaled
# by sqrt(hidden_dim), the blocks' cache keywords, and the backbone's final
# norm.
_LLAMA = (
    False,
    "self_attention_cache",
    "self_attention_cache_update_index",
    "layer_norm",
)
_GEMMA = (True, "cache", "cache_update_index", "layer_norm")
_PHI3 = (False, "attention_cache", "attention_cache_update_index", "layer_norm")
_SMOLLM3 = (
    False,
    "self_attention_cache",
    "self_attention_cache_update_index",
    "norm",
)
QUANTIZED_CACHE_TASKS = {
    "keras_hub.src.models.llama.llama_causal_lm:LlamaCausalLM": _LLAMA,
    "keras_hub.src.models.mistral.mistral_causal_lm:MistralCausalLM": _LLAMA,
    "keras_hub.src.models.mixtral.mixtral_causal_lm:MixtralCausalLM": _LLAMA,
    "keras_hub.src.models.phi3.phi3_causal_lm:Phi3CausalLM": _PHI3,
    "keras_hub.src.models.qwen.qwen_causal_lm:QwenCausalLM": _LLAMA,
    "keras_hub.src.models.qwen3.qwen3_causal_lm:Qwen3CausalLM": _LLAMA,
    "keras_hub.src.models.qwen_moe.qwen_moe_causal_lm:QwenMoeCausalLM": _LLAMA,
    "keras_hub.src.models.qwen3_moe.qwen3_moe_causal_lm:Qwen3MoeCausalLM": _LLAMA,
    "keras_hub.src.models.gemma.gemma_causal_lm:GemmaCausalLM": _GEMMA,
    "keras_hub.src.models.gpt_oss.gpt_oss_causal_lm:GptOssCausalLM": _LLAMA,
    "keras_hub.src.models.smollm3.smollm3_causal_lm:SmolLM3CausalLM": _SMOLLM3,
}

# keras-hub task classes whose `call_with_cache` is their own -> the
# function ("module:name") making their quantized-cache subclass.
QUANTIZED_CACHE_MAKERS = {
    "keras_hub.src.models.gemma4.gemma4_causal_lm:Gemma4CausalLM": (
        "keras_attention.integrations.keras_hub.gemma4_cache:quantized_cache_task"
    ),
}

# Where keras-hub's blocks keep their attention layer: Llama's, Mistral's,
# Mixtral's and Qwen's `_self_attention_layer`, GPT-OSS's
# `self_attention_layer`, Phi-3's and Gemma's `attention`, SmolLM 3's
# `self_attn`. (Read by name: on
# PyTorch a block's layers are not in its `__dict__` but in torch's module
# registry.)
_BLOCK_ATTENTION_ATTRIBUTES = (
    "_self_attention_layer",
    "self_attention_layer",
    "attention",
    "self_attn",
)

_LOCK = threading.RLock()
# keras-hub's task class -> its quantized-cache subclass.
_QUANTIZED = {}


def attention_layers(model):
    """Our attention layer of each block of a swapped backbone or task, in
    order (one per block; Qwen 3.5's DeltaNet blocks, which have none,
    skipped)."""
    backbone = getattr(model, "backbone", model)
    layers = []
    for block in backbone.transformer_layers:
        if getattr(block, "layer_type", None) == "linear_attention":
            continue  # Qwen 3.5's DeltaNet blocks, keras-hub's own
        found = [
            getattr(block, name)
            for name in _BLOCK_ATTENTION_ATTRIBUTES
            if isinstance(getattr(block, name, None), KerasHubAttention)
        ]
        if len(found) != 1:
            raise ValueError(
                f"Expected one keras_attention attention layer in block "
                f"{block.name}, found {len(found)}: swap the model's attention "
                "first (`swap_attention`)."
            )
        layers.append(found[0])
    return layers


def empty_cache(causal_lm, batch_size, max_length, dtype=None):
    """An empty cache of every block of a swapped task, stacked on axis 1 as
    keras-hub stacks its own: `(B, layers, 2, S, N, H)`, or for an `"int8"`
    cache (`dtype`, default the layers' `cache_dtype`) the pair of int8
    values and int16 scale codes `(B, layers, 2, S, N)`."""
    caches = [
        layer.initial_cache(batch_size, max_length, dtype=dtype)
        for layer in attention_layers(causal_lm)
    ]
    return tree.map_structure(lambda *parts: ops.stack(parts, axis=1), *caches)


def cache_bytes(cache):
    """The bytes a cache (a tensor or the quantized pair) holds."""
    total = 0
    for part in tree.flatten(cache):
        size = 1
        for dim in part.shape:
            size *= int(dim)
        total += size * _itemsize(part.dtype)
    return total


def _itemsize(dtype):
    dtype = keras.backend.standardize_dtype(dtype)
    bits = "".join(c for c in dtype if c.isdigit())
    return int(bits) // 8 if bits else 1


def _task_style(task_class):
    """The style (`QUANTIZED_CACHE_TASKS`) or the maker
    (`QUANTIZED_CACHE_MAKERS`) of a task class, or None."""
    for path, style in {**QUANTIZED_CACHE_MAKERS, **QUANTIZED_CACHE_TASKS}.items():
        try:
            base = _named(path)
        except (ImportError, AttributeError):  # pragma: no cover - keras-hub
            continue
        if issubclass(task_class, base):
            return _named(style) if isinstance(style, str) else style
    return None


def _named(path):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def quantized_cache_class(task_class):
    """The registered subclass of a keras-hub `CausalLM` class that decodes
    over our quantized cache (`cache_dtype="int8"`); a ValueError for a
    task whose `call_with_cache` is not one of `QUANTIZED_CACHE_TASKS`'."""
    task_class = getattr(task_class, "keras_hub_task_class", task_class)
    style = _task_style(task_class)
    if style is None:
        tasks = {**QUANTIZED_CACHE_TASKS, **QUANTIZED_CACHE_MAKERS}
        names = ", ".join(path.split(":")[1] for path in tasks)
        raise ValueError(
            "`cache_dtype='int8'` needs a task whose cache keras_attention "
            f"builds: {names}; received a {task_class.__name__}. Swap its "
            "backbone alone, or leave the cache in the compute dtype."
        )
    with _LOCK:
        if task_class not in _QUANTIZED:
            if callable(style):
                _QUANTIZED[task_class] = style(task_class)
            else:
                _QUANTIZED[task_class] = _make_quantized_class(task_class, *style)
        return _QUANTIZED[task_class]


def _make_quantized_class(
    task_class, scale_embedding, cache_name, index_name, norm_name
):
    def call_with_cache(self, token_ids, cache, cache_update_index):
        if not is_quantized_cache(cache):
            return task_class.call_with_cache(
                self, token_ids, cache, cache_update_index
            )
        values, scales = cache
        x = self.backbone.token_embedding(token_ids)
        if scale_embedding:
            x = x * ops.cast(ops.sqrt(self.backbone.hidden_dim), x.dtype)
        new_values, new_scales = [], []
        for i, block in enumerate(self.backbone.transformer_layers):
            x, (layer_values, layer_scales) = block(
                x,
                **{
                    cache_name: (values[:, i, ...], scales[:, i, ...]),
                    index_name: cache_update_index,
                },
            )
            new_values.append(layer_values)
            new_scales.append(layer_scales)
        cache = (ops.stack(new_values, axis=1), ops.stack(new_scales, axis=1))
        hidden_states = x = getattr(self.backbone, norm_name)(x)
        logits = self.backbone.token_embedding(x, reverse=True)
        return logits, hidden_states, cache

    def build_cache(self, token_ids):
        shape = ops.shape(token_ids)
        cache = empty_cache(self, shape[0], shape[1])
        # The index as a tensor, as keras-hub's `_build_cache` gives it: a
        # block that takes its cache in `**kwargs` (SmolLM 3's) refuses a
        # mix of tensors and Python numbers there.
        index = ops.convert_to_tensor(0, dtype="int32")
        _, hidden_states, cache = self.call_with_cache(token_ids, cache, index)
        return hidden_states, cache

    return registered_subclass(
        task_class,
        {
            "call_with_cache": call_with_cache,
            "_build_cache": build_cache,
            "__module__": __name__,
            "__doc__": (
                f"keras-hub's `{task_class.__name__}` decoding over "
                "keras_attention's cache quantized to int8 "
                "(`swap_attention(causal_lm, cache_dtype='int8')`): "
                "`call_with_cache` takes and returns the pair (int8 values "
                "`(B, layers, 2, S, N, H)`, int16 scale codes "
                "`(B, layers, 2, S, N)`), or keras-hub's float cache."
            ),
            "keras_hub_task_class": task_class,
        },
    )
