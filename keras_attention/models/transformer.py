import keras
from keras import ops

from keras_attention._checks import check_choice
from keras_attention.decoding import ancestry_attention_mask
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_attention.layers.transformer_decoder import TransformerDecoderBlock
from keras_attention.layers.transformer_encoder import TransformerEncoderBlock
from keras_attention.models.seq2seq import (
    Seq2Seq,
    check_seq2seq_args,
    token_id_inputs,
)
from keras_attention.models.transformer_options import (
    TRANSFORMER_OPTIONS,
    check_transformer_options,
)
from keras_attention.ops import padding_mask

PRESETS = {
    # Vaswani et al. (2017), "base" model of table 3.
    "transformer_base": {
        "hidden_dim": 512,
        "num_heads": 8,
        "num_encoder_layers": 6,
        "num_decoder_layers": 6,
        "intermediate_dim": 2048,
        "dropout": 0.1,
    },
    # The default: a few minutes of training on a laptop CPU.
    "transformer_small": {
        "hidden_dim": 128,
        "num_heads": 4,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "intermediate_dim": 512,
        "dropout": 0.1,
    },
}


@keras.saving.register_keras_serializable(package="keras_attention")
class Transformer(Seq2Seq):
    """The encoder-decoder Transformer of Vaswani et al. (2017).

    Token embeddings scaled by `sqrt(hidden_dim)` plus sinusoidal (or learned)
    positions (or positions inside the self-attention: rotary, ALiBi, T5's
    relative bias), `num_encoder_layers` encoder blocks (self-attention and
    feed-forward) and `num_decoder_layers` decoder blocks (causal
    self-attention, cross-attention over the encoder output, feed-forward),
    then a linear layer to the target vocabulary. Generation reuses the keys
    and values of earlier steps (the decoder blocks' caches), so each new token
    costs one position, not the whole prefix.

    The defaults are a small CPU-friendly model; `Transformer.from_preset(
    "transformer_base", ...)` gives the paper's base sizes (d_model 512, 8
    heads, 6 + 6 layers, feed-forward 2048).

    Args:
        source_vocabulary_size: number of source tokens (0 is padding).
        target_vocabulary_size: number of target tokens.
        hidden_dim: d_model.
        num_heads: attention heads per block.
        num_encoder_layers: encoder blocks.
        num_decoder_layers: decoder blocks.
        intermediate_dim: feed-forward hidden size.
        dropout: dropout on embeddings, attention weights and sub-layers.
        input_positions: positions added to the token embeddings:
            `"sinusoidal"` (the paper), `"learned"` or None (see
            `keras_attention.layers.positions.INPUT_POSITIONS`).
        attention_positions: positions inside the self-attention of every
            block (encoder and decoder; cross-attention has none): None (the
            paper), `"rotary"`, `"alibi"` or `"relative"`, usually with
            `input_positions=None`. `position_encoding`, the earlier name of
            `input_positions`, is a deprecated alias.
        num_key_value_heads: key/value heads of every attention layer
            (grouped-query attention: a smaller decoding cache); default
            `num_heads`.
        chunk_size: tile size of the memory-efficient attention path, which
            every block then takes where it needs no weights (see
            `MultiHeadAttention`); default None (chosen by length).
        share_embeddings: one embedding table for source and target (needs a
            joint vocabulary: equal vocabulary sizes).
        normalize_first: pre-norm blocks (plus a final layer norm) instead of
            the paper's post-norm (keras-hub's name; `norm_first` is accepted
            from older configs).
        max_source_length: the longest source.
        max_target_length: the longest target (and `generate`'s default).
        start_token_id: the `<start>` token.
        end_token_id: the `<end>` token.
        source_tokenizer: optional keras-hub tokenizer saved with the model.
        target_tokenizer: optional keras-hub tokenizer saved with the model.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: dict with int `"encoder_token_ids"` `(B, S)` and
            `"decoder_token_ids"` `(B, T)` (`<start>` + target), 0-padded.
        training: whether dropout is active.

    Returns:
        Logits `(B, T, target_vocabulary_size)` of the next tokens.

    Example:

    ```python
    model = keras_attention.models.Transformer(
        source_vocabulary_size=50, target_vocabulary_size=40, hidden_dim=32,
        num_heads=2, intermediate_dim=64, max_source_length=16,
        max_target_length=16,
    )
    logits = model({
        "encoder_token_ids": np.array([[5, 6, 7, 0]]),
        "decoder_token_ids": np.array([[2, 9, 10]]),
    })  # (1, 3, 40)
    tokens = model.generate(np.array([[5, 6, 7, 0]]), beam_width=4)
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    presets = PRESETS
    config_names = (
        "hidden_dim",
        "num_heads",
        "num_encoder_layers",
        "num_decoder_layers",
        "intermediate_dim",
        *TRANSFORMER_OPTIONS,
        "share_embeddings",
        "normalize_first",
    )

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        hidden_dim=128,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        intermediate_dim=512,
        dropout=0.1,
        input_positions="sinusoidal",
        attention_positions=None,
        num_key_value_heads=None,
        chunk_size=None,
        share_embeddings=False,
        normalize_first=False,
        max_source_length=64,
        max_target_length=64,
        start_token_id=2,
        end_token_id=3,
        source_tokenizer=None,
        target_tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        if "norm_first" in kwargs:
            normalize_first = kwargs.pop("norm_first")
        check_seq2seq_args(
            source_vocabulary_size,
            target_vocabulary_size,
            max_source_length,
            max_target_length,
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
            intermediate_dim=intermediate_dim,
        )
        input_positions, attention_positions = check_transformer_options(
            locals(), Transformer.__init__, type(self).__name__
        )
        if share_embeddings and source_vocabulary_size != target_vocabulary_size:
            raise ValueError(
                "`share_embeddings=True` needs one joint vocabulary; received "
                f"source_vocabulary_size={source_vocabulary_size} and "
                f"target_vocabulary_size={target_vocabulary_size}."
            )

        # === Layers ===
        def embedding(vocabulary_size, length, name):
            return TokenAndPositionEmbedding(
                vocabulary_size,
                length,
                hidden_dim,
                input_positions=input_positions,
                scale_embeddings=True,
                dtype=dtype,
                name=name,
            )

        if share_embeddings:
            source_embedding = target_embedding = embedding(
                source_vocabulary_size,
                max(max_source_length, max_target_length),
                "shared_embedding",
            )
        else:
            source_embedding = embedding(
                source_vocabulary_size, max_source_length, "source_embedding"
            )
            target_embedding = embedding(
                target_vocabulary_size, max_target_length, "target_embedding"
            )
        block_args = {
            "intermediate_dim": intermediate_dim,
            "num_heads": num_heads,
            "dropout": dropout,
            "normalize_first": normalize_first,
            "attention_positions": attention_positions,
            "num_key_value_heads": num_key_value_heads,
            "chunk_size": chunk_size,
            "dtype": dtype,
        }
        encoder_blocks = [
            TransformerEncoderBlock(**block_args, name=f"encoder_block_{i}")
            for i in range(num_encoder_layers)
        ]
        decoder_blocks = [
            TransformerDecoderBlock(**block_args, name=f"decoder_block_{i}")
            for i in range(num_decoder_layers)
        ]
        source_dropout = Dropout(dropout, dtype=dtype)
        target_dropout = Dropout(dropout, dtype=dtype)
        encoder_norm = decoder_norm = None
        if normalize_first:
            encoder_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, dtype=dtype, name="encoder_norm"
            )
            decoder_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, dtype=dtype, name="decoder_norm"
            )
        output_dense = keras.layers.Dense(
            target_vocabulary_size, dtype=dtype, name="logits"
        )

        # === Functional model ===
        inputs = token_id_inputs()
        encoder_token_ids = inputs["encoder_token_ids"]
        decoder_token_ids = inputs["decoder_token_ids"]
        source_mask = padding_mask(encoder_token_ids)
        target_mask = padding_mask(decoder_token_ids)
        x = source_dropout(source_embedding(encoder_token_ids))
        for block in encoder_blocks:
            x = block(x, padding_mask=source_mask)
        encoded = x if encoder_norm is None else encoder_norm(x)
        y = target_dropout(target_embedding(decoder_token_ids))
        for block in decoder_blocks:
            y = block(
                y,
                encoded,
                decoder_padding_mask=target_mask,
                encoder_padding_mask=source_mask,
            )
        if decoder_norm is not None:
            y = decoder_norm(y)
        logits = output_dense(y)
        super().__init__(inputs, logits, **Seq2Seq.arguments_from(locals()))
        self.keep_config(Transformer, locals())

        # === Layers for decoding ===
        self.source_embedding = source_embedding
        self.target_embedding = target_embedding
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm
        self.output_dense = output_dense

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """A Transformer with the sizes of `preset` (see `Transformer.presets`);
        `kwargs` add the vocabulary sizes and may override any size."""
        check_choice("preset", preset, PRESETS)
        return cls(**{**PRESETS[preset], **kwargs})

    def encode(self, encoder_token_ids):
        """Encoder output `(B, S, hidden_dim)` (inference: no dropout)."""
        mask = padding_mask(encoder_token_ids)
        x = self.source_embedding(encoder_token_ids)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask)
        return x if self.encoder_norm is None else self.encoder_norm(x)

    def initial_cache(self, encoder_token_ids, max_length):
        return self._cache(encoder_token_ids, max_length, max_length)

    def _cache(self, encoder_token_ids, max_length, slots):
        if max_length > self.max_target_length:
            raise ValueError(
                f"`max_length` must be at most the model's max_target_length="
                f"{self.max_target_length} (its target positions); received "
                f"max_length={max_length}."
            )
        encoded = self.encode(encoder_token_ids)
        batch_size = ops.shape(encoder_token_ids)[0]
        return {
            "self_attention": [
                block.initial_self_attention_cache(batch_size, slots)
                for block in self.decoder_blocks
            ],
            "cross_attention": [
                block.compute_cross_attention_cache(encoded)
                for block in self.decoder_blocks
            ],
            "encoder_padding_mask": padding_mask(encoder_token_ids),
        }

    def beam_search_cache(self, encoder_token_ids, max_length, beam_width):
        """The cache of `ancestry_beam_search`: per source (not per beam),
        self-attention caches of `max_length * beam_width` slots
        (position-major: slot `j * k + s` is beam slot `s`'s position `j`)
        and the cross-attention caches; None with `attention_positions`
        (their positions come from the cache slots, which this layout
        interleaves: such a model takes the generic `beam_search`)."""
        if self.attention_positions is not None:
            return None
        return self._cache(encoder_token_ids, max_length, max_length * beam_width)

    def beam_decode_step(self, token_ids, cache, index, ancestry):
        """The logits `(B, k, V)` after the `k` beams' tokens `(B, k)`, all
        at target position `index`: the beams are the `k` queries of one
        sequence per source, which write their keys/values at slots
        `index * k ...` of the self-attention cache and read their own
        histories through `ancestry` (`decoding.ancestry_attention_mask`),
        and attend over the source's cross-attention cache unrepeated."""
        batch_size, k = ops.shape(token_ids)
        y = self.target_embedding(
            ops.reshape(token_ids, (batch_size * k, 1)), start_index=index
        )
        y = ops.reshape(y, (batch_size, k, ops.shape(y)[-1]))
        return self._decode_with_cache(
            y,
            cache,
            index * k,
            decoder_attention_mask=ancestry_attention_mask(ancestry, k),
            use_causal_mask=False,
        )

    def call_with_cache(self, token_ids, cache, index):
        """The logits `(B, T, V)` of `T` target tokens at positions `index`
        to `index + T - 1`, which attend to the cached tokens before them
        and to the encoder output, and the cache with their keys and values
        written in (inference: no dropout)."""
        y = self.target_embedding(token_ids, start_index=index)
        return self._decode_with_cache(y, cache, index)

    def _decode_with_cache(self, y, cache, update_index, **block_arguments):
        """The logits of the embedded target tokens `y` through the decoder
        blocks, which write their keys/values into the self-attention caches
        at slot `update_index` and read the cross-attention caches; and the
        updated cache. `block_arguments` go to every block (a mask)."""
        self_caches = []
        for block, self_cache, cross_cache in zip(
            self.decoder_blocks,
            cache["self_attention"],
            cache["cross_attention"],
            strict=True,
        ):
            y, self_cache, _ = block(
                y,
                self_attention_cache=self_cache,
                self_attention_cache_update_index=update_index,
                cross_attention_cache=cross_cache,
                encoder_padding_mask=cache["encoder_padding_mask"],
                **block_arguments,
            )
            self_caches.append(self_cache)
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return self.output_dense(y), {**cache, "self_attention": self_caches}

    def decode_step(self, token_ids, cache, index):
        logits, cache = self.call_with_cache(token_ids[:, None], cache, index)
        return logits[:, 0], cache

    def attention_weights(self, encoder_token_ids, decoder_token_ids):
        """The last decoder block's cross-attention `(B, T, S)`, averaged over
        heads."""
        encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
        decoder_token_ids = ops.convert_to_tensor(decoder_token_ids, "int32")
        encoded = self.encode(encoder_token_ids)
        y = self.target_embedding(decoder_token_ids)
        for block in self.decoder_blocks:
            y, weights = block(
                y,
                encoded,
                decoder_padding_mask=padding_mask(decoder_token_ids),
                encoder_padding_mask=padding_mask(encoder_token_ids),
                return_attention_scores=True,
            )
        return ops.mean(ops.cast(weights, "float32"), axis=1)
