import keras

from keras_attention.layers.base_attention import ScoreAttention
from keras_attention.ops.scores import dot_score, scaled_dot_score


@keras.saving.register_keras_serializable(package="keras_attention")
class DotProductAttention(ScoreAttention):
    """Dot-product attention (Luong "dot"), optionally scaled (Vaswani).

    `score(s_t, h_i) = s_t^T h_i`, or `s_t^T h_i / sqrt(d_k)` with `scale=True`.
    Without weights of its own, it needs queries and keys of the same size.

    Args:
        scale: False for the plain dot product; True to divide by
            `sqrt(d_k)`; or a positive float used as the multiplier.
        dropout: dropout rate on the attention weights.
        seed: dropout seed.
        **kwargs: base layer arguments. `keras.layers.Attention`'s
            `score_mode="dot"` and `use_scale=False` are taken too (they are
            this layer), so its code and its configs load unchanged.

    Call arguments:
        See `ScoreAttention`: `inputs=[query, value(, key)]` with a query and
        key of one size, `mask=[query_mask, value_mask]`, `training`,
        `return_attention_scores`, `use_causal_mask`.

    Example:

    ```python
    tokens = keras.Input((None,), dtype="int32")
    x = keras_attention.layers.TokenAndPositionEmbedding(
        vocabulary_size=1000, sequence_length=64, embedding_dim=32, mask_zero=True
    )(tokens)
    x = keras_attention.layers.DotProductAttention(scale=True)(
        [x, x], use_causal_mask=True
    )
    ```

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    same_size_hint = (
        "DotProductAttention has no weights; use MultiplicativeAttention or "
        "AdditiveAttention to compare vectors of different sizes."
    )

    def __init__(self, scale=False, dropout=0.0, seed=None, **kwargs):
        _take_keras_attention_arguments(kwargs)
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        if not isinstance(scale, (bool, int, float)) or (
            not isinstance(scale, bool) and not scale > 0
        ):
            raise ValueError(
                f"`scale` must be a bool or a positive float; received {scale!r}."
            )
        self.scale = scale

    def compute_prepared_scores(self, query, key):
        if self.scale is False:
            return dot_score(query, key)
        if self.scale is True:
            return scaled_dot_score(query, key)
        return scaled_dot_score(query, key, scale=float(self.scale))

    def get_config(self):
        config = super().get_config()
        config["scale"] = self.scale
        return config


def _take_keras_attention_arguments(kwargs):
    """Removes `keras.layers.Attention`'s `score_mode` and `use_scale` from
    `kwargs` where they name this layer's function; any other value has no
    counterpart here and is an error that names the one to use."""
    score_mode = kwargs.pop("score_mode", "dot")
    if score_mode != "dot":
        raise ValueError(
            "DotProductAttention is keras.layers.Attention's "
            f"score_mode='dot'; received score_mode={score_mode!r}. The concat "
            "score is keras_attention.layers.AdditiveAttention."
        )
    use_scale = kwargs.pop("use_scale", False)
    if use_scale:
        raise ValueError(
            "DotProductAttention has no trainable scalar (keras.layers.Attention's "
            f"use_scale=True); received use_scale={use_scale!r}. Pass scale=<float> "
            "(a trained layer's value) or scale=True for 1 / sqrt(d_k)."
        )
