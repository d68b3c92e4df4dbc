"""The two kinds of positions, one argument and one registry each.

- `input_positions`: positions added to the token embeddings before the
  first block (`INPUT_POSITIONS`: `"learned"`, `"sinusoidal"`, or None for
  none). Taken by `TokenAndPositionEmbedding` and the models.
- `attention_positions`: positions inside attention, on the queries and keys
  or on the scores (`ATTENTION_POSITIONS`: None, `"rotary"`, `"alibi"`,
  `"relative"`). Taken by `MultiHeadAttention`, `GroupedQueryAttention`,
  the Transformer blocks (their self-attention) and the models.

A registry maps each name to the function that builds it and checks names
with one error message; the layers and models ask it instead of spelling
the names out, so an encoding is added here (and in the layer that
computes it) and every layer and model takes it.

`position_encoding`, the single argument that named both kinds before, is
still accepted as a deprecated alias (`positions_from_alias`): its value
says which of the two it means.
"""

import inspect
import warnings
from typing import NamedTuple

from keras_attention.layers.position_encoding import (
    PositionEmbedding,
    SinusoidalPositionEncoding,
)
from keras_attention.layers.relative_position_bias import RelativePositionBias
from keras_attention.layers.rotary_embedding import RotaryEmbedding
from keras_attention.ops.positions import alibi_slopes


class PositionRegistry:
    """The names of one kind of positions and what builds each.

    Args:
        argument: the argument that takes these names (for error messages).
        builders: `{name: function}`; what the function takes and returns
            is the kind's (see `INPUT_POSITIONS`, `ATTENTION_POSITIONS`).
        description: what the kind is, in a few words.
        bounded: the names whose positions stop at the length they are
            built for (a table of positions, such as learned ones); the
            others are computed at any position, so a model that uses only
            those reads and generates sequences of any length.
    """

    def __init__(self, argument, builders, description, bounded=()):
        self.argument = argument
        self.description = description
        self._builders = dict(builders)
        unknown = [kind for kind in bounded if kind not in self._builders]
        if unknown:
            raise ValueError(
                f"`bounded` must name some of {self.names}; received {unknown}."
            )
        self._bounded = tuple(bounded)

    @property
    def names(self):
        """The accepted names, in the registry's order."""
        return tuple(self._builders)

    def __contains__(self, kind):
        try:
            return kind in self._builders
        except TypeError:  # an unhashable value is no name
            return False

    @property
    def bounded(self):
        """The names whose positions end at the length they are built for."""
        return self._bounded

    def is_bounded(self, kind):
        """Whether the positions `kind` names (after `check`) end at the
        length they are built for, rather than being computed at any
        position."""
        return self.check(kind) in self._bounded

    def check(self, kind):
        """Returns `kind` if it is one of `names`, else raises a ValueError
        naming the argument, the value and the choices."""
        if kind in self:
            return kind
        message = (
            f"Unknown `{self.argument}`: {kind!r}. Expected one of "
            f"{', '.join(map(repr, self.names))} ({self.description})."
        )
        for other in _REGISTRIES:
            if other is not self and kind in other:
                message += (
                    f" {kind!r} is one of the `{other.argument}` ({other.description})."
                )
        raise ValueError(message)

    def build(self, kind, /, **kwargs):
        """What the name `kind` builds from `kwargs` (after `check`)."""
        return self._builders[self.check(kind)](**kwargs)

    def __repr__(self):
        return f"PositionRegistry({self.argument!r}, {self.names})"


# -- positions added to the inputs -----------------------------------------
#
# A builder takes `(sequence_length, *, initializer, dtype, name)` and returns
# the layer whose output is added to the token embeddings `(B, T, dim)` (it is
# called as `layer(embeddings, start_index=..., positions=...)`), or None.


def _no_input_positions(sequence_length, *, initializer, dtype, name):
    return None


def _learned(sequence_length, *, initializer, dtype, name):
    return PositionEmbedding(
        sequence_length, initializer=initializer, dtype=dtype, name=name
    )


def _sinusoidal(sequence_length, *, initializer, dtype, name):
    return SinusoidalPositionEncoding(dtype=dtype, name=name)


INPUT_POSITIONS = PositionRegistry(
    "input_positions",
    {
        "learned": _learned,
        "sinusoidal": _sinusoidal,
        None: _no_input_positions,
    },
    "positions added to the token embeddings",
    # A learned table has one row per position it was built for; sinusoidal
    # positions are computed from the index, at any index.
    bounded=("learned",),
)


# -- positions inside attention --------------------------------------------
#
# A builder takes `(*, num_heads, max_wavelength, alibi_bias_max, dtype)` and
# returns the `AttentionPositionParts` that `MultiHeadAttention` applies.


class AttentionPositionParts(NamedTuple):
    """What an attention layer applies for its positions.

    Attributes:
        rotary: a `RotaryEmbedding` for the projected queries and keys,
            started at the cache index.
        alibi_slopes: ALiBi's slopes, one per head, for the attention op.
        relative_bias: a `RelativePositionBias` whose output is added to the
            scores (offset by the cache index).
    """

    rotary: RotaryEmbedding | None = None
    alibi_slopes: object = None
    relative_bias: RelativePositionBias | None = None


def _no_attention_positions(*, num_heads, max_wavelength, alibi_bias_max, dtype):
    return AttentionPositionParts()


def _rotary(*, num_heads, max_wavelength, alibi_bias_max, dtype):
    return AttentionPositionParts(
        rotary=RotaryEmbedding(
            max_wavelength=max_wavelength, dtype=dtype, name="rotary"
        )
    )


def _alibi(*, num_heads, max_wavelength, alibi_bias_max, dtype):
    return AttentionPositionParts(alibi_slopes=alibi_slopes(num_heads, alibi_bias_max))


def _relative(*, num_heads, max_wavelength, alibi_bias_max, dtype):
    # T5's buckets (32, up to offsets of 128), split between keys behind and
    # ahead of the query, one table per attention layer.
    return AttentionPositionParts(
        relative_bias=RelativePositionBias(
            num_heads, dtype=dtype, name="relative_position_bias"
        )
    )


ATTENTION_POSITIONS = PositionRegistry(
    "attention_positions",
    {
        None: _no_attention_positions,
        "rotary": _rotary,
        "alibi": _alibi,
        "relative": _relative,
    },
    "positions inside attention",
    # RoPE's angles and ALiBi's bias are computed from the index, and T5's
    # buckets saturate (every offset past 128 shares the last bucket): none
    # ends at a length.
)

_REGISTRIES = (INPUT_POSITIONS, ATTENTION_POSITIONS)


# -- the deprecated alias ----------------------------------------------------


def positions_from_alias(kwargs, constructor, owner, **arguments):
    """Reads the deprecated `position_encoding` from `kwargs` (removing it).

    `position_encoding` named both kinds of positions before; its value says
    which it means. Among the arguments that `owner` takes, `"learned"` and
    `"sinusoidal"` go to `input_positions` (with no attention positions),
    any other value (None, `"rotary"`, `"alibi"`, ...) to
    `attention_positions` (with no input positions, as `GPT` had none with
    those). An owner that takes one of the two gets the value there, where
    its registry checks it.

    Args:
        kwargs: the constructor's `**kwargs`, where a saved config of an
            earlier release passes `position_encoding`.
        constructor: the `__init__` with the new arguments (whose defaults
            the alias may replace; a value other than the default given with
            the alias is an error).
        owner: the class name, for the messages.
        **arguments: the new arguments `owner` takes, `input_positions`
            and/or `attention_positions`, with their values.

    Returns:
        The values of `arguments`, in their order: unchanged without the
        alias.
    """
    if "position_encoding" not in kwargs:
        return tuple(arguments.values())
    value = kwargs.pop("position_encoding")
    target = "attention_positions"
    if "attention_positions" not in arguments or (
        value is not None and value in INPUT_POSITIONS
    ):
        target = "input_positions" if "input_positions" in arguments else target
    defaults = inspect.signature(constructor).parameters
    for name, given in arguments.items():
        if given != defaults[name].default and not (name == target and given == value):
            raise ValueError(
                f"{owner} received both `position_encoding={value!r}` (the "
                f"deprecated name, here for `{target}`) and `{name}={given!r}`; "
                "pass only the new names."
            )
    values = {name: value if name == target else None for name in arguments}
    replacement = ", ".join(
        f"{name}={new!r}"
        for name, new in values.items()
        if name == target or new != defaults[name].default
    )
    warnings.warn(
        f"{owner}: `position_encoding` is deprecated; use `{replacement}` "
        "(`input_positions` for positions added to the token embeddings, "
        "`attention_positions` for positions inside attention).",
        DeprecationWarning,
        stacklevel=3,
    )
    return tuple(values.values())
