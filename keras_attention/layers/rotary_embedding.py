"""Rotary position embedding (RoPE): positions as rotations of feature pairs."""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_attention._checks import check_choice, check_rank, static_shape
from keras_attention.layers.position_encoding import (
    InputAlignedLayer,
    positions_from_segments,
)

ROPE_TYPES = ("linear", "dynamic", "yarn")
_MAX_RANK = 8


def _positive_number(name, value):
    """`value` as a Python number if it is a positive finite one (NumPy
    scalars included, so that the config stays JSON)."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Real)
        or not value > 0
        or math.isinf(value)
    ):
        raise ValueError(
            f"`{name}` must be a positive finite number; received {name}={value!r}."
        )
    return value.item() if isinstance(value, np.generic) else value


def _axis(name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"`{name}` must be an integer axis; received {name}={value!r}."
        )
    return int(value)


def _normalized_axes(sequence_axis, feature_axis, rank):
    """The two axes as non-negative indices for a tensor of `rank`, or None
    if they do not name two distinct axes of it."""
    axes = []
    for axis in (sequence_axis, feature_axis):
        if not -rank <= axis < rank:
            return None
        axes.append(axis % rank)
    return tuple(axes) if axes[0] != axes[1] else None


@keras.saving.register_keras_serializable(package="keras_attention")
class RotaryEmbedding(InputAlignedLayer):
    """Rotary position embedding (RoPE) of RoFormer.

    The feature axis of size `d` is cut into two halves; feature `i` of the
    first half and feature `i + d/2` of the second form a pair, which at
    position `m` is rotated in its plane by the angle `m * theta_i`, with
    `theta_i = max_wavelength^(-2i/d)`:

    `out_i = x_i cos(m theta_i) - x_{i+d/2} sin(m theta_i)`,
    `out_{i+d/2} = x_{i+d/2} cos(m theta_i) + x_i sin(m theta_i)`.

    Applied to queries and keys, a rotation at `m` and one at `n` leave a dot
    product that depends on the positions only through `m - n`: attention
    sees relative positions, with nothing added to the embeddings. Unlike
    the position encodings, the layer returns the rotated input, not an
    encoding to add. The pairing (halves, not neighbours), the arguments and
    the scaling variants are those of `keras_hub.layers.RotaryEmbedding`,
    whose outputs this layer reproduces. The angles are computed in float32
    and cast to the layer's compute dtype, so positions stay exact under
    mixed precision.

    Args:
        max_wavelength: the base of the frequencies, `theta_i =
            max_wavelength^(-2i/d)`; 10000 in the paper.
        scaling_factor: stretches the positions to reach past the length a
            model was trained on. `"linear"` divides every frequency by it
            (position interpolation), `"dynamic"` by
            `scaling_factor^(d / (d - 2))`, and `"yarn"` divides the low
            frequencies only, with a ramp between (YaRN).
        rope_type: `"linear"`, `"dynamic"` or `"yarn"`. With the default
            `scaling_factor=1.0` the three differ only through YaRN's ramp,
            which is then the identity.
        beta_fast: YaRN: the number of turns over
            `original_max_position_embeddings` above which a frequency is
            kept (no interpolation).
        beta_slow: YaRN: the number of turns below which a frequency is
            fully interpolated (divided by `scaling_factor`).
        original_max_position_embeddings: YaRN: the context length the model
            was trained on.
        truncate: YaRN: round the ramp's ends to whole pair indices (floor
            of the start, ceiling of the end).
        sequence_axis: the axis of the positions.
        feature_axis: the axis whose halves are paired and rotated; its
            size must be even.
        denominator_dim: the `d` of `theta_i` if not the feature size (for
            models that rotate part of a head with the frequencies of the
            whole head); ignored by `"yarn"`.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: a tensor with a sequence and a feature axis, such as
            `(batch, length, features)` or `(batch, length, num_heads,
            head_dim)` (queries or keys before the attention scores).
        start_index: the position of the first step, an int or a scalar
            tensor (for cached decoding, where each step is rotated alone).
        positions: optional positions `(length,)`, or `(batch, length)` with
            the batch on axis 0, to use instead of
            `start_index + arange(length)`; `start_index` is then ignored.
        segment_ids: optional int `(batch, length)` document ids of packed
            sequences (batch on axis 0): the positions restart at 0 at each
            document (`keras_attention.ops.segment_positions`); not with
            `positions`.

    Example:

    ```python
    query = keras.random.normal((2, 10, 4, 16))  # (batch, T, heads, head_dim)
    rope = keras_attention.layers.RotaryEmbedding()
    rotated = rope(query)  # same shape
    # One decoding step at position 10:
    step = rope(keras.random.normal((2, 1, 4, 16)), start_index=10)
    ```

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864), "RoFormer:
          Enhanced Transformer with Rotary Position Embedding".
        - [Chen et al., 2023](https://arxiv.org/abs/2306.15595), position
          interpolation (`"linear"` scaling).
        - [Peng et al., 2023](https://arxiv.org/abs/2309.00071), "YaRN:
          Efficient Context Window Extension of Large Language Models".
    """

    def __init__(
        self,
        max_wavelength=10000,
        scaling_factor=1.0,
        rope_type="linear",
        beta_fast=32.0,
        beta_slow=1.0,
        original_max_position_embeddings=4096,
        truncate=True,
        sequence_axis=1,
        feature_axis=-1,
        denominator_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        max_wavelength = _positive_number("max_wavelength", max_wavelength)
        scaling_factor = _positive_number("scaling_factor", scaling_factor)
        check_choice("rope_type", rope_type, ROPE_TYPES)
        beta_fast = _positive_number("beta_fast", beta_fast)
        beta_slow = _positive_number("beta_slow", beta_slow)
        original_max_position_embeddings = _positive_number(
            "original_max_position_embeddings", original_max_position_embeddings
        )
        if not isinstance(truncate, (bool, np.bool_)):
            raise ValueError(f"`truncate` must be a bool; received {truncate!r}.")
        sequence_axis = _axis("sequence_axis", sequence_axis)
        feature_axis = _axis("feature_axis", feature_axis)
        if sequence_axis == feature_axis:
            raise ValueError(
                "`sequence_axis` and `feature_axis` must be different axes; "
                f"received sequence_axis={sequence_axis} and "
                f"feature_axis={feature_axis}."
            )
        if denominator_dim is not None:
            denominator_dim = _positive_number("denominator_dim", denominator_dim)
        self.max_wavelength = max_wavelength
        self.scaling_factor = scaling_factor
        self.rope_type = rope_type
        self.beta_fast = beta_fast
        self.beta_slow = beta_slow
        self.original_max_position_embeddings = original_max_position_embeddings
        self.truncate = bool(truncate)
        self.sequence_axis = sequence_axis
        self.feature_axis = feature_axis
        self.denominator_dim = denominator_dim

    def _axes(self, shape):
        """Checks an input shape; returns (sequence axis, feature axis, d)."""
        rank = len(shape)
        allowed = [
            r
            for r in range(1, max(rank, _MAX_RANK) + 1)
            if _normalized_axes(self.sequence_axis, self.feature_axis, r)
        ]
        try:
            check_rank("inputs", shape, allowed)
        except ValueError as error:
            raise ValueError(
                f"{error} These are the ranks where sequence_axis="
                f"{self.sequence_axis} and feature_axis={self.feature_axis} "
                "name two distinct axes."
            ) from None
        sequence_axis, feature_axis = _normalized_axes(
            self.sequence_axis, self.feature_axis, rank
        )
        features = shape[feature_axis]
        if features is None or features % 2:
            raise ValueError(
                f"The feature axis of `inputs` (axis {self.feature_axis}) must "
                "have a known, even size (its two halves are rotated as pairs); "
                f"received input shape {shape}."
            )
        return sequence_axis, feature_axis, features

    def build(self, input_shape):
        self._axes(tuple(input_shape))

    def _inverse_frequencies(self, features):
        """The `d/2` angular frequencies `theta_i` (float32)."""
        half = features // 2
        pair = ops.arange(half, dtype="float32")
        base = float(self.max_wavelength)
        if self.rope_type == "yarn":
            return self._yarn_frequencies(pair, features, base)
        denominator = float(self.denominator_dim or features)
        theta = ops.power(ops.cast(base, "float32"), -2.0 * pair / denominator)
        if self.rope_type == "linear":
            divisor = float(self.scaling_factor)
        else:  # dynamic, with keras-hub's exponent
            divisor = float(self.scaling_factor) ** (features / max(1, features - 2))
        return theta / divisor

    def _yarn_frequencies(self, pair, features, base):
        """YaRN: frequencies with fewer than `beta_slow` turns over the
        original context are divided by `scaling_factor`, those with more
        than `beta_fast` kept, and a linear ramp over the pair index blends
        the two between."""
        theta = ops.power(ops.cast(base, "float32"), -2.0 * pair / features)

        def pair_index_of(turns):
            # The pair i whose wavelength fits `turns` times in the context.
            wavelength = self.original_max_position_embeddings / (turns * 2 * math.pi)
            return features * math.log(wavelength) / (2 * math.log(base))

        start = pair_index_of(self.beta_fast)
        end = pair_index_of(self.beta_slow)
        if self.truncate:
            start, end = math.floor(start), math.ceil(end)
        # The end is clamped at d - 1, as keras-hub 0.32 does (not d/2 - 1).
        start, end = max(start, 0.0), min(end, features - 1.0)
        ramp = ops.clip((pair - start) / max(end - start, 0.001), 0.0, 1.0)
        interpolated = theta / float(self.scaling_factor)
        return interpolated * ramp + theta * (1.0 - ramp)

    def _positions(self, length, start_index, positions):
        if positions is None:
            first = ops.cast(start_index, "float32")
            return ops.arange(length, dtype="float32") + first
        check_rank("positions", static_shape(positions), (1, 2))
        return ops.cast(positions, "float32")

    def call(self, inputs, start_index=0, positions=None, segment_ids=None):
        shape = static_shape(inputs)
        sequence_axis, feature_axis, features = self._axes(shape)
        positions = positions_from_segments(
            segment_ids, positions, start_index, shape[sequence_axis]
        )
        x = ops.cast(inputs, self.compute_dtype)
        length = ops.shape(x)[sequence_axis]
        positions = self._positions(length, start_index, positions)
        batched = len(positions.shape) == 2
        if batched and 0 in (sequence_axis, feature_axis):
            raise ValueError(
                "`positions` of shape (batch, length) need the batch on axis "
                f"0 of `inputs`; received input shape {shape} with "
                f"sequence_axis={self.sequence_axis} and "
                f"feature_axis={self.feature_axis}."
            )

        # Angles `(length, d/2)` or `(batch, length, d/2)` in float32.
        angles = ops.expand_dims(positions, -1) * self._inverse_frequencies(features)
        cos, sin = ops.cos(angles), ops.sin(angles)
        if self.rope_type == "yarn":
            # YaRN's attention temperature, folded into the rotation.
            magnitude = 0.1 * math.log(self.scaling_factor) + 1.0
            cos, sin = cos * magnitude, sin * magnitude
        # Laid out along the input's axes, size 1 on the others.
        if sequence_axis > feature_axis:
            cos, sin = ops.swapaxes(cos, -1, -2), ops.swapaxes(sin, -1, -2)
        occupied = {sequence_axis, feature_axis} | ({0} if batched else set())
        for axis in range(len(shape)):
            if axis not in occupied:
                cos, sin = ops.expand_dims(cos, axis), ops.expand_dims(sin, axis)
        cos = ops.cast(cos, self.compute_dtype)
        sin = ops.cast(sin, self.compute_dtype)

        first, second = ops.split(x, 2, axis=feature_axis)
        return ops.concatenate(
            [first * cos - second * sin, second * cos + first * sin],
            axis=feature_axis,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_wavelength": self.max_wavelength,
                "scaling_factor": self.scaling_factor,
                "rope_type": self.rope_type,
                "beta_fast": self.beta_fast,
                "beta_slow": self.beta_slow,
                "original_max_position_embeddings": (
                    self.original_max_position_embeddings
                ),
                "truncate": self.truncate,
                "sequence_axis": self.sequence_axis,
                "feature_axis": self.feature_axis,
                "denominator_dim": self.denominator_dim,
            }
        )
        return config
