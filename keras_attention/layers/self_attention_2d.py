import keras
from keras import ops

from keras_attention._checks import check_positive_int, check_rank
from keras_attention.layers._output_spec import output_spec
from keras_attention.ops.attention import dot_product_attention


@keras.saving.register_keras_serializable(package="keras_attention")
class SelfAttention2D(keras.layers.Layer):
    """The self-attention block of SAGAN: every position of a feature map
    attends to every other position.

    For a feature map `x` of `N = H * W` positions and `C` channels, three 1x1
    convolutions give the queries `g(x)`, keys `f(x)` (`key_channels`, C/8 by
    default) and values `h(x)` (`value_channels`, C/2 by default, as in the
    reference implementation), and

    ```
    s_ij   = f(x_i)^T g(x_j)
    beta_ji = softmax_i(s_ij)          # how much position j attends to i
    o_j    = v(sum_i beta_ji h(x_i))   # v: 1x1 convolution back to C channels
    y_j    = gamma * o_j + x_j
    ```

    `gamma` is a learned scalar that starts at 0, so the block starts as the
    identity and the network learns to rely on non-local evidence gradually.
    The scores are not scaled by `1/sqrt(d)`, following the paper.

    Memory and time grow with `N^2`: the weights are `(B, N, N / pool_size^2)`.
    A 32x32 map (N = 1,024) costs 4 MB of float32 weights per image; 64x64
    (N = 4,096) 64 MB per image, which is where SAGAN stops (it applies the
    block at 32x32 and 64x64 maps of 128x128 images). Larger maps call for
    `pool_size=2` (the reference max-pools keys and values, dividing the cost
    by 4) or for attention on a smaller map.

    Args:
        key_channels: channels of `f(x)` and `g(x)`; default `max(C // 8, 1)`.
        value_channels: channels of `h(x)`; default `max(C // 2, 1)`.
        pool_size: keys and values are max-pooled by this factor (1 = every
            position is a key).
        spectral_normalization: wrap the four projections in
            `keras.layers.SpectralNormalization`, as SAGAN does in both of its
            networks.
        kernel_initializer: initializer of the projections.
        gamma_initializer: initializer of `gamma` (zeros in the paper).
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, H, W, C)` feature map (channels last).
        return_attention_scores: also return the weights `beta` as
            `(B, H * W, H * W / pool_size^2)`: row `j` (a query position,
            row-major) is a distribution over the key positions.
        training: passed to the spectral normalization (which updates its
            power-iteration vector only in training).

    Returns:
        `(B, H, W, C)`, and the weights with `return_attention_scores=True`.

    Example:

    ```python
    features = keras.Input((16, 16, 64))
    outputs, weights = keras_attention.layers.SelfAttention2D(
        spectral_normalization=True
    )(features, return_attention_scores=True)  # (B, 16, 16, 64), (B, 256, 256)
    ```

    References:
        - [Zhang et al., 2019. Self-Attention Generative Adversarial
          Networks](https://arxiv.org/abs/1805.08318)
        - [Wang et al., 2018. Non-local Neural
          Networks](https://arxiv.org/abs/1711.07971)
    """

    def __init__(
        self,
        key_channels=None,
        value_channels=None,
        pool_size=1,
        spectral_normalization=False,
        kernel_initializer="glorot_uniform",
        gamma_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("key_channels", key_channels, allow_none=True)
        check_positive_int("value_channels", value_channels, allow_none=True)
        check_positive_int("pool_size", pool_size)
        self.key_channels = key_channels
        self.value_channels = value_channels
        self.pool_size = pool_size
        self.spectral_normalization = bool(spectral_normalization)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.gamma_initializer = keras.initializers.get(gamma_initializer)

    def _projection(self, filters, name):
        # Each projection gets its own copy of the initializer, so that a
        # seeded one does not give the four projections the same kernel.
        conv = keras.layers.Conv2D(
            filters,
            1,
            use_bias=False,
            kernel_initializer=keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
            dtype=self.dtype_policy,
            name=name,
        )
        if self.spectral_normalization:
            return keras.layers.SpectralNormalization(
                conv, dtype=self.dtype_policy, name=f"{name}_spectral_norm"
            )
        return conv

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        check_rank("inputs", input_shape, 4)
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(
                "The channel axis (last) of `inputs` must be known; received "
                f"shape {input_shape}."
            )
        for name, size in (("height", input_shape[1]), ("width", input_shape[2])):
            if size is not None and size % self.pool_size:
                raise ValueError(
                    f"The {name} of `inputs` ({size}) must be a multiple of "
                    f"`pool_size` ({self.pool_size}); received shape {input_shape}."
                )
        key_channels = self.key_channels or max(channels // 8, 1)
        value_channels = self.value_channels or max(channels // 2, 1)
        self.query_projection = self._projection(key_channels, "query")
        self.key_projection = self._projection(key_channels, "key")
        self.value_projection = self._projection(value_channels, "value")
        self.output_projection = self._projection(channels, "output")
        for projection in (
            self.query_projection,
            self.key_projection,
            self.value_projection,
        ):
            projection.build(input_shape)
        self.output_projection.build(input_shape[:3] + (value_channels,))
        self.pooling = None
        if self.pool_size > 1:
            self.pooling = keras.layers.MaxPooling2D(
                self.pool_size, dtype=self.dtype_policy, name="key_pooling"
            )
        self.gamma = self.add_weight(
            name="gamma", shape=(), initializer=self.gamma_initializer
        )

    def call(self, inputs, return_attention_scores=False, training=None):
        batch, height, width = ops.shape(inputs)[0], *ops.shape(inputs)[1:3]
        queries = self.query_projection(inputs, training=training)
        keys = self.key_projection(inputs, training=training)
        values = self.value_projection(inputs, training=training)
        if self.pooling is not None:
            keys, values = self.pooling(keys), self.pooling(values)

        def positions(x):
            # (B, h, w, c) -> (B, h * w, 1 head, c)
            return ops.reshape(x, (batch, -1, 1, ops.shape(x)[-1]))

        # The weights only where they are returned: without them the call
        # takes a fused kernel where one serves (the Pallas kernel on a GPU).
        attended = dot_product_attention(
            positions(queries),
            positions(keys),
            positions(values),
            scale=1.0,
            return_weights=return_attention_scores,
        )
        if return_attention_scores:
            attended, weights = attended
        attended = ops.reshape(attended, (batch, height, width, -1))
        outputs = self.output_projection(attended, training=training)
        outputs = ops.cast(self.gamma, outputs.dtype) * outputs + inputs
        if return_attention_scores:
            return outputs, weights[:, 0]
        return outputs

    def compute_output_shape(self, input_shape, return_attention_scores=False):
        input_shape = tuple(input_shape)
        if not return_attention_scores:
            return input_shape
        batch, height, width = input_shape[:3]
        queries = None if height is None or width is None else height * width
        keys = None if queries is None else queries // self.pool_size**2
        return input_shape, (batch, queries, keys)

    def compute_output_spec(self, inputs, return_attention_scores=False, training=None):
        return output_spec(self, inputs.shape, return_attention_scores)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "key_channels": self.key_channels,
                "value_channels": self.value_channels,
                "pool_size": self.pool_size,
                "spectral_normalization": self.spectral_normalization,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "gamma_initializer": keras.initializers.serialize(
                    self.gamma_initializer
                ),
            }
        )
        return config
