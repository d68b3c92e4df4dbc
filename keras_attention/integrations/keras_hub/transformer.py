"""keras-hub's models on its generic blocks with our attention: GPT-2 and OPT
(`TransformerDecoder`, whose attention is keras-hub's
`CachedMultiHeadAttention`), BERT, RoBERTa (and XLM-RoBERTa), DistilBERT,
ELECTRA and ALBERT (`TransformerEncoder`, whose attention is Keras'
`MultiHeadAttention`), and BART (both blocks).

Both blocks get our `MultiHeadAttention` (as `CachedMultiHeadAttention`, a
drop-in for keras-hub's layer of that name). The decoder block hands it the
causal mask and the padding as such (a `masks.DecoderMask`) instead of
keras-hub's dense `(B, T, S)` mask; the encoder block's padding mask, which
keras-hub broadcasts as `(B, 1, S)`, reaches it as the key mask it is, as
does the encoder's padding in the cross-attention of BART's decoder (over a
cache, whose slots the key mask does not describe, it stays the `(B, 1, S)`
mask). A caller's own `(B, T, S)` mask stays dense.

References:
    - [Vaswani et al., 2017. Attention Is All You Need](
      https://arxiv.org/abs/1706.03762)
    - [Radford et al., 2019. Language Models are Unsupervised Multitask
      Learners](https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf)
    - [Zhang et al., 2022. OPT: Open Pre-trained Transformer Language Models](
      https://arxiv.org/abs/2205.01068)
    - [Lewis et al., 2020. BART](https://arxiv.org/abs/1910.13461)
    - [Devlin et al., 2019. BERT](https://arxiv.org/abs/1810.04805)
    - [Liu et al., 2019. RoBERTa](https://arxiv.org/abs/1907.11692)
    - [Sanh et al., 2019. DistilBERT](https://arxiv.org/abs/1910.01108)
    - [Clark et al., 2020. ELECTRA](https://arxiv.org/abs/2003.10555)
    - [Lan et al., 2020. ALBERT](https://arxiv.org/abs/1909.11942)
"""

import keras
from keras import ops
from keras_hub.src.layers.modeling import transformer_decoder, transformer_encoder

from keras_attention.integrations.keras_hub.attention import our_attention
from keras_attention.integrations.keras_hub.masks import (
    DecoderMask,
    attention_call_arguments,
    decoder_mask,
)
from keras_attention.integrations.keras_hub.swap import Family
from keras_attention.layers.multi_head_attention import MultiHeadAttention


class CachedMultiHeadAttention(MultiHeadAttention):
    """keras-hub's `CachedMultiHeadAttention` as our `MultiHeadAttention`:
    Keras' constructor, keras-hub's call.

    Our layer already has keras-hub's cache (`(B, 2, S, num_heads, key_dim)`,
    `cache_update_index`, `(output, cache)` returned); this adds the masks
    keras-hub's blocks hand their attention: a `masks.DecoderMask` (the
    causal mask and the padding as such), a `(B, 1, S)` mask (keras-hub's
    padding broadcast over the queries: our key mask, without a cache) or a
    dense `(B, T, S)` one.

    Args:
        **kwargs: `MultiHeadAttention`'s arguments (keras-hub's blocks give
            Keras' `num_heads`, `key_dim`, `value_dim`, `dropout`,
            `kernel_initializer`, `bias_initializer`, `dtype`, `name`; the
            options given through `swap_attention` join them).

    Call arguments:
        query: `(B, T, dim)`.
        value: `(B, S, dim)`.
        key: `(B, S, dim)`, defaults to `value`.
        attention_mask: a `DecoderMask`, a `(B, 1, S)` or `(B, T, S)` mask
            (nonzero = attend), or None.
        cache: `(B, 2, S, num_heads, key_dim)` keys and values, or None.
        cache_update_index: where the new keys and values go in the cache;
            None with a cache: the cache is used as it is.
        return_attention_scores: also return the weights.
        training: whether dropout is active.

    Returns:
        The output, then the weights if asked for, then the cache if one was
        passed, as keras-hub's layer.
    """

    # `swap_attention`'s options (chunk_size, cache_dtype, ...) reach it.
    takes_attention_options = True

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
    ):
        return super().call(
            query,
            value,
            key,
            return_attention_scores=return_attention_scores,
            training=training,
            cache=cache,
            cache_update_index=cache_update_index,
            **mask_arguments(attention_mask, query, cache),
        )


def mask_arguments(mask, query, cache):
    """Our call's mask arguments for what keras-hub's blocks pass as
    `attention_mask`: a `(B, 1, S)` mask is the key mask (without a cache,
    whose slots the keys then are and our key mask does not describe), the
    rest as `masks.attention_call_arguments`."""
    if (
        cache is None
        and mask is not None
        and not isinstance(mask, DecoderMask)
        and len(mask.shape) == 3
        and mask.shape[1] == 1
    ):
        return {"key_mask": ops.cast(mask[:, 0, :], "bool")}
    return attention_call_arguments(mask, query, cache)


class TransformerDecoder(transformer_decoder.TransformerDecoder):
    """keras-hub's `TransformerDecoder`, handing its self-attention the
    causal mask, the padding and a caller's mask as such (a
    `masks.DecoderMask`). Its attention layers are ours when it is built
    inside a swapped backbone (the family replaces keras-hub's
    `CachedMultiHeadAttention` there)."""

    def _compute_self_attention_mask(
        self,
        decoder_sequence,
        decoder_padding_mask,
        decoder_attention_mask,
        use_causal_mask,
        self_attention_cache,
        self_attention_cache_update_index,
    ):
        mask = decoder_mask(
            decoder_sequence,
            decoder_padding_mask,
            decoder_attention_mask,
            causal=use_causal_mask,
        )
        if not use_causal_mask and mask.padding_mask is None:
            return decoder_attention_mask
        return mask


class TransformerEncoder(transformer_encoder.TransformerEncoder):
    """keras-hub's `TransformerEncoder` with our attention.

    keras-hub's `build` makes a `keras.layers.MultiHeadAttention`, named
    through the `keras` module (which cannot be replaced for one module), and
    builds it at once; this block takes its place by ours of the same config
    when `build` assigns it, before it is built, so the variables are made
    once, with keras-hub's paths and in keras-hub's order.

    Args:
        attention_options: arguments of our attention beyond the Keras
            layer's config (`swap_attention`'s options).
        **kwargs: keras-hub's `TransformerEncoder`'s arguments.
    """

    # `swap_attention`'s options reach the block as this argument.
    attention_options_argument = "attention_options"

    def __init__(self, *args, attention_options=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.attention_options = dict(attention_options or {})

    def __setattr__(self, name, value):
        if name == "_self_attention_layer" and type(value) is (
            keras.layers.MultiHeadAttention
        ):
            value = our_attention(
                value, self.attention_options, CachedMultiHeadAttention
            )
        super().__setattr__(name, value)


# Where keras-hub's `TransformerDecoder` finds the attention class it builds.
_DECODER_ATTENTION = (
    "keras_hub.src.layers.modeling.transformer_decoder:CachedMultiHeadAttention"
)


def _family(name, module, *, encoder=False, decoder=False):
    """The family of keras-hub's `{name}Backbone` in `keras_hub.src.models.
    {module}`, which builds keras-hub's generic blocks: its `encoder` blocks
    are ours, its `decoder` blocks and their attention too."""
    backbone_module = f"keras_hub.src.models.{module}"
    replacements = {}
    if encoder:
        replacements[f"{backbone_module}:TransformerEncoder"] = TransformerEncoder
    if decoder:
        replacements[f"{backbone_module}:TransformerDecoder"] = TransformerDecoder
        replacements[_DECODER_ATTENTION] = CachedMultiHeadAttention
    return Family(
        name=name,
        backbones=(f"{backbone_module}:{name}Backbone",),
        replacements=replacements,
    )


FAMILIES = (
    _family("GPT2", "gpt2.gpt2_backbone", decoder=True),
    _family("OPT", "opt.opt_backbone", decoder=True),
    # The decoder's cross-attention is ours too, its mask the encoder's
    # padding (broadcast over the queries, as keras-hub's).
    _family("Bart", "bart.bart_backbone", encoder=True, decoder=True),
    _family("Bert", "bert.bert_backbone", encoder=True),
    # XLM-RoBERTa's backbone subclasses RoBERTa's.
    _family("Roberta", "roberta.roberta_backbone", encoder=True),
    _family("DistilBert", "distil_bert.distil_bert_backbone", encoder=True),
    _family("Electra", "electra.electra_backbone", encoder=True),
    _family("Albert", "albert.albert_backbone", encoder=True),
)
