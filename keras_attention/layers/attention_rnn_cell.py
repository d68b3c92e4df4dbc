import keras
from keras import ops

from keras_attention._checks import check_choice, check_positive_int
from keras_attention.layers.base_attention import ScoreAttention

STYLES = ("bahdanau", "luong")


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionRNNCell(keras.layers.Layer):
    """A recurrent cell that attends over a memory at every step.

    Wraps a Keras RNN cell (`GRUCell`, `LSTMCell`) and a score-attention layer
    into the decoder of an attentional encoder-decoder, in either of the two
    classic arrangements:

    - `"bahdanau"` (Bahdanau et al., 2015): the previous state attends,
      `c_t = attend(s_{t-1}, H)`, the cell reads `[y_{t-1}; c_t]`, and the cell
      outputs `[s_t; c_t]` for the read-out.
    - `"luong"` (Luong et al., 2015): the new state attends,
      `c_t = attend(h_t, H)`, the cell outputs the attentional vector
      `h~_t = tanh(W_c [c_t; h_t])`, and `h~_t` is fed to the next step's input
      beside `y_t` (input feeding).

    With `gate=True` the context is scaled by a gating scalar computed from
    the attending state, `c_t = beta_t * attend(s, H)` with
    `beta_t = sigmoid(w_beta^T s + b_beta)`, so that the decoder can weigh the
    memory against its language model at each step: the decoder of Show,
    Attend and Tell (Xu et al., 2015) is the `"bahdanau"` arrangement of an
    LSTM with this gate.

    The memory travels in the recurrent state (`keras.layers.RNN` takes no
    constants), so `keras.layers.RNN(cell)` runs it over a sequence, compiled
    with XLA and differentiable on every backend. Build the initial state with
    `get_initial_state_from_memory`; the keys of the score are prepared once
    there (`ScoreAttention.prepare_keys`), not at every step.

    Args:
        cell: the recurrent cell (an instance of `keras.layers.GRUCell`,
            `LSTMCell` or any cell whose first state is its output).
        attention: a `ScoreAttention` layer (`AdditiveAttention`,
            `MultiplicativeAttention`, `DotProductAttention`, ...).
        memory_dim: feature size of the memory (the encoder outputs).
        style: `"bahdanau"` or `"luong"`.
        gate: scale the context by the gating scalar `beta_t`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, D)`, this step's input (the embedded previous token).
        states: list: the cell's states, the attentional vector (Luong only),
            then the memory `(B, S, memory_dim)`, its prepared keys and its
            mask `(B, S)` as 0/1 floats.
        training: whether the cell's dropout is active.

    Returns:
        `(output, new_states)` like every Keras cell; `step` also returns the
        attention weights `(B, S)`.

    Example:

    ```python
    cell = keras_attention.layers.AttentionRNNCell(
        keras.layers.GRUCell(32),
        keras_attention.layers.AdditiveAttention(units=16),
        memory_dim=24,
    )
    memory = np.random.rand(2, 7, 24).astype("float32")
    initial = cell.get_initial_state_from_memory(memory, [np.zeros((2, 32))])
    outputs = keras.layers.RNN(cell, return_sequences=True)(
        np.random.rand(2, 5, 8).astype("float32"), initial_state=initial
    )  # (2, 5, 32 + 24): [s_t; c_t] per step
    ```

    References:
        - [Bahdanau et al., 2015](https://arxiv.org/abs/1409.0473)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
        - [Xu et al., 2015](https://arxiv.org/abs/1502.03044) (the gate)
    """

    def __init__(
        self,
        cell,
        attention,
        memory_dim,
        style="bahdanau",
        gate=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_choice("style", style, STYLES)
        check_positive_int("memory_dim", memory_dim)
        if not isinstance(attention, ScoreAttention):
            raise ValueError(
                "`attention` must be a keras_attention score-attention layer "
                f"(AdditiveAttention, DotProductAttention, ...); received "
                f"{type(attention).__name__}."
            )
        units = getattr(cell, "units", None)
        if not isinstance(units, int):
            raise ValueError(
                "`cell` must be a Keras RNN cell with an integer `units` (GRUCell, "
                f"LSTMCell); received {type(cell).__name__}."
            )
        self.cell = cell
        self.attention = attention
        self.memory_dim = memory_dim
        self.style = style
        self.gate = bool(gate)
        self.units = units
        cell_states = cell.state_size
        self.num_cell_states = 1 if isinstance(cell_states, int) else len(cell_states)
        if style == "luong":
            self.combine = keras.layers.Dense(
                units,
                activation="tanh",
                use_bias=False,
                dtype=self.dtype_policy,
                name="combine",
            )
            self.output_size = units
            self.state_size = [*_as_list(cell_states), units]
        else:
            self.combine = None
            self.output_size = units + memory_dim
            self.state_size = _as_list(cell_states)
        self.gate_dense = (
            keras.layers.Dense(
                1, activation="sigmoid", dtype=self.dtype_policy, name="gate"
            )
            if gate
            else None
        )

    def build(self, input_shape):
        # A cell revived from a built cell's config arrives built.
        feed_dim = self.memory_dim if self.style == "bahdanau" else self.units
        if not self.cell.built:
            self.cell.build((input_shape[0], input_shape[-1] + feed_dim))
        self._build_attention()
        if self.combine is not None and not self.combine.built:
            self.combine.build((None, self.memory_dim + self.units))
        if self.gate_dense is not None and not self.gate_dense.built:
            self.gate_dense.build((None, self.units))

    def get_initial_state_from_memory(self, memory, cell_states, memory_mask=None):
        """The initial state list for a memory.

        Args:
            memory: `(B, S, memory_dim)`, the encoder outputs.
            cell_states: list of the cell's initial states (e.g. `[h_0]`, or
                `[h_0, c_0]` for an LSTM).
            memory_mask: boolean `(B, S)`, False at padded positions.

        Returns:
            The list to pass as `initial_state` to `keras.layers.RNN(cell)`.
        """
        if any(isinstance(t, keras.KerasTensor) for t in (memory, *cell_states)):
            # In a functional model the keys must be prepared by a layer call,
            # so that they follow the current weights rather than the weights
            # at the time the graph was built.
            return InitialAttentionState(self)(
                memory, cell_states, memory_mask=memory_mask
            )
        if not hasattr(memory, "shape"):
            memory = ops.convert_to_tensor(memory)
        memory = ops.cast(memory, self.compute_dtype)
        shape = memory.shape
        if len(shape) != 3 or shape[-1] != self.memory_dim:
            raise ValueError(
                f"`memory` must have shape (batch, length, {self.memory_dim}); "
                f"received {tuple(shape)}."
            )
        if len(cell_states) != self.num_cell_states:
            raise ValueError(
                f"The cell has {self.num_cell_states} state(s); received "
                f"{len(cell_states)} initial cell state(s)."
            )
        self._build_attention()
        if memory_mask is None:
            memory_mask = ops.ones_like(memory[..., 0])
        states = [ops.cast(s, self.compute_dtype) for s in cell_states]
        if self.style == "luong":
            states.append(ops.zeros_like(states[0]))
        keys = self.attention.prepare_keys(memory)
        return [*states, memory, keys, ops.cast(memory_mask, self.compute_dtype)]

    def beam_reorder(self, states):
        """For `decoding.beam_search`'s `reorder`: the memory, its prepared
        keys and its mask (the last three states) are the same for all the
        beams of a source, so a beam search need not gather them; the cell's
        own states follow the beams."""
        return [True] * (len(states) - 3) + [False] * 3

    def _build_attention(self):
        if not self.attention.built:
            self.attention.build([(None, self.units), (None, None, self.memory_dim)])

    def step(self, inputs, states, training=None):
        """One step; returns `(output, new_states, attention_weights)`."""
        num = self.num_cell_states
        cell_states = list(states[:num])
        memory, keys, memory_mask = states[-3:]
        mask = ops.greater(memory_mask, 0.5)
        if self.style == "bahdanau":
            context, weights = self._attend(cell_states[0], memory, keys, mask)
            cell_input = ops.concatenate([inputs, ops.cast(context, inputs.dtype)], -1)
            hidden, new_cell_states = self.cell(
                cell_input, cell_states, training=training
            )
            output = ops.concatenate([hidden, ops.cast(context, hidden.dtype)], -1)
            feed = []
        else:
            cell_input = ops.concatenate([inputs, states[num]], -1)
            hidden, new_cell_states = self.cell(
                cell_input, cell_states, training=training
            )
            context, weights = self._attend(hidden, memory, keys, mask)
            output = self.combine(
                ops.concatenate([ops.cast(context, hidden.dtype), hidden], -1)
            )
            feed = [output]
        new_states = [*_as_list(new_cell_states), *feed, memory, keys, memory_mask]
        return output, new_states, weights

    def _attend(self, query, memory, keys, mask):
        context, weights = self.attention.attend_prepared(query, memory, keys, mask)
        if self.gate_dense is not None:
            context = context * ops.cast(self.gate_dense(query), context.dtype)
        return context, weights

    def call(self, inputs, states, training=None):
        output, new_states, _ = self.step(inputs, states, training=training)
        return output, new_states

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": _serialize_unbuilt(self.cell),
                "attention": _serialize_unbuilt(self.attention),
                "memory_dim": self.memory_dim,
                "style": self.style,
                "gate": self.gate,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["cell"] = keras.saving.deserialize_keras_object(config["cell"])
        config["attention"] = keras.saving.deserialize_keras_object(config["attention"])
        return cls(**config)


def _serialize_unbuilt(layer):
    """A sublayer's config without its build state: the cell's `build` builds
    it from the step's shapes, so a revived cell equals a fresh one."""
    serialized = dict(keras.saving.serialize_keras_object(layer))
    serialized.pop("build_config", None)
    return serialized


class InitialAttentionState(keras.layers.Layer):
    """The layer form of `AttentionRNNCell.get_initial_state_from_memory`,
    used for symbolic inputs. It is rebuilt with its cell, so it has no
    config of its own."""

    def __init__(self, cell, **kwargs):
        super().__init__(dtype=cell.dtype_policy, **kwargs)
        self.cell = cell
        self.supports_masking = True

    def build(self, memory_shape, cell_states_shape=None, memory_mask_shape=None):
        self.cell._build_attention()

    def compute_mask(self, memory, cell_states, memory_mask=None, mask=None):
        return None

    def call(self, memory, cell_states, memory_mask=None):
        return self.cell.get_initial_state_from_memory(
            memory, list(cell_states), memory_mask
        )


def _as_list(states):
    return list(states) if isinstance(states, (list, tuple)) else [states]
