import keras
from keras import ops

from keras_attention._checks import check_choice, check_rate
from keras_attention.layers.additive_attention import AdditiveAttention
from keras_attention.layers.attention_rnn_cell import AttentionRNNCell
from keras_attention.layers.dot_product_attention import DotProductAttention
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.location_attention import LocationAttention
from keras_attention.layers.multiplicative_attention import MultiplicativeAttention
from keras_attention.models.seq2seq import (
    Seq2Seq,
    check_seq2seq_args,
    token_id_inputs,
)
from keras_attention.ops import padding_mask

# attention name -> (cell style, attention layer factory(units, max_source_length))
ATTENTIONS = {
    "none": (None, None),
    "bahdanau": ("bahdanau", lambda units, length: AdditiveAttention(units=units)),
    "luong-dot": ("luong", lambda units, length: DotProductAttention(scale=False)),
    "luong-general": ("luong", lambda units, length: MultiplicativeAttention()),
    "luong-concat": ("luong", lambda units, length: AdditiveAttention(units=units)),
    "location": ("luong", lambda units, length: LocationAttention(max_length=length)),
}
CELLS = {"gru": keras.layers.GRUCell, "lstm": keras.layers.LSTMCell}


@keras.saving.register_keras_serializable(package="keras_attention")
class RNNSeq2Seq(Seq2Seq):
    """Recurrent encoder-decoder for translation, with or without attention.

    The encoder is a bidirectional GRU over the source embeddings. Its final
    forward and backward states, through `tanh(W_s [h_fwd; h_bwd])`, start the
    decoder (a GRU or LSTM). Without attention that vector is all the decoder
    learns of the source, the bottleneck of Sutskever et al. (2014). With
    attention the annotations, projected to `units`, form a memory that the
    decoder attends to at every step through an `AttentionRNNCell`:

    - `"bahdanau"`: additive score of the previous state; the read-out
      `tanh(W_o [s_t; c_t; E y_{t-1}])` feeds the softmax.
    - `"luong-dot"`, `"luong-general"`, `"luong-concat"`, `"location"`: Luong's
      dot, general, concat (additive) and location scores of the new state, the
      attentional vector `tanh(W_c [c_t; h_t])` feeds the softmax and, through
      input feeding, the next step.

    Args:
        source_vocabulary_size: number of source tokens (0 is padding).
        target_vocabulary_size: number of target tokens.
        embedding_dim: size of the token embeddings.
        units: size of each encoder direction, of the decoder state and of the
            attention memory.
        attention: `"none"`, `"bahdanau"`, `"luong-dot"`, `"luong-general"`,
            `"luong-concat"` or `"location"`.
        decoder_cell: `"gru"` or `"lstm"`.
        dropout: dropout on embeddings and on the read-out.
        max_source_length: the longest source (the positions that location
            attention scores).
        max_target_length: default number of tokens `generate` produces.
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
    model = keras_attention.models.RNNSeq2Seq(
        source_vocabulary_size=50, target_vocabulary_size=40, units=32,
        embedding_dim=16, attention="bahdanau",
    )
    logits = model({
        "encoder_token_ids": np.array([[5, 6, 7, 0]]),
        "decoder_token_ids": np.array([[2, 9, 10]]),
    })  # (1, 3, 40)
    tokens = model.generate(np.array([[5, 6, 7, 0]]), max_length=5)
    ```

    References:
        - [Bahdanau et al., 2015](https://arxiv.org/abs/1409.0473)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
        - [Sutskever et al., 2014](https://arxiv.org/abs/1409.3215)
    """

    config_names = ("embedding_dim", "units", "attention", "decoder_cell", "dropout")

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        embedding_dim=128,
        units=256,
        attention="bahdanau",
        decoder_cell="gru",
        dropout=0.1,
        max_source_length=64,
        max_target_length=64,
        start_token_id=2,
        end_token_id=3,
        source_tokenizer=None,
        target_tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        check_seq2seq_args(
            source_vocabulary_size,
            target_vocabulary_size,
            max_source_length,
            max_target_length,
            embedding_dim=embedding_dim,
            units=units,
        )
        check_choice("attention", attention, ATTENTIONS)
        check_choice("decoder_cell", decoder_cell, CELLS)
        check_rate("dropout", dropout)
        style, make_attention = ATTENTIONS[attention]

        # === Layers ===
        source_embedding = keras.layers.Embedding(
            source_vocabulary_size, embedding_dim, dtype=dtype, name="source_embedding"
        )
        target_embedding = keras.layers.Embedding(
            target_vocabulary_size, embedding_dim, dtype=dtype, name="target_embedding"
        )
        embedding_dropout = Dropout(dropout, dtype=dtype)
        encoder = keras.layers.Bidirectional(
            keras.layers.GRU(units, return_sequences=True, return_state=True),
            dtype=dtype,
            name="encoder",
        )
        bridge = keras.layers.Dense(
            units, activation="tanh", dtype=dtype, name="bridge"
        )
        cell = CELLS[decoder_cell](units, dtype=dtype, name="decoder_cell")
        memory_projection = readout = None
        if style is not None:
            memory_projection = keras.layers.Dense(
                units, use_bias=False, dtype=dtype, name="memory_projection"
            )
            cell = AttentionRNNCell(
                cell,
                make_attention(units, max_source_length),
                memory_dim=units,
                style=style,
                dtype=dtype,
                name="attention_cell",
            )
        if style == "bahdanau":
            readout = keras.layers.Dense(
                units, activation="tanh", dtype=dtype, name="readout"
            )
        decoder = keras.layers.RNN(
            cell, return_sequences=True, dtype=dtype, name="decoder"
        )
        output_dropout = Dropout(dropout, dtype=dtype)
        output_dense = keras.layers.Dense(
            target_vocabulary_size, dtype=dtype, name="logits"
        )
        parts = _Parts(
            source_embedding=source_embedding,
            embedding_dropout=embedding_dropout,
            encoder=encoder,
            bridge=bridge,
            memory_projection=memory_projection,
            cell=cell,
            decoder_cell_kind=decoder_cell,
        )

        # === Functional model ===
        inputs = token_id_inputs()
        encoder_token_ids = inputs["encoder_token_ids"]
        decoder_token_ids = inputs["decoder_token_ids"]
        initial_state = parts.encode(encoder_token_ids)
        embedded = embedding_dropout(target_embedding(decoder_token_ids))
        # Targets are right-padded and the decoder is causal, so padded steps
        # only change outputs past the end, which the loss ignores: no mask.
        states = decoder(embedded, initial_state=initial_state)
        logits = _logits(states, embedded, readout, output_dropout, output_dense)
        super().__init__(inputs, logits, **Seq2Seq.arguments_from(locals()))
        self.keep_config(RNNSeq2Seq, locals())

        # === Layers for decoding ===
        self.parts = parts
        self.target_embedding = target_embedding
        self.readout = readout
        self.output_dropout = output_dropout
        self.output_dense = output_dense

    def initial_cache(self, encoder_token_ids, max_length=None):
        return self.parts.encode(encoder_token_ids)

    def decode_step(self, token_ids, cache, index):
        embedded = self.target_embedding(token_ids)
        output, cache = self.parts.cell(embedded, cache)
        logits = _logits(
            output, embedded, self.readout, self.output_dropout, self.output_dense
        )
        return logits, list(cache)

    def beam_reorder(self, cache):
        """Beam search gathers the decoder's states by the surviving beams,
        not the encoder outputs, their keys and mask (the same for all beams
        of a source)."""
        if self.parts.memory_projection is None:
            return None
        return self.parts.cell.beam_reorder(cache)

    def attention_weights(self, encoder_token_ids, decoder_token_ids):
        if self.attention == "none":
            raise ValueError("An RNNSeq2Seq with attention='none' has no attention.")
        states = self.parts.encode(ops.convert_to_tensor(encoder_token_ids, "int32"))
        embedded = self.target_embedding(
            ops.convert_to_tensor(decoder_token_ids, "int32")
        )
        weights = []
        for t in range(embedded.shape[1]):
            _, states, step_weights = self.parts.cell.step(embedded[:, t], states)
            weights.append(step_weights)
        return ops.stack(weights, axis=1)


class _Parts:
    """The encoder side shared by the functional graph and decoding."""

    def __init__(self, **layers):
        self.__dict__.update(layers)

    def encode(self, encoder_token_ids):
        mask = padding_mask(encoder_token_ids)
        embedded = self.embedding_dropout(self.source_embedding(encoder_token_ids))
        annotations, forward, backward = self.encoder(embedded, mask=mask)
        state = self.bridge(ops.concatenate([forward, backward], axis=-1))
        cell_states = [state]
        if self.decoder_cell_kind == "lstm":
            cell_states.append(ops.zeros_like(state))
        if self.memory_projection is None:
            return cell_states
        return self.cell.get_initial_state_from_memory(
            self.memory_projection(annotations), cell_states, memory_mask=mask
        )


def _logits(outputs, embedded, readout, dropout, dense):
    if readout is not None:
        outputs = readout(
            ops.concatenate([outputs, ops.cast(embedded, outputs.dtype)], axis=-1)
        )
    return dense(dropout(outputs))
