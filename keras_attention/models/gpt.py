import keras
from keras import ops

from keras_attention.layers.dropout import Dropout
from keras_attention.layers.key_value_cache import check_cache_dtype
from keras_attention.layers.positions import INPUT_POSITIONS
from keras_attention.layers.transformer_decoder import TransformerDecoderBlock
from keras_attention.models.language_model import (
    LanguageModel,
    PackedInputsMixin,
    check_language_model_args,
    tied_embedding,
)
from keras_attention.models.transformer_options import check_transformer_options


@keras.saving.register_keras_serializable(package="keras_attention")
class GPT(PackedInputsMixin, LanguageModel):
    """A GPT-style decoder-only Transformer language model (Radford et al.,
    2018, 2019).

    Token embeddings plus positions, `num_layers` decoder blocks
    without cross-attention (causal self-attention and feed-forward,
    pre-norm as in GPT-2) and a final layer normalization; the logits come
    from the transpose of the token embedding (tied input and output
    embeddings, `keras.layers.ReversibleEmbedding`). Weights start from
    N(0, 0.02) as in GPT-2. `generate` continues prompts with the blocks'
    key/value caches, each new token costing one position, and samples with
    any keras-hub sampler (greedy, top-k, top-p, with a temperature).

    Args:
        vocabulary_size: number of token ids (0 is padding).
        max_length: the length the model is built and trained for:
            `generate`'s default output length, and with learned positions
            (a table of `max_length` rows) the longest input and output.
            Positions computed at any index (sinusoidal input positions,
            rotary, ALiBi or relative attention positions, or none) read
            and generate longer sequences.
        hidden_dim: the model width.
        num_heads: attention heads per block.
        num_layers: decoder blocks.
        intermediate_dim: feed-forward hidden size.
        dropout: dropout on the embeddings, attention weights and sub-layers.
        activation: feed-forward activation (GPT's `"gelu"`).
        layer_norm_epsilon: epsilon of the layer normalizations.
        input_positions: positions added to the token embeddings:
            `"learned"` (GPT's), `"sinusoidal"` (the 2017 Transformer's) or
            None (see `keras_attention.layers.positions.INPUT_POSITIONS`).
        attention_positions: positions inside the attention: None,
            `"rotary"` (RoPE), `"alibi"` (ALiBi) or `"relative"` (T5's
            bucketed bias, a table per block), usually with
            `input_positions=None`. Without learned positions the model also
            reads and generates sequences longer than `max_length`, the
            length it is trained on (ALiBi was designed to extrapolate).
            `position_encoding`, the earlier single argument, is a
            deprecated alias: `"learned"` or `"sinusoidal"` there are
            `input_positions`, `"rotary"` or `"alibi"` are
            `attention_positions` with `input_positions=None`.
        num_key_value_heads: key/value heads of the attention (grouped-query
            attention: a smaller decoding cache); default `num_heads`.
        end_token_id: optional token at which `generate` stops.
        tokenizer: optional keras-hub tokenizer saved with the model.
        cache_dtype: the storage of the key/value caches of `generate`:
            None (the compute dtype) or `"int8"`, keys and values quantized
            per row of `head_dim` values with one scale each, `2 *
            num_key_value_heads * (head_dim + 2)` bytes per token and block
            against `8 * num_key_value_heads * head_dim` in float32
            (0.28x at `head_dim=16`; see `MultiHeadAttention`'s
            `cache_dtype`). The logits then differ from the float cache's by
            the quantization error; training and `call` are unchanged.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: int token ids `(B, T)`, right-padded with 0; `T <= max_length`
            with learned positions. Or packed sequences, several documents in
            one row: a dict `{"token_ids": (B, T), "segment_ids": (B, T)}`
            whose int `segment_ids` name the document of each token (JAX's
            `SegmentIds`: the same id along a document, a new one where the
            next begins). Each token then attends only to the earlier tokens
            of its own document and its positions restart at 0 there
            (`keras_attention.ops.segment_positions`), so every document
            gets the logits it would get alone. Give the padding at the end
            of a row an id of its own (or the last document's: causal
            attention never lets a real token see it) and mask it out of
            the loss. `fit` takes the dict as `x`; a dict of `token_ids`
            alone is the unpacked model. `generate` and `call_with_cache` take
            unpacked prompts, unchanged.
        training: whether dropout is active.

    Returns:
        Logits `(B, T, vocabulary_size)` of the next tokens.

    Example:

    ```python
    model = keras_attention.models.GPT(
        vocabulary_size=50, max_length=32, hidden_dim=32, num_heads=2,
        num_layers=2, intermediate_dim=64,
    )
    logits = model(np.array([[5, 6, 7]]))  # (1, 3, 50)
    tokens = model.generate(np.array([[5, 6, 7]]), max_length=10)  # (1, 10)
    sampled = model.generate(np.array([[5, 6, 7]]), max_length=10, sampler="top_p")

    # Rotary positions are computed at any index: generate past max_length.
    rotary = keras_attention.models.GPT(
        vocabulary_size=50, max_length=32, hidden_dim=32, num_heads=2,
        num_layers=2, intermediate_dim=64, input_positions=None,
        attention_positions="rotary",
    )
    longer = rotary.generate(np.array([[5, 6, 7]]), max_length=64)  # (1, 64)
    ```

    References:
        - [Radford et al., 2018](https://cdn.openai.com/research-covers/language-unsupervised/language_understanding_paper.pdf)
        - [Radford et al., 2019](https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf)
        - [Press & Wolf, 2017](https://arxiv.org/abs/1608.05859) (tied embeddings)
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864) (RoPE)
        - [Press et al., 2022](https://arxiv.org/abs/2108.12409) (ALiBi)
    """

    config_names = (
        "hidden_dim",
        "num_heads",
        "num_layers",
        "intermediate_dim",
        "dropout",
        "activation",
        "layer_norm_epsilon",
        "input_positions",
        "attention_positions",
        "num_key_value_heads",
        "cache_dtype",
    )

    def __init__(
        self,
        vocabulary_size,
        max_length=256,
        hidden_dim=128,
        num_heads=4,
        num_layers=4,
        intermediate_dim=512,
        dropout=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        input_positions="learned",
        attention_positions=None,
        num_key_value_heads=None,
        end_token_id=None,
        tokenizer=None,
        # After the earlier arguments, whose positions it keeps.
        cache_dtype=None,
        dtype=None,
        **kwargs,
    ):
        check_language_model_args(
            vocabulary_size,
            max_length,
            end_token_id,
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            num_layers=num_layers,
            intermediate_dim=intermediate_dim,
        )
        input_positions, attention_positions = check_transformer_options(
            locals(), GPT.__init__, type(self).__name__
        )
        check_cache_dtype(cache_dtype)

        # === Layers ===
        def initializer():
            return keras.initializers.RandomNormal(stddev=0.02)

        token_embedding = tied_embedding(
            vocabulary_size, hidden_dim, dtype, initializer()
        )
        position_embedding = INPUT_POSITIONS.build(
            input_positions,
            sequence_length=max_length,
            initializer=initializer(),
            dtype=dtype,
            name="position_embedding",
        )
        embedding_dropout = Dropout(dropout, dtype=dtype, name="embedding_dropout")
        blocks = [
            TransformerDecoderBlock(
                intermediate_dim,
                num_heads,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=initializer(),
                normalize_first=True,
                num_key_value_heads=num_key_value_heads,
                attention_positions=attention_positions,
                cache_dtype=cache_dtype,
                dtype=dtype,
                name=f"decoder_block_{i}",
            )
            for i in range(num_layers)
        ]
        final_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="final_norm"
        )

        def forward(token_ids, segment_ids=None, training=None):
            x = token_embedding(token_ids)
            if position_embedding is not None:
                x = x + position_embedding(x, segment_ids=segment_ids)
            x = embedding_dropout(x, training=training)
            for block in blocks:
                # No encoder sequence: causal self-attention only.
                x = block(x, segment_ids=segment_ids, training=training)
            return token_embedding(final_norm(x), reverse=True)

        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        logits = forward(token_ids)
        super().__init__(token_ids, logits, **LanguageModel.arguments_from(locals()))
        self.keep_config(GPT, locals())
        # Packed rows (`PackedInputsMixin`) run the same layers with the ids.
        self._packed_forward = forward

        # === Layers for decoding ===
        self.token_embedding = token_embedding
        self.position_embedding = position_embedding
        self.blocks = blocks
        self.final_norm = final_norm

    @property
    def position_limit(self):
        """The longest sequence the positions reach: the model's
        `max_length` with learned input positions (a table of that many
        rows), None (any length) when every position the model uses is
        computed from its index."""
        if INPUT_POSITIONS.is_bounded(self.input_positions):
            return self.max_length
        return None

    def check_generation_length(self, max_length):
        """Raises a ValueError if the positions cannot reach `max_length`
        (learned positions past the model's `max_length`)."""
        limit = self.position_limit
        if limit is not None and max_length > limit:
            raise ValueError(
                f"`max_length` must be at most the model's max_length={limit}: "
                f"its input positions (input_positions={self.input_positions!r}) "
                f"are a learned table of {limit} rows; received "
                f"max_length={max_length}. "
                "Positions computed at any index (input_positions='sinusoidal' "
                "or None, with attention_positions None, 'rotary', 'alibi' or "
                "'relative') generate past the training length."
            )

    def initial_cache(self, batch_size, max_length):
        """Empty key/value caches of the blocks,
        `(B, 2, max_length, num_key_value_heads, H)` each (the quantized
        pair `(values, scales)` with `cache_dtype="int8"`); `max_length` past
        the model's own where its positions allow (`position_limit`)."""
        self.check_generation_length(max_length)
        return [
            block.initial_self_attention_cache(batch_size, max_length)
            for block in self.blocks
        ]

    def call_with_cache(self, token_ids, cache, index):
        """The logits `(B, T, V)` of `T` tokens at positions `index` to
        `index + T - 1`, which attend to the cached tokens before them, and
        the caches with these tokens' keys and values written in (inference:
        no dropout)."""
        x = self.token_embedding(token_ids)
        if self.position_embedding is not None:
            x = x + self.position_embedding(x, start_index=index)
        caches = []
        for block, block_cache in zip(self.blocks, cache, strict=True):
            x, block_cache = block(
                x,
                self_attention_cache=block_cache,
                self_attention_cache_update_index=index,
            )
            caches.append(block_cache)
        return self.token_embedding(self.final_norm(x), reverse=True), caches

    def decode_step(self, token_ids, cache, index):
        logits, cache = self.call_with_cache(
            ops.expand_dims(token_ids, 1), cache, index
        )
        return logits[:, 0], cache

    def get_config(self):
        config = super().get_config()
        activation = keras.activations.get(self.activation)
        return {**config, "activation": keras.activations.serialize(activation)}
