"""The SAGAN generator network."""

import math

import keras

from keras_attention.layers.conditional_batch_normalization import (
    ConditionalBatchNormalization,
)
from keras_attention.layers.self_attention_2d import SelfAttention2D
from keras_attention.models.sagan.common import (
    BASE_RESOLUTION,
    check_network_args,
    spectral_conv,
    spectrally_normalized,
)


def _normalize(x, labels, num_classes, synchronized, name):
    if num_classes:
        return ConditionalBatchNormalization(
            num_classes, synchronized=synchronized, name=name
        )(x, labels)
    return keras.layers.BatchNormalization(
        momentum=0.9, epsilon=1e-5, synchronized=synchronized, name=name
    )(x)


def _generator_block(x, labels, filters, num_classes, synchronized, name):
    """Pre-activation residual block that doubles the resolution."""
    h = _normalize(x, labels, num_classes, synchronized, f"{name}_norm1")
    h = keras.layers.ReLU(name=f"{name}_relu1")(h)
    h = keras.layers.UpSampling2D(2, name=f"{name}_up")(h)
    h = spectral_conv(filters, 3, f"{name}_conv1")(h)
    h = _normalize(h, labels, num_classes, synchronized, f"{name}_norm2")
    h = keras.layers.ReLU(name=f"{name}_relu2")(h)
    h = spectral_conv(filters, 3, f"{name}_conv2")(h)
    shortcut = keras.layers.UpSampling2D(2, name=f"{name}_shortcut_up")(x)
    shortcut = spectral_conv(filters, 1, f"{name}_shortcut_conv")(shortcut)
    return keras.layers.Add(name=f"{name}_add")([h, shortcut])


def _generator_channels(image_size, width):
    """Channels of the generator's maps from 4x4 up to full size: `width` at
    full size, doubling at each halving of the resolution (`width * 8` at
    4x4 for 32x32 images)."""
    blocks = int(math.log2(image_size // BASE_RESOLUTION))
    return [width * 2 ** (blocks - i) for i in range(blocks + 1)]


def sagan_generator(
    image_shape=(32, 32, 1),
    latent_dim=128,
    width=32,
    num_classes=None,
    attention=True,
    attention_resolution=16,
    synchronized_batch_norm=False,
    name="generator",
):
    """The SAGAN generator: `z` (and a class) to an image in [-1, 1].

    A spectrally normalized dense layer maps `z` to a 4x4 map, residual
    blocks (batch norm, ReLU, 2x nearest upsampling, 3x3 convolutions) double
    it up to the image size, and a final batch norm, ReLU, 3x3 convolution and
    tanh give the image. With `num_classes`, every batch normalization is a
    `ConditionalBatchNormalization` on the class. `SelfAttention2D` (spectrally
    normalized) follows the block that produces `attention_resolution`.

    Args:
        image_shape: `(size, size, channels)`, size a power of 2, at least 8.
        latent_dim: size of `z`.
        width: channels at full resolution; they double at each halving of
            the resolution, down to the 4x4 map.
        num_classes: number of classes for a class-conditional generator.
        attention: add the self-attention block.
        attention_resolution: the feature-map size it attends over.
        synchronized_batch_norm: under a `tf.distribute` strategy, batch
            statistics over the global batch instead of each replica's share
            (cross-replica batch norm, as BigGAN trains); TensorFlow only.
        name: model name.

    Returns:
        A functional `keras.Model` from `z` `(B, latent_dim)` (and int labels
        `(B,)`) to float32 images `(B, size, size, channels)` in [-1, 1].
    """
    size, _, channels = check_network_args(
        image_shape,
        num_classes,
        attention,
        attention_resolution,
        latent_dim=latent_dim,
        width=width,
    )
    widths = _generator_channels(size, width)
    z = keras.Input((latent_dim,), name="z")
    inputs = [z]
    labels = None
    if num_classes:
        labels = keras.Input((), dtype="int32", name="labels")
        inputs.append(labels)
    x = spectrally_normalized(
        keras.layers.Dense(BASE_RESOLUTION * BASE_RESOLUTION * widths[0], name="dense")
    )(z)
    x = keras.layers.Reshape((BASE_RESOLUTION, BASE_RESOLUTION, widths[0]))(x)
    resolution = BASE_RESOLUTION
    for i, filters in enumerate(widths[1:]):
        if attention and resolution == attention_resolution:
            x = SelfAttention2D(spectral_normalization=True, name="self_attention")(x)
        x = _generator_block(
            x, labels, filters, num_classes, synchronized_batch_norm, f"block{i + 1}"
        )
        resolution *= 2
    x = _normalize(x, labels, num_classes, synchronized_batch_norm, "output_norm")
    x = keras.layers.ReLU(name="output_relu")(x)
    # The image layers compute in float32 under a mixed policy: the output
    # is what the discriminator and the metrics see, and PyTorch's CPU
    # convolution cannot take the kernel gradient of a half-precision
    # convolution with one output channel (a grayscale image).
    x = spectral_conv(channels, 3, "output_conv", dtype="float32")(x)
    images = keras.layers.Activation("tanh", dtype="float32", name="images")(x)
    return keras.Model(inputs if num_classes else z, images, name=name)
