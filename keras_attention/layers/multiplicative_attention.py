import keras
from keras import ops

from keras_attention.layers.base_attention import WeightedScoreAttention
from keras_attention.ops.scores import dot_score, project


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiplicativeAttention(WeightedScoreAttention):
    """Multiplicative attention (Luong "general"): `score(s_t, h_i) = s_t^T W_a h_i`.

    The bilinear form lets queries and keys of different sizes be compared:
    `W_a` has shape `(query_dim, key_dim)`.

    Args:
        kernel_initializer: initializer of `W_a`.
        kernel_regularizer: regularizer of `W_a`.
        kernel_constraint: constraint of `W_a`.
        dropout: dropout rate on the attention weights.
        seed: dropout seed.
        **kwargs: base layer arguments.

    Call arguments:
        See `ScoreAttention`: `inputs=[query, value(, key)]`,
        `mask=[query_mask, value_mask]`, `training`, `return_attention_scores`,
        `use_causal_mask`. The query and key may have different sizes.

    Example:

    ```python
    decoder_states = keras.Input((None, 64))
    encoder_states = keras.Input((None, 128))
    context, weights = keras_attention.layers.MultiplicativeAttention()(
        [decoder_states, encoder_states], return_attention_scores=True
    )
    ```

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def build_scores(self, query_dim, key_dim, key_length):
        self.kernel = self.add_kernel("kernel", (query_dim, key_dim))

    def prepare_keys(self, key):
        return project(key, ops.transpose(self.kernel))

    def compute_prepared_scores(self, query, prepared_key):
        return dot_score(query, prepared_key)
