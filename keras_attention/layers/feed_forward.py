import keras

from keras_attention._checks import check_positive_int, check_rate
from keras_attention.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_attention")
class FeedForward(keras.layers.Layer):
    """The position-wise feed-forward network of the Transformer.

    `FFN(x) = act(x W_1 + b_1) W_2 + b_2`, applied to every position
    independently (ReLU in the paper), followed by dropout.

    Args:
        intermediate_dim: hidden size (2048 in the base model).
        output_dim: output size; defaults to the input size.
        activation: activation of the hidden layer.
        dropout: dropout rate on the output.
        kernel_initializer: initializer of both kernels.
        bias_initializer: initializer of both biases.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(..., dim)`.
        training: whether dropout is active.

    Example:

    ```python
    y = keras_attention.layers.FeedForward(intermediate_dim=256)(x)
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 3.3.
    """

    def __init__(
        self,
        intermediate_dim,
        output_dim=None,
        activation="relu",
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("intermediate_dim", intermediate_dim)
        check_positive_int("output_dim", output_dim, allow_none=True)
        check_rate("dropout", dropout)
        self.intermediate_dim = intermediate_dim
        self.output_dim = output_dim
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        dense = {
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "dtype": self.dtype_policy,
        }
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            name="intermediate_dense",
            **dense,
        )
        self.intermediate_dense.build(input_shape)
        self.output_dense = keras.layers.Dense(
            self.output_dim or input_shape[-1], name="output_dense", **dense
        )
        self.output_dense.build((*input_shape[:-1], self.intermediate_dim))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, inputs, training=None):
        hidden = self.intermediate_dense(inputs)
        return self.dropout_layer(self.output_dense(hidden), training=training)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim or input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "output_dim": self.output_dim,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
