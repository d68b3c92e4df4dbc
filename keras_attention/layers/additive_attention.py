import keras

from keras_attention._checks import check_positive_int
from keras_attention.layers.base_attention import WeightedScoreAttention
from keras_attention.ops.scores import additive_score_from_projections, project


@keras.saving.register_keras_serializable(package="keras_attention")
class AdditiveAttention(WeightedScoreAttention):
    """Additive attention (Bahdanau): `score(s_t, h_i) = v_a^T tanh(W_1 s_t + W_2 h_i)`.

    The paper's single-layer perceptron over the concatenation `[s_t; h_i]`,
    with `W_a = [W_1 W_2]` split so that keys are projected once. Unlike
    `keras.layers.AdditiveAttention`, which only learns a scale vector and needs
    queries and keys of one size, this layer has the paper's projections and
    compares vectors of any sizes.

    Args:
        units: size of the hidden layer of the score (the rows of `W_a`);
            defaults to the key size.
        use_bias: add a bias `b` inside the tanh.
        **kwargs: the arguments of `WeightedScoreAttention`
            (`kernel_initializer`, `kernel_regularizer` and `kernel_constraint`
            of `W_1`, `W_2` and `v_a`, `dropout` on the attention weights and
            its `seed`) and of the base layer.

    Call arguments:
        See `ScoreAttention`: `inputs=[query, value(, key)]`,
        `mask=[query_mask, value_mask]`, `training`, `return_attention_scores`,
        `use_causal_mask`. A rank-2 query `(B, Dq)` is one decoder step.

    Example:

    ```python
    # One step of a Bahdanau decoder: previous state s_{t-1} attends over the
    # encoder annotations h_1..h_T.
    state = keras.Input((64,))
    annotations = keras.Input((None, 128))
    context, alignment = keras_attention.layers.AdditiveAttention(units=32)(
        [state, annotations], return_attention_scores=True
    )  # context: (B, 128), alignment: (B, T)
    ```

    References:
        - [Bahdanau et al., 2015](https://arxiv.org/abs/1409.0473)
    """

    def __init__(self, units=None, use_bias=False, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("units", units, allow_none=True)
        self.units = units
        self.use_bias = use_bias

    def build_scores(self, query_dim, key_dim, key_length):
        units = self.units or key_dim
        self.query_kernel = self.add_kernel("query_kernel", (query_dim, units))
        self.key_kernel = self.add_kernel("key_kernel", (key_dim, units))
        self.score_vector = self.add_kernel("score_vector", (units,))
        self.bias = (
            self.add_weight(name="bias", shape=(units,), initializer="zeros")
            if self.use_bias
            else None
        )

    def prepare_keys(self, key):
        return project(key, self.key_kernel)

    def compute_prepared_scores(self, query, prepared_key):
        return additive_score_from_projections(
            project(query, self.query_kernel),
            prepared_key,
            self.score_vector,
            bias=self.bias,
        )

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "use_bias": self.use_bias})
        return config
