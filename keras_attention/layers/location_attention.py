import keras

from keras_attention._checks import check_positive_int
from keras_attention.layers.base_attention import WeightedScoreAttention
from keras_attention.ops.scores import location_score


@keras.saving.register_keras_serializable(package="keras_attention")
class LocationAttention(WeightedScoreAttention):
    """Location-based attention (Luong): `alpha_t = softmax(W_a s_t)`.

    The weights are a function of the decoder state alone: `W_a` maps the query
    to one logit per source position, and the keys are not consulted (a key
    passed in the inputs is ignored). Sources shorter than `max_length` use the
    first logits; padded source positions are masked as usual.

    Args:
        max_length: the longest source sequence (number of positions scored).
        use_bias: add a learned per-position bias (a prior over positions).
        **kwargs: the arguments of `WeightedScoreAttention`
            (`kernel_initializer`, `kernel_regularizer` and `kernel_constraint`
            of `W_a`, `dropout` on the attention weights and its `seed`) and
            of the base layer.

    Call arguments:
        See `ScoreAttention`: `inputs=[query, value(, key)]`,
        `mask=[query_mask, value_mask]`, `training`, `return_attention_scores`,
        `use_causal_mask`. The value length must not exceed `max_length`.

    Example:

    ```python
    decoder_states = keras.Input((None, 64))
    encoder_states = keras.Input((20, 128))
    context = keras_attention.layers.LocationAttention(max_length=20)(
        [decoder_states, encoder_states]
    )
    ```

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(self, max_length, use_bias=False, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("max_length", max_length)
        self.max_length = max_length
        self.use_bias = use_bias

    def check_dims(self, query_dim, key_dim, key_length):
        if key_length is not None and key_length > self.max_length:
            raise ValueError(
                f"LocationAttention was built for sources of at most max_length="
                f"{self.max_length} positions; received a value of length "
                f"{key_length}."
            )

    def build_scores(self, query_dim, key_dim, key_length):
        self.kernel = self.add_kernel("kernel", (query_dim, self.max_length))
        self.bias = (
            self.add_weight(name="bias", shape=(self.max_length,), initializer="zeros")
            if self.use_bias
            else None
        )

    def compute_prepared_scores(self, query, key):
        key_length = key.shape[-2]
        if key_length is None:
            key_length = keras.ops.shape(key)[-2]
        return location_score(query, self.kernel, key_length, bias=self.bias)

    def get_config(self):
        config = super().get_config()
        config.update({"max_length": self.max_length, "use_bias": self.use_bias})
        return config
