"""keras-hub's vision encoders with our attention: ViT, SigLIP (its vision
and text encoders, the attention pooling head included), CLIP (both
encoders) and DINOv2.

Their blocks make a `keras.layers.MultiHeadAttention`, named through the
`keras.layers` module, which cannot be replaced for one model. Each block
here is a subclass of keras-hub's that takes the Keras layer's place by our
`MultiHeadAttention` of the same config when the block assigns it, before it
is built: the variables are made once, with keras-hub's paths and in
keras-hub's order, and the call is Keras' (CLIP's text encoder gives its
causal mask as `use_causal_mask`, which reaches the chunked path as such).
Nothing outside the blocks a swapped backbone builds changes.

Why: an image of 896 px in patches of 14 is 4,096 tokens, whose scores Keras'
layer makes whole, `(B, N, 4096, 4096)`; ours takes the memory-efficient path
there (from 1024 x 1024 scores, or always with `chunk_size`) or a fused
kernel.

SigLIP's and CLIP's backbones take their encoders as arguments (their
`from_config` builds them first): a swapped backbone swaps those too
(`Family.nested`).

References:
    - [Dosovitskiy et al., 2021. An Image is Worth 16x16 Words: Transformers
      for Image Recognition at Scale](https://arxiv.org/abs/2010.11929)
    - [Zhai et al., 2023. Sigmoid Loss for Language Image Pre-Training](
      https://arxiv.org/abs/2303.15343)
    - [Radford et al., 2021. Learning Transferable Visual Models From Natural
      Language Supervision](https://arxiv.org/abs/2103.00020)
    - [Oquab et al., 2023. DINOv2: Learning Robust Visual Features without
      Supervision](https://arxiv.org/abs/2304.07193)
"""

import keras
from keras_hub.src.models.clip import clip_layers
from keras_hub.src.models.dinov2 import dinov2_layers
from keras_hub.src.models.siglip import siglip_layers
from keras_hub.src.models.vit import vit_layers

from keras_attention.integrations.keras_hub.attention import our_attention
from keras_attention.integrations.keras_hub.swap import Family


class _OurAttention:
    """A keras-hub block whose Keras `MultiHeadAttention`, in the attributes
    `attention_attributes`, is ours (with `attention_options`): taken in
    place when the block assigns it, before it is built.

    Args:
        attention_options: arguments of our attention beyond the Keras
            layer's config (`swap_attention`'s options).
        **kwargs: keras-hub's block's arguments.
    """

    # `swap_attention`'s options reach the block as this argument.
    attention_options_argument = "attention_options"
    attention_attributes = ()

    def __init__(self, *args, attention_options=None, **kwargs):
        # Set before keras-hub's constructor, which makes the attention
        # (SigLIP, CLIP, DINOv2), and past Keras' attribute tracking.
        object.__setattr__(self, "_attention_options", dict(attention_options or {}))
        super().__init__(*args, **kwargs)

    def __setattr__(self, name, value):
        if (
            name in self.attention_attributes
            and type(value) is keras.layers.MultiHeadAttention
        ):
            value = our_attention(value, self._attention_options)
        super().__setattr__(name, value)


class ViTEncoderBlock(_OurAttention, vit_layers.ViTEncoderBlock):
    """keras-hub's ViT block, its attention (`mha`, made in `build`) ours."""

    attention_attributes = ("mha",)


class SigLIPEncoderLayer(_OurAttention, siglip_layers.SigLIPEncoderLayer):
    """keras-hub's SigLIP block (vision and text), its attention
    (`self_attn`) ours."""

    attention_attributes = ("self_attn",)


class SigLIPMultiHeadAttentionPooling(
    _OurAttention, siglip_layers.SigLIPMultiHeadAttentionPooling
):
    """keras-hub's SigLIP attention pooling head (a learned probe attending
    over the patches), its attention (`attention`) ours."""

    attention_attributes = ("attention",)


class CLIPEncoderLayer(_OurAttention, clip_layers.CLIPEncoderLayer):
    """keras-hub's CLIP block (vision, and text with its causal mask), its
    attention (`attention`) ours."""

    attention_attributes = ("attention",)


class DINOV2Attention(_OurAttention, dinov2_layers.DINOV2Attention):
    """keras-hub's DINOv2 attention wrapper, its attention (`attention`)
    ours."""

    attention_attributes = ("attention",)


_MODELS = "keras_hub.src.models"

FAMILIES = (
    Family(
        name="ViT",
        backbones=(f"{_MODELS}.vit.vit_backbone:ViTBackbone",),
        # `ViTEncoder` builds its blocks from its module's name.
        replacements={f"{_MODELS}.vit.vit_layers:ViTEncoderBlock": ViTEncoderBlock},
    ),
    Family(
        name="SigLIP",
        backbones=(
            f"{_MODELS}.siglip.siglip_backbone:SigLIPBackbone",
            f"{_MODELS}.siglip.siglip_vision_encoder:SigLIPVisionEncoder",
            f"{_MODELS}.siglip.siglip_text_encoder:SigLIPTextEncoder",
        ),
        replacements={
            f"{_MODELS}.siglip.siglip_vision_encoder:SigLIPEncoderLayer": (
                SigLIPEncoderLayer
            ),
            f"{_MODELS}.siglip.siglip_vision_encoder:"
            "SigLIPMultiHeadAttentionPooling": SigLIPMultiHeadAttentionPooling,
            f"{_MODELS}.siglip.siglip_text_encoder:SigLIPEncoderLayer": (
                SigLIPEncoderLayer
            ),
        },
        nested=("vision_encoder", "text_encoder"),
    ),
    Family(
        name="CLIP",
        backbones=(
            f"{_MODELS}.clip.clip_backbone:CLIPBackbone",
            f"{_MODELS}.clip.clip_vision_encoder:CLIPVisionEncoder",
            f"{_MODELS}.clip.clip_text_encoder:CLIPTextEncoder",
        ),
        replacements={
            f"{_MODELS}.clip.clip_vision_encoder:CLIPEncoderLayer": CLIPEncoderLayer,
            f"{_MODELS}.clip.clip_text_encoder:CLIPEncoderLayer": CLIPEncoderLayer,
        },
        nested=("vision_encoder", "text_encoder"),
    ),
    Family(
        name="DINOV2",
        backbones=(f"{_MODELS}.dinov2.dinov2_backbone:DINOV2Backbone",),
        # `DINOV2Layer` builds its attention from its module's name.
        replacements={
            f"{_MODELS}.dinov2.dinov2_layers:DINOV2Attention": DINOV2Attention
        },
    ),
)
