from operator import attrgetter

import keras
from keras import ops

from keras_attention.layers.key_value_cache import cache_slots, check_cache_dtype
from keras_attention.layers.transformer_block_base import (
    TransformerBlockBase,
    as_tuple,
)
from keras_attention.ops.masks import merge_masks


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerDecoderBlock(TransformerBlockBase):
    """One decoder layer of the Transformer: causal self-attention,
    cross-attention over the encoder output, then feed-forward.

    Residual sub-layers with layer normalization (post-norm as in the paper,
    pre-norm with `normalize_first=True`). Without `encoder_sequence` at build time
    the block has no cross-attention (a decoder-only, GPT-style block). The call
    arguments follow keras-hub's `TransformerDecoder`, including its caches for
    incremental decoding.

    Its constructor is `TransformerEncoderBlock`'s (both are
    `TransformerBlockBase`'s), with the same arguments and defaults;
    `attention_positions` applies to the self-attention, the cross-attention
    has none. One more argument:

    Args:
        cache_dtype: the storage of the self-attention cache
            (`initial_self_attention_cache`): None (the compute dtype) or
            `"int8"`, keys and values quantized per row, `2 *
            num_key_value_heads * (head_dim + 2)` bytes per token, about 4x
            smaller than float32 (see `MultiHeadAttention`'s `cache_dtype`).
            The cross-attention cache, computed once per source, stays in
            the compute dtype.

    Call arguments:
        decoder_sequence: `(B, T, hidden_dim)`.
        encoder_sequence: `(B, S, hidden_dim)` or None (no cross-attention).
        decoder_padding_mask: boolean `(B, T)`; Keras mask of the input if None.
            With a `self_attention_cache` it masks the cache's slots, so it is
            `(B, max_length)` (the Keras mask of the input is not used then).
        decoder_attention_mask: boolean `(B, T, T)`.
        encoder_padding_mask: boolean `(B, S)`; Keras mask of the encoder
            sequence if None. Padded positions (of either sequence, and the
            cache slots past the current step) are never read as keys or
            values: NaN there reaches no real token's output.
        encoder_attention_mask: boolean `(B, T, S)`.
        self_attention_cache: `(B, 2, max_length, N, H)` keys/values of the
            tokens decoded so far, or the quantized pair `(values, scales)`
            of `cache_dtype="int8"` (see `MultiHeadAttention.initial_cache`).
        self_attention_cache_update_index: position of the first token of
            `decoder_sequence` in the cache.
        cross_attention_cache: `(B, 2, S, N, H)`, the encoder keys/values
            computed once (`compute_cross_attention_cache`).
        cross_attention_cache_update_index: None to use the cross cache as is.
        use_causal_mask: causal self-attention (True for a decoder).
        training: whether dropout is active.
        return_attention_scores: also return the cross-attention weights
            `(B, N, T, S)` (for alignment heatmaps).
        segment_ids: packed sequences in the self-attention: int `(B, T)`
            ids of the document of each decoder token; a token attends only
            to the tokens of its own document (JAX's `SegmentIds`), as if
            each document were decoded alone, on both attention paths. With
            a `self_attention_cache` the keys are the cache's slots: pass the
            pair `(query_ids (B, T), key_ids (B, max_length))`, a single
            tensor is refused. The cross-attention is not affected (mask it
            with `encoder_attention_mask`).
        decoder_sequence_mask, encoder_sequence_mask, mask: the Keras masks
            of the two sequences (`mask` when the decoder sequence is the only
            tensor), filled in by Keras; used when the padding masks are not
            given.

    What padded positions get (the same as keras-hub's `TransformerDecoder`):
    the padding masks, explicit or taken from the Keras masks of the
    sequences (an embedding with `mask_zero=True`), mask keys only, merged
    with the causal mask and the attention masks; an explicit padding mask
    replaces the Keras mask of its sequence, as in keras-hub. The Keras masks
    never become query masks of the attention layers, so a padded decoder
    position attends (causally, and to the encoder's real tokens) like any
    other and gets an output computed the same way: a loss that is not masked
    reads the same values as with keras-hub. A query left with no key at all
    (a left-padded first position under the causal mask, or an encoder
    sequence that is all padding) gets zero attention, as keras-hub's block
    gives it with a dropout rate; with `dropout=0` keras' fused attention
    gives it the unweighted mean of all the values instead. The output
    carries the Keras mask of `decoder_sequence`, as keras-hub's does.

    Returns:
        The output `(B, T, hidden_dim)`; with a self-attention cache, the tuple
        `(output, self_attention_cache[, cross_attention_cache])`; the
        cross-attention weights come last when requested.

    Example:

    ```python
    decoder = keras_attention.layers.TransformerDecoderBlock(128, num_heads=4)
    y = decoder(target_embeddings, encoder_outputs)
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    # keras-hub's names, as in `TransformerBlockBase`.
    _cross_attention_layer = property(attrgetter("cross_attention"))
    _cross_attention_layer_norm = property(attrgetter("cross_attention_layer_norm"))

    def __init__(self, *args, cache_dtype=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.cache_dtype = check_cache_dtype(cache_dtype)

    def _cache_padding_mask(self, padding_mask, cache):
        if padding_mask is None:
            return None
        padding_mask = ops.convert_to_tensor(padding_mask)
        slots, length = cache_slots(cache), padding_mask.shape[-1]
        if slots is not None and length is not None and slots != length:
            raise ValueError(
                "With a `self_attention_cache`, `decoder_padding_mask` must "
                f"cover the cache's {slots} slots: shape (batch, {slots}); "
                f"received shape {tuple(padding_mask.shape)}."
            )
        return self._key_padding_mask(padding_mask)

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        self._check_inputs("decoder_sequence", decoder_sequence_shape)
        self._build_self_attention(decoder_sequence_shape)
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            self._check_inputs("encoder_sequence", encoder_sequence_shape)
            (
                self.cross_attention,
                self.cross_attention_layer_norm,
                self.cross_attention_dropout,
            ) = self._build_attention_sublayer(
                "cross_attention", decoder_sequence_shape, encoder_sequence_shape
            )
        self._build_feedforward(decoder_sequence_shape)

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        encoder_padding_mask=None,
        encoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        use_causal_mask=True,
        training=None,
        return_attention_scores=False,
        decoder_sequence_mask=None,
        encoder_sequence_mask=None,
        mask=None,
        segment_ids=None,
    ):
        has_cross = self.cross_attention is not None
        if has_cross and encoder_sequence is None and cross_attention_cache is None:
            raise ValueError(
                "This decoder block was built with cross-attention: pass "
                "`encoder_sequence` (or a `cross_attention_cache`)."
            )
        if not has_cross and encoder_sequence is not None:
            raise ValueError(
                "This decoder block was built without cross-attention (no "
                "encoder_sequence at build time); it cannot take one now."
            )
        if self_attention_cache is not None:
            # The keys are the cache's slots, which the Keras mask of this
            # step's tokens does not describe; an explicit mask must cover them.
            self_mask = merge_masks(
                self._cache_padding_mask(decoder_padding_mask, self_attention_cache),
                decoder_attention_mask,
            )
        else:
            decoder_padding_mask = self._padding_mask(
                decoder_padding_mask,
                decoder_sequence_mask if mask is None else mask,
                decoder_sequence,
            )
            self_mask = merge_masks(
                self._key_padding_mask(decoder_padding_mask), decoder_attention_mask
            )

        def self_attend(x):
            out, *cache = as_tuple(
                self._attend(
                    self.self_attention,
                    x,
                    x,
                    attention_mask=self_mask,
                    use_causal_mask=use_causal_mask,
                    cache=self_attention_cache,
                    cache_update_index=self_attention_cache_update_index,
                    training=training,
                    segment_ids=segment_ids,
                )
            )
            return (self.self_attention_dropout(out, training=training), *cache)

        x, self_cache = self._residual(
            decoder_sequence, self.self_attention_layer_norm, self_attend
        )

        cross_cache, cross_weights = [], []
        if has_cross:
            encoder_padding_mask = self._padding_mask(
                encoder_padding_mask, encoder_sequence_mask, encoder_sequence
            )
            cross_mask = merge_masks(
                self._key_padding_mask(encoder_padding_mask), encoder_attention_mask
            )
            encoder = encoder_sequence
            if encoder is None:  # only the cache: its keys stand in as values
                encoder = ops.zeros_like(x)

            def cross_attend(y):
                results = as_tuple(
                    self._attend(
                        self.cross_attention,
                        y,
                        encoder,
                        attention_mask=cross_mask,
                        return_attention_scores=return_attention_scores,
                        cache=cross_attention_cache,
                        cache_update_index=cross_attention_cache_update_index,
                        training=training,
                    )
                )
                out = self.cross_attention_dropout(results[0], training=training)
                return (out, *results[1:])

            x, extras = self._residual(x, self.cross_attention_layer_norm, cross_attend)
            if return_attention_scores:
                cross_weights, extras = [extras[0]], extras[1:]
            cross_cache = extras

        x = self._feedforward_residual(x, training)
        results = [x]
        if self_attention_cache is not None:
            results += self_cache
            if has_cross:
                results += cross_cache or [cross_attention_cache]
        results += cross_weights
        return results[0] if len(results) == 1 else tuple(results)

    def compute_output_spec(
        self,
        decoder_sequence,
        encoder_sequence=None,
        self_attention_cache=None,
        cross_attention_cache=None,
        return_attention_scores=False,
        **kwargs,
    ):
        results = [keras.KerasTensor(decoder_sequence.shape, dtype=self.compute_dtype)]
        has_cross = self.cross_attention is not None
        if self_attention_cache is not None:
            results.append(
                keras.tree.map_structure(
                    lambda part: keras.KerasTensor(part.shape, dtype=part.dtype),
                    self_attention_cache,
                )
            )
            if has_cross:
                source = cross_attention_cache
                shape = (
                    source.shape
                    if source is not None
                    else (
                        encoder_sequence.shape[0],
                        2,
                        encoder_sequence.shape[1],
                        self.cross_attention.num_key_value_heads,
                        self.self_attention.key_dim,
                    )
                )
                results.append(keras.KerasTensor(shape, dtype=self.compute_dtype))
        if has_cross and return_attention_scores:
            source_length = (
                encoder_sequence.shape[1]
                if encoder_sequence is not None
                else cross_attention_cache.shape[2]
            )
            results.append(
                keras.KerasTensor(
                    (
                        decoder_sequence.shape[0],
                        self.num_heads,
                        decoder_sequence.shape[1],
                        source_length,
                    ),
                    dtype=self.compute_dtype,
                )
            )
        return results[0] if len(results) == 1 else tuple(results)

    def compute_cross_attention_cache(self, encoder_sequence):
        """The encoder keys/values `(B, 2, S, N, H)`, computed once per source
        and passed as `cross_attention_cache` at every decoding step."""
        if self.cross_attention is None:
            raise ValueError("This decoder block has no cross-attention.")
        return self.cross_attention.compute_key_value_cache(encoder_sequence)

    def initial_self_attention_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache for `max_length` decoding steps, in
        `dtype` (default: `cache_dtype`, else the compute dtype)."""
        return self.self_attention.initial_cache(batch_size, max_length, dtype)

    def get_config(self):
        return {**super().get_config(), "cache_dtype": self.cache_dtype}
