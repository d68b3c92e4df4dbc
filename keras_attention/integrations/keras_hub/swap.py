"""How a keras-hub model gets our attention: each family names the classes
its backbone builds its blocks and attention from, and a swapped backbone is
built with ours in their place, as keras-hub builds it (the same layer names,
variable paths and weight order), then takes the original's weights.

keras-hub's backbones build their blocks in `__init__` from classes their
modules import (`llama_backbone.LlamaTransformerDecoder`,
`llama_decoder.LlamaAttention`); a `Family` replaces those module names with
ours while a swapped backbone is constructed, under a lock, and restores them
after. The swapped backbone class is a registered subclass of keras-hub's,
with keras-hub's config plus `attention_options`, so a `.keras` file of a
swapped model loads (in safe mode) with our attention again, once this module
is imported.
"""

import contextlib
import dataclasses
import importlib
import inspect
import threading

import keras
import keras_hub

from keras_attention.utils import keras_internals

_LOCK = threading.RLock()
# keras-hub's backbone class -> the swapped subclass of it.
_SWAPPED = {}


@dataclasses.dataclass(frozen=True)
class Family:
    """A keras-hub model family our attention replaces the attention of.

    Args:
        name: the family's name in messages (`"Llama"`).
        backbones: keras-hub backbone classes of the family, as
            `"module:ClassName"` (subclasses are taken too).
        replacements: `{"module:Name": ours}`, the classes the backbone's
            modules name that are replaced while a swapped backbone is built:
            the attention layer, and the decoder block (whose subclass hands
            the attention a `masks.DecoderMask`).
        nested: the backbone's constructor arguments that are keras-hub
            backbones of the family themselves (SigLIP's and CLIP's
            encoders, which their `from_config` builds before the backbone):
            swapped too, with their weights and the same options.
        task_class: None, or a function of keras-hub's task class giving the
            class a swapped task of the family is built as, whatever the
            options (Qwen 3.5's, whose cache holds the full-attention layers
            alone and takes `cache_dtype="int8"` too).
    """

    name: str
    backbones: tuple
    replacements: dict
    nested: tuple = ()
    task_class: object = None

    def backbone_classes(self):
        return tuple(_resolve(path) for path in self.backbones)

    @contextlib.contextmanager
    def replaced(self, attention_options):
        """keras-hub's classes replaced by ours (with `attention_options`
        given to every attention layer) while inside."""
        with _LOCK:
            saved = []
            try:
                for path, ours in self.replacements.items():
                    module, name = _module_and_name(path)
                    saved.append((module, name, getattr(module, name)))
                    setattr(module, name, _with_options(ours, attention_options))
                yield
            finally:
                for module, name, original in reversed(saved):
                    setattr(module, name, original)


def block_family(name, backbone, block, layers, **kwargs):
    """The `Family` of a keras-hub backbone whose module builds its blocks
    from one class, whose own module builds the blocks' layers.

    Args:
        name: the family's name in messages.
        backbone: keras-hub's backbone class, as `"module:ClassName"`.
        block: our block class, whose last base is keras-hub's block
            class: ours takes that class's name in the backbone's module.
        layers: `{name: ours}`, the classes that keras-hub's block class
            names in its module (its attention, an MoE model's experts),
            replaced by ours.
        **kwargs: `Family`'s other arguments (`task_class`).

    Returns:
        The `Family`.
    """
    keras_hub_block = block.__bases__[-1]
    backbone_module = backbone.split(":")[0]
    replacements = {
        f"{keras_hub_block.__module__}:{layer_name}": layer
        for layer_name, layer in layers.items()
    }
    replacements[f"{backbone_module}:{keras_hub_block.__name__}"] = block
    return Family(name=name, backbones=(backbone,), replacements=replacements, **kwargs)


def _module_and_name(path):
    module, name = path.split(":")
    return importlib.import_module(module), name


def _resolve(path):
    module, name = _module_and_name(path)
    return getattr(module, name)


def _with_options(ours, options):
    """`ours`, or for an attention layer class a factory that adds
    `options` to the arguments keras-hub's block gives it; for a block class
    naming an `attention_options_argument` (one that makes its attention
    itself), a factory that gives it `options` as that argument."""
    keyword = getattr(ours, "attention_options_argument", None)
    if not options or not (keyword or getattr(ours, "takes_attention_options", False)):
        return ours

    def build(*args, **kwargs):
        if keyword:
            return ours(*args, **{keyword: options}, **kwargs)
        return ours(*args, **{**options, **kwargs})

    return build


def swapped_backbone_class(family, backbone_class, swap):
    """The registered subclass of `backbone_class` built with `family`'s
    replacements (one per keras-hub class); `swap(model, **options)` swaps
    the backbones it is given as arguments (`family.nested`: SigLIP's and
    CLIP's encoders). It is the package's `swap_attention`, passed in so
    that this module need not import the package that imports it."""
    with _LOCK:
        if backbone_class not in _SWAPPED:
            _SWAPPED[backbone_class] = _make_swapped_class(family, backbone_class, swap)
        return _SWAPPED[backbone_class]


def _make_swapped_class(family, backbone_class, swap):
    def __init__(self, *args, attention_options=None, **kwargs):
        options = dict(attention_options or {})
        if family.nested:
            args, kwargs = _swap_nested(
                backbone_class, family, args, kwargs, options, swap
            )
        with family.replaced(options):
            backbone_class.__init__(self, *args, **kwargs)
        self.attention_options = options

    def get_config(self):
        config = backbone_class.get_config(self)
        if self.attention_options:
            config["attention_options"] = dict(self.attention_options)
        return config

    return registered_subclass(
        backbone_class,
        {
            "__init__": __init__,
            "get_config": get_config,
            "__module__": __name__,
            "__doc__": (
                f"keras-hub's `{backbone_class.__name__}` with keras_attention's "
                "attention (`keras_attention.integrations.keras_hub."
                "swap_attention`); the same arguments, plus "
                "`attention_options`, the arguments given to every attention "
                "layer (e.g. `chunk_size`, `cache_dtype`, `flash_attention`)."
            ),
            "family": family,
        },
    )


def _swap_nested(backbone_class, family, args, kwargs, options, swap):
    """`args` and `kwargs` of `backbone_class`'s constructor with the
    backbones among `family.nested` swapped by `swap` (with `options`,
    keeping their weights) unless they are already swapped with `options`."""
    bound = inspect.signature(backbone_class.__init__).bind(None, *args, **kwargs)
    for name in family.nested:
        value = bound.arguments.get(name)
        if value is not None and getattr(value, "attention_options", None) != options:
            bound.arguments[name] = swap(value, **options)
    return bound.args[1:], bound.kwargs


def registered_subclass(base, namespace):
    """A subclass of keras-hub's class `base` that a `.keras` file names and
    loads: of `base`'s name, with `namespace` (its methods and attributes,
    `__module__` among them), registered under the package
    `keras_attention_keras_hub`.

    Args:
        base: a keras-hub class (a backbone, a task).
        namespace: the subclass's attributes.

    Returns:
        The registered subclass.
    """
    subclass = type(base.__name__, (base,), namespace)
    subclass.__qualname__ = base.__name__
    return keras.saving.register_keras_serializable(
        package="keras_attention_keras_hub"
    )(subclass)


def copy_weights(source, target):
    """Assigns `source`'s weights to `target`'s: by variable path where the
    two models have the same paths, else in order; refuses a mismatch of
    count or shape, naming the first."""
    source_weights, target_weights = source.weights, target.weights
    if len(source_weights) != len(target_weights):
        raise ValueError(
            f"The swapped model has {len(target_weights)} weights where "
            f"{source.name} has {len(source_weights)}; the attention swap "
            "supports models as keras-hub builds them (enable LoRA after "
            "swapping, not before)."
        )
    by_path = {w.path: w for w in source_weights}
    if len(by_path) == len(source_weights) and all(
        w.path in by_path for w in target_weights
    ):
        pairs = [(by_path[w.path], w) for w in target_weights]
    else:
        pairs = list(zip(source_weights, target_weights, strict=True))
    for old, new in pairs:
        if tuple(old.shape) != tuple(new.shape):
            raise ValueError(
                f"Weight {old.path} has shape {tuple(old.shape)} in "
                f"{source.name} but {tuple(new.shape)} in the swapped model."
            )
    for old, new in pairs:
        new.assign(old.value)


def compile_like(source, target):
    """Compiles `target` with the arguments `source` was compiled with: a new
    optimizer, metrics and `CausalLM` sampler of the same configs (they hold
    the state of the model they serve), the same losses; leaves it
    uncompiled where `source` is."""
    arguments = keras_internals.compile_arguments(source)
    if arguments is None:
        return
    arguments = keras.tree.map_structure(_fresh, arguments)
    sampler = getattr(source, "sampler", None)
    if sampler is not None:
        arguments["sampler"] = keras_hub.samplers.deserialize(
            keras_hub.samplers.serialize(sampler)
        )
    target.compile(**arguments)


def _fresh(value):
    if isinstance(value, (keras.optimizers.Optimizer, keras.metrics.Metric)):
        return type(value).from_config(value.get_config())
    return value
