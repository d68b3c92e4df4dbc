import keras
from keras import ops

from keras_attention._checks import (
    check_mask_shape,
    check_positive_int,
    check_rank,
    static_shape,
)
from keras_attention.layers._output_spec import output_spec
from keras_attention.ops.masks import zero_unattended
from keras_attention.ops.scores import project
from keras_attention.ops.softmax import masked_softmax
from keras_attention.utils import keras_internals


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionPooling(keras_internals.KeepsKerasMasksWhenCast, keras.layers.Layer):
    """Attention with a learned context vector, pooling a sequence to one vector.

    The word and sentence attention of the Hierarchical Attention Network:

    ```
    u_t = tanh(W h_t + b)
    a_t = softmax_t(u_t^T u_w)
    s   = sum_t a_t h_t
    ```

    `u_w` is a trainable context vector that plays the role of a fixed query
    ("which word is informative?"), so the weights `a_t` say which positions the
    pooled vector is made of. Padding positions get weight 0 and are never
    read (NaN or inf there reaches neither the pooled vector nor the
    gradients), and a sequence that is all padding pools to zeros.

    Args:
        units: size of `u_t` and `u_w`; defaults to the input size.
        use_bias: add `b` inside the tanh.
        kernel_initializer: initializer of `W` and `u_w`.
        bias_initializer: initializer of `b`.
        kernel_regularizer: regularizer of `W` and `u_w`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, T, D)` annotations `h_t`.
        mask: optional boolean `(B, T)`, True at real positions (taken from the
            Keras mask of `inputs` when there is one).
        return_attention_scores: also return the weights `a` `(B, T)`.

    Returns:
        The pooled `(B, D)`, and `(B, T)` weights with
        `return_attention_scores=True`.

    Example:

    ```python
    annotations = keras.Input((None, 64))
    document, weights = keras_attention.layers.AttentionPooling(units=32)(
        annotations, return_attention_scores=True
    )  # (B, 64), (B, T)
    ```

    References:
        - [Yang et al., 2016](https://aclanthology.org/N16-1174/)
        - [Raffel & Ellis, 2015](https://arxiv.org/abs/1512.08756)
    """

    def __init__(
        self,
        units=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("units", units, allow_none=True)
        self.units = units
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.supports_masking = True

    def build(self, input_shape):
        check_rank("inputs", tuple(input_shape), 3)
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                "The last axis of `inputs` must be known; received shape "
                f"{tuple(input_shape)}."
            )
        units = self.units or input_dim
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_dim, units),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(units,), initializer=self.bias_initializer
            )
        self.context_vector = self.add_weight(
            name="context_vector",
            shape=(units,),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )

    def call(self, inputs, mask=None, return_attention_scores=False):
        if mask is not None:
            check_mask_shape(
                "mask", static_shape(mask), static_shape(inputs)[:-1], "(batch, length)"
            )
            mask = ops.cast(mask, "bool")
            inputs = zero_unattended(inputs, mask)
        hidden = project(inputs, self.kernel)
        if self.bias is not None:
            hidden = hidden + self.bias
        scores = ops.einsum("btu,u->bt", ops.tanh(hidden), self.context_vector)
        weights = masked_softmax(scores, mask)
        pooled = ops.einsum("bt,btd->bd", weights, inputs)
        if return_attention_scores:
            return pooled, weights
        return pooled

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape, return_attention_scores=False):
        pooled = (input_shape[0], input_shape[-1])
        if return_attention_scores:
            return pooled, (input_shape[0], input_shape[1])
        return pooled

    def compute_output_spec(self, inputs, mask=None, return_attention_scores=False):
        return output_spec(self, inputs.shape, return_attention_scores)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(
                    self.kernel_regularizer
                ),
            }
        )
        return config
