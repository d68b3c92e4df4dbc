"""keras-hub's models with keras_attention's attention: `swap_attention`.

keras-hub is imported here only; the rest of the package never needs it.
Import this module before loading a `.keras` file of a swapped model: it
registers the swapped backbone classes.

The keras-hub releases tested (CI runs `tests/integrations` on both, see
`.ci/run`) are `OLDEST_TESTED` to `NEWEST_TESTED`; `setup.cfg`'s
`keras-hub` extra admits them. The adapters follow keras-hub's attention
layers, whose constructors and blocks change between releases: a family
whose classes the installed keras-hub lacks is left out of `FAMILIES` and
named in `UNAVAILABLE`.
"""

try:
    import keras_hub
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError(
        "keras_attention.integrations.keras_hub needs keras-hub "
        "(`pip install keras-hub`); the rest of keras_attention does not."
    ) from error

import importlib
import pkgutil

from keras_attention.integrations.keras_hub.generation import quantized_cache_class
from keras_attention.integrations.keras_hub.swap import (
    compile_like,
    copy_weights,
    swapped_backbone_class,
)

OLDEST_TESTED = "0.23.0"
NEWEST_TESTED = "0.32.0"


def _families():
    """The `FAMILIES` of this package's modules, in their names' order (one
    module per family or group of families), and `{module: reason}` for the
    modules whose keras-hub classes the installed keras-hub lacks."""
    families, missing = [], {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        try:
            module = importlib.import_module(f"{__name__}.{info.name}")
        except ImportError as error:
            if not (error.name or "").startswith("keras_hub"):
                raise
            missing[info.name] = f"keras-hub {keras_hub.__version__} lacks {error.name}"
            continue
        families.extend(getattr(module, "FAMILIES", ()))
    return tuple(families), missing


# The families this keras-hub has, and the modules of those it lacks.
FAMILIES, UNAVAILABLE = _families()


def family_of(backbone_class):
    """The `Family` whose backbones `backbone_class` is (or subclasses), or
    None."""
    for family in FAMILIES:
        if issubclass(backbone_class, family.backbone_classes()):
            return family
    return None


def swapped_class(backbone_class):
    """The registered subclass of a keras-hub backbone class built with our
    attention: the same constructor (plus `attention_options`), e.g.
    `swapped_class(keras_hub.models.LlamaBackbone)(vocabulary_size=...)`."""
    family = family_of(backbone_class)
    if family is None:
        names = ", ".join(family.name for family in FAMILIES)
        raise ValueError(
            f"`swap_attention` takes the families {names}; received a "
            f"{backbone_class.__name__}."
        )
    return swapped_backbone_class(
        family, _keras_hub_class(backbone_class), swap_attention
    )


def swap_attention(model, **attention_options):
    """A copy of a keras-hub backbone or task with our attention in every
    block, the same weights.

    The copy is built as keras-hub builds the model, with our attention layer
    (a `GroupedQueryAttention`) in each block in place of keras-hub's: the
    same layer names, variable paths and weight order, so its outputs equal
    the original's to float tolerance, `generate` gives the same tokens, and
    LoRA (`enable_lora`), quantization (`quantize`) and keras-hub's
    `layout_map` apply as before. The blocks hand the attention the causal
    mask and the padding as such, not a dense `(B, T, S)` mask, so long
    sequences take the memory-efficient path (on every backend and on CPU) or
    a fused kernel. It saves to `.keras` and loads (safe mode included) as a
    swapped model once this module is imported.

    Args:
        model: a keras-hub `Backbone` or `Task` (e.g. `CausalLM`) of a
            family in `FAMILIES`.
        **attention_options: arguments of our `GroupedQueryAttention` for
            every attention layer, e.g. `chunk_size=512`,
            `cache_dtype="int8"`, `flash_attention=True`; kept in the
            backbone's config.

    Returns:
        A new model of the same class (for a backbone, a registered subclass
        of keras-hub's), with the original's weights; a task keeps its
        preprocessor. It is compiled as the original was: the same losses,
        and a new optimizer, metrics and sampler of the same configs (their
        state is not copied); uncompiled where the original is.

    Example:

    ```python
    causal_lm = keras_hub.models.LlamaCausalLM.from_preset("llama3_8b_en")
    causal_lm = swap_attention(causal_lm, cache_dtype="int8")
    causal_lm.generate("What is attention?", max_length=64)
    ```

    References:
        - [Rabe & Staats, 2021. Self-attention Does Not Need O(n^2) Memory](
          https://arxiv.org/abs/2112.05682)
    """
    if isinstance(model, keras_hub.models.Task):
        backbone = model.backbone
    elif isinstance(model, keras_hub.models.Backbone):
        backbone = model
    else:
        raise ValueError(
            "`swap_attention` takes a keras-hub Backbone or Task; received "
            f"{type(model).__name__}."
        )
    cls = swapped_class(type(backbone))
    config = backbone.get_config()
    config.pop("attention_options", None)
    swapped = cls.from_config({**config, "attention_options": attention_options})
    copy_weights(backbone, swapped)
    if model is backbone:
        compile_like(model, swapped)
        return swapped
    task_config = model.get_config()
    # keras-hub's tasks compile themselves when built, with its defaults.
    task_config.update(backbone=swapped, preprocessor=model.preprocessor, compile=False)
    task_class = getattr(type(model), "keras_hub_task_class", type(model))
    if cls.family.task_class is not None:
        # The family's own task (Qwen 3.5's cache), float or int8 alike.
        task_class = cls.family.task_class(task_class)
    elif attention_options.get("cache_dtype") is not None:
        # keras-hub's tasks build a float cache: ours builds the quantized one.
        task_class = quantized_cache_class(task_class)
    task = task_class.from_config(task_config)
    copy_weights(model, task)
    compile_like(model, task)
    return task


def _keras_hub_class(cls):
    """keras-hub's own class of a backbone class (for a swapped one, its
    base)."""
    return cls.__bases__[0] if hasattr(cls, "family") else cls
