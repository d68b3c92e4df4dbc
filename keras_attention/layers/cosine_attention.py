import keras

from keras_attention.layers.base_attention import ScoreAttention
from keras_attention.ops.scores import cosine_score


@keras.saving.register_keras_serializable(package="keras_attention")
class CosineAttention(ScoreAttention):
    """Content-based attention (Graves): `score(s_t, h_i) = beta * cos(s_t, h_i)`.

    Cosine similarity ignores the norms of the vectors, so the weights depend on
    direction only; the sharpness `beta` turns scores in [-1, 1] into a
    distribution that can be peaked (the key strength of the Neural Turing
    Machine).

    Args:
        sharpness: initial (or fixed) value of `beta`. The default 10 follows
            the learnable temperature of cosine attention in Swin V2
            (tau = 0.1).
        trainable_sharpness: learn `beta` (True) or keep it fixed (False).
        epsilon: lower bound on the squared norms, so zero vectors score 0.
        **kwargs: the arguments of `ScoreAttention` (`dropout` on the
            attention weights and its `seed`) and of the base layer.

    Call arguments:
        See `ScoreAttention`: `inputs=[query, value(, key)]` with a query and
        key of one size, `mask=[query_mask, value_mask]`, `training`,
        `return_attention_scores`, `use_causal_mask`.

    Example:

    ```python
    memory = keras.Input((128, 20))  # N memory rows of size M
    key = keras.Input((1, 20))       # one read key
    read = keras_attention.layers.CosineAttention(sharpness=5.0)([key, memory])
    ```

    References:
        - [Graves et al., 2014](https://arxiv.org/abs/1410.5401)
        - [Liu et al., 2022 (Swin V2)](https://arxiv.org/abs/2111.09883)
    """

    same_size_hint = (
        "Cosine similarity compares vectors of one size; project them first or "
        "use MultiplicativeAttention."
    )

    def __init__(
        self, sharpness=10.0, trainable_sharpness=True, epsilon=1e-6, **kwargs
    ):
        super().__init__(**kwargs)
        if isinstance(sharpness, bool) or not isinstance(sharpness, (int, float)):
            raise ValueError(f"`sharpness` must be a float; received {sharpness!r}.")
        if not epsilon > 0:
            raise ValueError(f"`epsilon` must be positive; received {epsilon!r}.")
        self.sharpness = float(sharpness)
        self.trainable_sharpness = trainable_sharpness
        self.epsilon = epsilon

    def build_scores(self, query_dim, key_dim, key_length):
        self.beta = self.add_weight(
            name="sharpness",
            shape=(),
            initializer=keras.initializers.Constant(self.sharpness),
            trainable=self.trainable_sharpness,
        )

    def compute_prepared_scores(self, query, key):
        return cosine_score(query, key, sharpness=self.beta, epsilon=self.epsilon)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sharpness": self.sharpness,
                "trainable_sharpness": self.trainable_sharpness,
                "epsilon": self.epsilon,
            }
        )
        return config
