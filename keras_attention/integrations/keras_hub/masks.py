"""The self-attention mask of a keras-hub decoder block, kept in its parts.

keras-hub's decoder blocks merge the padding mask, the causal mask and a
caller's attention mask into one dense boolean `(B, T, S)` tensor before the
attention sees it, which is O(T * S) memory and hides its structure: the
chunked path cannot skip the tiles above the diagonal, and the fused kernels
take a dense mask or none. The blocks of a swapped model hand their attention
a `DecoderMask` instead, the parts as such, which `attention_call_arguments`
turns into our layers' own arguments (`use_causal_mask`, `key_mask`,
`attention_mask`).
"""

from keras import ops

from keras_attention.utils.keras_internals import get_keras_mask


class DecoderMask:
    """The parts of a decoder block's self-attention mask.

    Args:
        padding_mask: None or `(B, S)`, nonzero = a real token (a key that
            may be attended to), as keras-hub's `padding_mask`.
        attention_mask: None or a caller's `(B, T, S)` mask, True = attend.
        causal: whether query `t` attends only to keys `<= offset + t`, the
            offset being the cache update index (keras-hub's decoders always
            are; an encoder is not).
    """

    def __init__(self, padding_mask=None, attention_mask=None, causal=True):
        self.padding_mask = padding_mask
        self.attention_mask = attention_mask
        self.causal = causal


class HandsMaskParts:
    """Mixin for a keras-hub decoder block (Llama, Mistral, Mixtral, Phi-3,
    Qwen): its `_compute_self_attention_mask`, which keras-hub's `call` asks
    for the self-attention mask, returns the parts (`DecoderMask`: the
    padding, else the sequence's Keras mask, and a caller's mask; the
    attention adds the causal mask from the cache index, and its window)
    instead of keras-hub's dense mask. The cache arguments, whatever a
    family names them, are not needed."""

    def _compute_self_attention_mask(
        self,
        decoder_sequence,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        *cache_arguments,
        **cache_keyword_arguments,
    ):
        return decoder_mask(
            decoder_sequence, decoder_padding_mask, decoder_attention_mask
        )


def decoder_mask(inputs, padding_mask=None, attention_mask=None, causal=True):
    """The `DecoderMask` of a block's `inputs` `(B, T, dim)`: `padding_mask`,
    else the inputs' Keras mask, with a caller's `attention_mask`."""
    if padding_mask is None:
        padding_mask = get_keras_mask(inputs)
    return DecoderMask(padding_mask, attention_mask, causal=causal)


def attention_call_arguments(mask, query, cache, packed=False):
    """`MultiHeadAttention.call`'s mask arguments for keras-hub's
    `attention_mask`: a `DecoderMask`, a dense `(B, T, S)` mask (True or
    nonzero = attend) or None; `query` `(B, T, dim)`; `cache` the layer's
    cache or None. `packed`: the padding mask holds document ids (0 =
    padding), which become `segment_ids` without a cache."""
    if mask is None:
        return {}
    if not isinstance(mask, DecoderMask):
        return {"attention_mask": ops.cast(mask, "bool")}
    arguments = {"use_causal_mask": mask.causal}
    dense = mask.attention_mask
    if dense is not None:
        dense = ops.cast(dense, "bool")
    padding = mask.padding_mask
    if packed and padding is not None and cache is None:
        # A query attends to the keys of its own document only; padding
        # (id 0) only to padding, which no document reads.
        arguments["segment_ids"] = ops.cast(padding, "int32")
    elif padding is not None:
        padding = ops.cast(padding, "bool")
        if cache is None:
            arguments["key_mask"] = padding
        else:
            # With a cache the keys are its slots, which the new inputs'
            # masks do not describe: keras-hub then reads the padding as a
            # mask over the slots, as this does.
            query_length = ops.shape(query)[1]
            keys = ops.repeat(padding[:, None, :], query_length, axis=1)
            dense = keys if dense is None else ops.logical_and(dense, keys)
    if dense is not None:
        arguments["attention_mask"] = dense
    return arguments
