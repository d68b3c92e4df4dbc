import math

import keras
from keras import ops

from keras_attention._checks import check_positive_int, check_rate
from keras_attention.decoding import GenerationMixin
from keras_attention.layers.additive_attention import AdditiveAttention
from keras_attention.layers.attention_rnn_cell import AttentionRNNCell
from keras_attention.layers.dropout import Dropout
from keras_attention.models.saving import ConfigMixin
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst


@keras.saving.register_keras_serializable(package="keras_attention")
class ShowAttendTell(
    BuildsTrainingStateFirst, ConfigMixin, GenerationMixin, keras.Model
):
    """Image captioning with soft visual attention (Show, Attend and Tell).

    A convolutional encoder turns the image into a grid of annotation vectors
    `a_1 .. a_L` (`L = h * w` locations of `D = encoder_filters[-1]`
    features). An LSTM decoder writes the caption word by word; at step `t`
    the previous state `h_{t-1}` attends over the locations (soft,
    deterministic attention with the additive score
    `e_ti = v^T tanh(W_a a_i + W_h h_{t-1})`, `alpha_t = softmax(e_t)`), and
    the context is scaled by the gating scalar
    `beta_t = sigmoid(w_beta^T h_{t-1} + b)`:
    `z_t = beta_t * sum_i alpha_ti a_i`. The LSTM reads `[E y_{t-1}; z_t]`;
    its initial state is `tanh` of two projections of the mean annotation;
    the deep output layer gives
    `p(y_t) = softmax(L_o tanh(W [h_t; z_t; E y_{t-1}]))`.

    Training adds the doubly stochastic regularization
    `lambda * sum_i (1 - sum_t alpha_ti)^2` (summed over the caption's real
    words only) to the loss, which asks every location to receive, over the
    whole caption, about as much attention as any other.

    With `attention=False` the same decoder sees the image only as one vector
    (`relu` of a projection of the flattened grid, which keeps where things
    are, as the fully connected image vector of Vinyals et al., 2015): it
    starts the state and is `z_t` at every step. That is the baseline the
    attention model is compared with.

    Args:
        vocabulary_size: number of caption tokens (0 is padding).
        image_shape: `(H, W, C)` of the input images, values in [0, 1].
        encoder_filters: filters of the convolutional stages; each stage is
            two 3x3 convolutions (each followed by group normalization and a
            ReLU) and a 2x2 max-pooling, so the grid is `H / 2**stages` by
            `W / 2**stages`.
        embedding_dim: size of the word embeddings and of the deep output.
        units: size of the LSTM state.
        attention_units: size of the additive attention's hidden layer.
        attention: attend over the locations (`False`: the image vector
            baseline).
        gate: use the gating scalar `beta_t`.
        doubly_stochastic: the regularization strength `lambda` (0 disables
            it).
        dropout: dropout on the embeddings and the deep output.
        max_caption_length: default number of tokens `generate` produces.
        start_token_id: the `<start>` token.
        end_token_id: the `<end>` token.
        tokenizer: optional keras-hub tokenizer saved with the model.
        **kwargs: `name`, `dtype` and other model arguments.

    Call arguments:
        inputs: dict with float `"images"` `(B, H, W, C)` and int
            `"decoder_token_ids"` `(B, T)` (`<start>` + caption), 0-padded.
        training: whether dropout is active.

    Returns:
        Logits `(B, T, vocabulary_size)` of the next tokens.

    Example:

    ```python
    model = keras_attention.models.ShowAttendTell(
        vocabulary_size=30, image_shape=(32, 32, 1), encoder_filters=(8, 16),
        units=32, embedding_dim=16, attention_units=16,
    )
    images = np.random.rand(2, 32, 32, 1).astype("float32")
    logits = model(
        {"images": images, "decoder_token_ids": np.array([[2, 5, 6], [2, 7, 0]])}
    )  # (2, 3, 30)
    tokens, weights = model.generate(images, max_length=4, return_attention=True)
    # tokens (2, 4); weights (2, 4, 8 * 8): where each word looked
    ```

    References:
        - [Xu et al., 2015](https://arxiv.org/abs/1502.03044)
        - [Vinyals et al., 2015](https://arxiv.org/abs/1411.4555) (the
          image-vector baseline)
    """

    config_names = (
        "vocabulary_size",
        "image_shape",
        "encoder_filters",
        "embedding_dim",
        "units",
        "attention_units",
        "attention",
        "gate",
        "doubly_stochastic",
        "dropout",
        "max_caption_length",
        "start_token_id",
        "end_token_id",
        "tokenizer",
    )
    serialized_config_names = ("tokenizer",)

    def __init__(
        self,
        vocabulary_size,
        image_shape=(64, 64, 1),
        encoder_filters=(32, 64, 128),
        embedding_dim=64,
        units=256,
        attention_units=128,
        attention=True,
        gate=True,
        doubly_stochastic=1.0,
        dropout=0.3,
        max_caption_length=24,
        start_token_id=2,
        end_token_id=3,
        tokenizer=None,
        dtype=None,
        **kwargs,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        for name, value in (
            ("embedding_dim", embedding_dim),
            ("units", units),
            ("attention_units", attention_units),
            ("max_caption_length", max_caption_length),
        ):
            check_positive_int(name, value)
        image_shape = tuple(image_shape)
        encoder_filters = tuple(encoder_filters)
        if len(image_shape) != 3 or not all(
            isinstance(d, int) and d > 0 for d in image_shape
        ):
            raise ValueError(
                "`image_shape` must be (height, width, channels) of positive "
                f"integers; received {image_shape}."
            )
        if not encoder_filters:
            raise ValueError("`encoder_filters` must name at least one stage.")
        for filters in encoder_filters:
            check_positive_int("encoder_filters", filters)
        scale = 2 ** len(encoder_filters)
        if image_shape[0] % scale or image_shape[1] % scale:
            raise ValueError(
                f"{len(encoder_filters)} encoder stages halve the image "
                f"{len(encoder_filters)} times, so its height and width must be "
                f"multiples of {scale}; received image_shape={image_shape}."
            )
        if doubly_stochastic < 0:
            raise ValueError(
                f"`doubly_stochastic` must be >= 0; received {doubly_stochastic}."
            )
        check_rate("dropout", dropout)
        grid = (image_shape[0] // scale, image_shape[1] // scale)
        features = encoder_filters[-1]

        # === Layers ===
        encoder = _convolutional_encoder(encoder_filters, dtype)
        to_locations = keras.layers.Reshape(
            (grid[0] * grid[1], features), dtype=dtype, name="locations"
        )
        embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, dtype=dtype, name="embedding"
        )
        embedding_dropout = Dropout(dropout, dtype=dtype)
        init_h = keras.layers.Dense(units, "tanh", dtype=dtype, name="init_h")
        init_c = keras.layers.Dense(units, "tanh", dtype=dtype, name="init_c")
        readout = keras.layers.Dense(
            embedding_dim, "tanh", dtype=dtype, name="deep_output"
        )
        output_dropout = Dropout(dropout, dtype=dtype)
        output_dense = keras.layers.Dense(vocabulary_size, dtype=dtype, name="logits")
        if attention:
            summary = keras.layers.GlobalAveragePooling1D(dtype=dtype, name="mean")
            cell = AttentionRNNCell(
                keras.layers.LSTMCell(units, dtype=dtype, name="lstm"),
                AdditiveAttention(units=attention_units, dtype=dtype),
                memory_dim=features,
                style="bahdanau",
                gate=gate,
                dtype=dtype,
                name="attention_cell",
            )
            decoder = keras.layers.RNN(
                _WeightsOutputCell(cell, grid[0] * grid[1], dtype=dtype),
                return_sequences=True,
                dtype=dtype,
                name="decoder",
            )
        else:
            summary = keras.Sequential(
                [
                    keras.layers.Flatten(dtype=dtype),
                    keras.layers.Dense(features, "relu", dtype=dtype),
                ],
                name="image_vector",
            )
            cell = _ContextLSTMCell(units, features, dtype=dtype, name="context_lstm")
            decoder = keras.layers.RNN(
                cell, return_sequences=True, dtype=dtype, name="decoder"
            )

        # === Functional model ===
        inputs = {
            "images": keras.Input(image_shape, name="images"),
            "decoder_token_ids": keras.Input(
                (None,), dtype="int32", name="decoder_token_ids"
            ),
        }
        annotations = to_locations(encoder(inputs["images"]))
        image_summary = summary(annotations)
        cell_states = [init_h(image_summary), init_c(image_summary)]
        token_ids = inputs["decoder_token_ids"]
        embedded = embedding_dropout(embedding(token_ids))
        if attention:
            initial_state = cell.get_initial_state_from_memory(annotations, cell_states)
            outputs_and_weights = decoder(embedded, initial_state=initial_state)
            outputs = outputs_and_weights[..., : cell.output_size]
            weights = outputs_and_weights[..., cell.output_size :]
        else:
            outputs = decoder(embedded, initial_state=[*cell_states, image_summary])
        readout_inputs = keras.layers.Concatenate(dtype=dtype)([outputs, embedded])
        logits = output_dense(output_dropout(readout(readout_inputs)))
        if attention and doubly_stochastic:
            logits = DoublyStochasticPenalty(doubly_stochastic, name="penalty")(
                logits, weights, token_ids
            )
        super().__init__(inputs=inputs, outputs=logits, dtype=dtype, **kwargs)

        # === Config ===
        attention, gate = bool(attention), bool(gate)
        doubly_stochastic = float(doubly_stochastic)
        self.keep_config(ShowAttendTell, locals())
        self.max_target_length = max_caption_length
        self.grid_shape = grid

        # === Layers for decoding ===
        self.encoder = encoder
        self.to_locations = to_locations
        self.image_summary = summary
        self.init_h = init_h
        self.init_c = init_c
        self.embedding = embedding
        self.cell = cell
        self.decoder = decoder
        self.readout = readout
        self.output_dropout = output_dropout
        self.output_dense = output_dense

    def generation_inputs(self, images):
        images = ops.convert_to_tensor(images, "float32")
        if len(images.shape) != 4 or tuple(images.shape[1:]) != self.image_shape:
            expected = ", ".join(map(str, self.image_shape))
            raise ValueError(
                f"`images` must have shape (batch, {expected}); received "
                f"{tuple(images.shape)}."
            )
        return images

    def initial_cache(self, images, max_length=None):
        annotations = self.to_locations(self.encoder(images))
        image_summary = self.image_summary(annotations)
        cell_states = [self.init_h(image_summary), self.init_c(image_summary)]
        if self.attention:
            return self.cell.get_initial_state_from_memory(annotations, cell_states)
        return [*cell_states, image_summary]

    def decode_step(self, token_ids, cache, index):
        embedded = self.embedding(token_ids)
        output, cache = self.cell(embedded, cache)
        return self._logits(output, embedded), list(cache)

    def beam_reorder(self, cache):
        """Beam search gathers the decoder's states by the surviving beams,
        not the image's annotations, their keys and mask (the same for all
        beams of an image)."""
        return self.cell.beam_reorder(cache) if self.attention else None

    def _logits(self, output, embedded):
        readout = self.readout(
            ops.concatenate([output, ops.cast(embedded, output.dtype)], axis=-1)
        )
        return self.output_dense(self.output_dropout(readout))

    def attention_weights(self, images, decoder_token_ids):
        """Where the decoder looks for each word, with teacher forcing.

        Args:
            images: `(B, H, W, C)`.
            decoder_token_ids: int `(B, T)`, `<start>` + caption.

        Returns:
            `(B, T, L)`: the attention over the `L = grid_shape[0] *
            grid_shape[1]` locations (row-major) at each step, i.e. for the
            word that step predicts.
        """
        if not self.attention:
            raise ValueError("A ShowAttendTell with attention=False has no attention.")
        states = self.initial_cache(self.generation_inputs(images))
        embedded = self.embedding(ops.convert_to_tensor(decoder_token_ids, "int32"))
        outputs_and_weights = self.decoder(embedded, initial_state=states)
        return outputs_and_weights[..., self.cell.output_size :]

    def generate(
        self,
        images,
        max_length=None,
        beam_width=1,
        length_penalty=0.6,
        jit_compile=True,
        return_attention=False,
    ):
        """Captions a batch of images.

        Args:
            images: `(B, H, W, C)`, values in [0, 1].
            max_length: tokens to generate at most; defaults to
                `max_caption_length`.
            beam_width: 1 for greedy search, more for beam search.
            length_penalty: alpha of the beam-search length penalty.
            jit_compile: compile the whole search with XLA.
            return_attention: also return the attention map of every
                generated word.

        Returns:
            int32 `(B, max_length)` tokens, ending with `end_token_id` and
            padded with 0; with `return_attention`, also `(B, max_length, L)`
            weights: row `t` is where the decoder looked when it chose token
            `t` (the decoder is deterministic, so re-reading the chosen
            tokens reproduces the search's attention exactly).
        """
        tokens = super().generate(
            images, max_length, beam_width, length_penalty, jit_compile
        )
        if not return_attention:
            return tokens
        tokens = ops.convert_to_numpy(tokens)
        start = ops.full((tokens.shape[0], 1), self.start_token_id, "int32")
        decoder_ids = ops.concatenate([start, tokens[:, :-1]], axis=1)
        return tokens, self.attention_weights(images, decoder_ids)


def _convolutional_encoder(encoder_filters, dtype):
    # Group normalization after each convolution: it speeds up learning from
    # scratch as batch normalization does, and behaves the same in training
    # and inference (batch statistics of these mostly empty canvases drift
    # too fast for batch normalization's moving averages to follow).
    stages = []
    for i, filters in enumerate(encoder_filters):
        for _ in range(2):
            stages += [
                keras.layers.Conv2D(filters, 3, padding="same", dtype=dtype),
                keras.layers.GroupNormalization(math.gcd(8, filters), dtype=dtype),
                keras.layers.ReLU(dtype=dtype),
            ]
        stages.append(keras.layers.MaxPooling2D(2, dtype=dtype, name=f"pool_{i}"))
    return keras.Sequential(stages, name="encoder")


class _WeightsOutputCell(keras.layers.Layer):
    """Wraps an `AttentionRNNCell` so that each step outputs its attention
    weights beside its output, `[output; alpha_t]`: `keras.layers.RNN` then
    returns the weights of every step in the one tensor it can return."""

    def __init__(self, cell, num_locations, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell
        self.state_size = cell.state_size
        self.output_size = cell.output_size + num_locations

    def build(self, input_shape):
        self.cell.build(input_shape)

    def call(self, inputs, states, training=None):
        output, states, weights = self.cell.step(inputs, states, training=training)
        return ops.concatenate([output, ops.cast(weights, output.dtype)], -1), states


class DoublyStochasticPenalty(keras.layers.Layer):
    """Adds Show, Attend and Tell's doubly stochastic regularization to the
    model's losses: `strength * sum_i (1 - sum_t alpha_ti)^2` per caption,
    the sum over `t` running over the caption's real steps only. The paper
    adds it to the caption's summed negative log-likelihood; the Keras loss
    sums the token losses of the batch and divides by its number of token
    positions `B * T`, so the penalty is summed over the batch and divided by
    `B * T` too, which keeps the paper's balance between the two terms. Like
    `keras.layers.ActivityRegularization`, it returns its first input
    unchanged, so that it sits on the path to the outputs.

    Call arguments:
        inputs: any tensor, returned as is (the logits).
        attention_weights: `(B, T, L)`, the attention of each step.
        token_ids: `(B, T)`, the decoder inputs; steps with token 0 are
            padding.
    """

    def __init__(self, strength, **kwargs):
        super().__init__(**kwargs)
        self.strength = float(strength)

    def call(self, inputs, attention_weights, token_ids):
        steps = ops.cast(ops.not_equal(token_ids, 0), "float32")[..., None]
        coverage = ops.sum(ops.cast(attention_weights, "float32") * steps, axis=1)
        positions = ops.cast(ops.size(token_ids), "float32")
        penalty = ops.sum(ops.square(1.0 - coverage)) / positions
        self.add_loss(self.strength * penalty)
        return inputs

    def compute_output_shape(self, inputs_shape, *args):
        return inputs_shape


class _ContextLSTMCell(keras.layers.Layer):
    """An LSTM cell that reads a constant context vector beside each input
    (carried in its state) and outputs `[h_t; context]`: the decoder of the
    image-vector baseline, which mirrors `AttentionRNNCell`'s output."""

    def __init__(self, units, context_dim, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.context_dim = context_dim
        self.lstm = keras.layers.LSTMCell(units, dtype=self.dtype_policy, name="lstm")
        self.state_size = [units, units]
        self.output_size = units + context_dim

    def build(self, input_shape):
        self.lstm.build((input_shape[0], input_shape[-1] + self.context_dim))

    def call(self, inputs, states, training=None):
        h, c, context = states
        cell_input = ops.concatenate([inputs, ops.cast(context, inputs.dtype)], -1)
        hidden, (h, c) = self.lstm(cell_input, [h, c], training=training)
        output = ops.concatenate([hidden, ops.cast(context, hidden.dtype)], -1)
        return output, [h, c, context]
