import keras
from keras import ops

from keras_attention._checks import check_positive_int, check_rank, static_shape


@keras.saving.register_keras_serializable(package="keras_attention")
class ConditionalBatchNormalization(keras.layers.Layer):
    """Batch normalization whose scale and shift depend on a class label.

    `y = (1 + dgamma[label]) * (x - mean) / sqrt(var + eps) + beta[label]`:
    the statistics are shared by all classes (a `BatchNormalization` without
    its own scale and shift), and each class has its own affine parameters,
    looked up in two embeddings that start at the identity (dgamma = 0,
    beta = 0). This is how the class enters SAGAN's and BigGAN's
    class-conditional generators.

    Args:
        num_classes: number of classes.
        momentum: momentum of the moving statistics.
        epsilon: added to the variance.
        synchronized: under a `tf.distribute` strategy, compute the batch
            statistics over all replicas (TensorFlow backend only, as for
            `keras.layers.BatchNormalization`).
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, ..., C)` features.
        labels: int `(B,)` class indices in `[0, num_classes)`.
        training: whether to normalize with the batch statistics (and update
            the moving ones) or with the moving statistics.

    Returns:
        The normalized features, shaped like `inputs`.

    Example:

    ```python
    features = keras.Input((8, 8, 32))
    labels = keras.Input((), dtype="int32")
    outputs = keras_attention.layers.ConditionalBatchNormalization(10)(
        features, labels
    )
    ```

    References:
        - [de Vries et al., 2017. Modulating early visual processing by
          language](https://arxiv.org/abs/1707.00683)
        - [Zhang et al., 2019. Self-Attention Generative Adversarial
          Networks](https://arxiv.org/abs/1805.08318)
    """

    def __init__(
        self, num_classes, momentum=0.9, epsilon=1e-5, synchronized=False, **kwargs
    ):
        super().__init__(**kwargs)
        check_positive_int("num_classes", num_classes)
        self.num_classes = num_classes
        self.momentum = momentum
        self.epsilon = epsilon
        self.synchronized = synchronized

    def build(self, inputs_shape, labels_shape=None):
        input_shape = tuple(inputs_shape)
        check_rank("inputs", input_shape, (2, 3, 4, 5))
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(
                "The channel axis (last) of `inputs` must be known; received "
                f"shape {input_shape}."
            )
        self.normalization = keras.layers.BatchNormalization(
            momentum=self.momentum,
            epsilon=self.epsilon,
            center=False,
            scale=False,
            synchronized=self.synchronized,
            dtype=self.dtype_policy,
            name="normalization",
        )
        self.normalization.build(input_shape)
        self.scale_offset = self._class_embedding(channels, "scale_offset")
        self.shift = self._class_embedding(channels, "shift")

    def _class_embedding(self, channels, name):
        """One zero-initialized `(num_classes, channels)` row per class, so
        that the layer starts as plain batch normalization."""
        embedding = keras.layers.Embedding(
            self.num_classes,
            channels,
            embeddings_initializer="zeros",
            dtype=self.dtype_policy,
            name=name,
        )
        embedding.build((None,))
        return embedding

    def call(self, inputs, labels, training=None):
        labels = ops.convert_to_tensor(labels)
        if len(static_shape(labels)) != 1:
            raise ValueError(
                "`labels` must be a (batch,) tensor of class indices; received "
                f"shape {static_shape(labels)}."
            )
        normalized = self.normalization(inputs, training=training)
        # (B, C) -> (B, 1, ..., 1, C), to broadcast over the spatial axes.
        broadcast = (-1,) + (1,) * (len(inputs.shape) - 2) + (inputs.shape[-1],)
        scale = ops.reshape(1.0 + self.scale_offset(labels), broadcast)
        shift = ops.reshape(self.shift(labels), broadcast)
        return normalized * ops.cast(scale, normalized.dtype) + ops.cast(
            shift, normalized.dtype
        )

    def compute_output_shape(self, inputs_shape, labels_shape=None):
        return tuple(inputs_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "momentum": self.momentum,
                "epsilon": self.epsilon,
                "synchronized": self.synchronized,
            }
        )
        return config
