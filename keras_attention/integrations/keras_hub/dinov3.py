"""DINOv3 (keras-hub's `DINOV3Backbone`) with our attention.

keras-hub's `DINOV3Attention` projects with `Dense` layers (`q_proj`,
`k_proj`, `v_proj`, `o_proj`, a bias flag each) and rotates the queries and
keys of the patch tokens only: the class and register tokens before them
keep no position. The backbone computes the patches' cosines and sines once
(`DINOV3RopePositionEmbedding`, 2-D: half the frequencies on the row, half
on the column) and hands them to every block. The adapter is our
`MultiHeadAttention` with flat kernels (`kernel_layout="flat"`), keras-hub's
names and bias flags, and `PatchRotary` as its rotary layer, which takes the
cosines and sines as its `positions`.

References:
    - [Siméoni et al., 2025. DINOv3](https://arxiv.org/abs/2508.10104)
    - [Heo et al., 2024. Rotary Position Embedding for Vision Transformer](
      https://arxiv.org/abs/2403.13298)
"""

import keras
from keras import ops

# A keras-hub without DINOv3 fails this import, which leaves the family out
# (`integrations.keras_hub.UNAVAILABLE`) instead of failing `family_of`.
from keras_hub.src.models.dinov3 import dinov3_layers  # noqa: F401

from keras_attention.integrations.keras_hub.attention import (
    PROJ_NAMES,
    keras_hub_arguments,
)
from keras_attention.integrations.keras_hub.swap import Family
from keras_attention.layers.multi_head_attention import MultiHeadAttention


@keras.saving.register_keras_serializable(package="keras_attention")
class PatchRotary(keras.layers.Layer):
    """A rotary encoding of the patch tokens from given cosines and sines,
    called as our attention calls a rotary layer: `layer(x, start_index,
    positions)` on the projected queries or keys `(B, T, heads, head_dim)`,
    `positions` the pair `(cos, sin)`, each `(P, head_dim)` for the last `P`
    tokens. The first `T - P` tokens (DINOv3's class and register tokens)
    are left as they are. It has no weights; `start_index` is unused (an
    image has no cache)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.built = True  # no weights (and `quantize` asks for it built)

    def call(self, x, start_index=0, positions=None):
        if positions is None:
            raise ValueError(
                "`PatchRotary` takes the patches' `(cos, sin)` as `positions`; "
                "received none."
            )
        cos, sin = positions
        prefix = ops.shape(x)[1] - ops.shape(cos)[0]
        tokens, patches = x[:, :prefix], x[:, prefix:]
        cos = ops.cast(cos, x.dtype)[None, :, None, :]
        sin = ops.cast(sin, x.dtype)[None, :, None, :]
        first, second = ops.split(patches, 2, axis=-1)
        rotated = ops.concatenate([-second, first], axis=-1)
        return ops.concatenate([tokens, patches * cos + rotated * sin], axis=1)

    def compute_output_shape(self, input_shape):
        return input_shape


class DINOV3Attention(MultiHeadAttention):
    """keras-hub's `DINOV3Attention` as our `MultiHeadAttention`: `Dense`
    projections `q_proj`, `k_proj`, `v_proj` and `o_proj` with keras-hub's
    bias flags, the rotary encoding of the patch tokens (`PatchRotary`),
    dropout on the attention output, no mask but the caller's.

    keras-hub's block calls it as `layer(hidden_states, attention_mask=None,
    position_embeddings=None, num_prefix_tokens=0, training=None)`;
    `num_prefix_tokens` needs no passing: the tokens before the patches are
    those the cosines and sines do not cover.

    Args:
        hidden_dim, num_heads, dropout_rate, use_query_bias, use_key_bias,
        use_value_bias, use_proj_bias: keras-hub's `DINOV3Attention`'s.
        **kwargs: `MultiHeadAttention`'s other arguments (`chunk_size`,
            `flash_attention`, ...) and the base layer's.
    """

    # `swap_attention`'s options (chunk_size, ...) reach it.
    takes_attention_options = True
    _projection_names = PROJ_NAMES

    def __init__(
        self,
        hidden_dim,
        num_heads,
        dropout_rate=0.0,
        use_query_bias=True,
        use_key_bias=True,
        use_value_bias=True,
        use_proj_bias=True,
        **kwargs,
    ):
        self.keras_hub_config = keras_hub_arguments(DINOV3Attention.__init__, locals())
        self._biases = {
            "query": use_query_bias,
            "key": use_key_bias,
            "value": use_value_bias,
            "attention_output": use_proj_bias,
        }
        super().__init__(
            num_heads=num_heads,
            key_dim=hidden_dim // num_heads,
            output_dropout=dropout_rate,
            kernel_layout="flat",
            rotary_embedding=PatchRotary(dtype=kwargs.get("dtype")),
            **kwargs,
        )

    def build(self, input_shape, value_shape=None, key_shape=None):
        super().build(input_shape, value_shape or input_shape, key_shape)

    def _flat_dense(self, cls, name, use_bias=None, **kwargs):
        return super()._flat_dense(cls, name, use_bias=self._biases[name], **kwargs)

    def call(
        self,
        inputs,
        attention_mask=None,
        position_embeddings=None,
        num_prefix_tokens=0,
        training=None,
    ):
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        return super().call(
            inputs,
            inputs,
            attention_mask=attention_mask,
            positions=position_embeddings,
            training=training,
        )

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def compute_output_spec(self, inputs, *args, **kwargs):
        return keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)

    def get_config(self):
        config = keras.layers.Layer.get_config(self)
        config.update(self.keras_hub_config)
        return config


FAMILIES = (
    Family(
        name="DINOV3",
        backbones=("keras_hub.src.models.dinov3.dinov3_backbone:DINOV3Backbone",),
        # `DINOV3Layer` builds its attention from its module's name.
        replacements={
            "keras_hub.src.models.dinov3.dinov3_layers:DINOV3Attention": (
                DINOV3Attention
            )
        },
    ),
)
