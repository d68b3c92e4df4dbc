"""The SAGAN discriminator network."""

import keras

from keras_attention.layers.self_attention_2d import SelfAttention2D
from keras_attention.models.sagan.common import (
    BASE_RESOLUTION,
    check_network_args,
    spectral_conv,
    spectrally_normalized,
)


def _discriminator_block(x, filters, downsample, first, name):
    """Residual block; the first one skips the leading ReLU (its input is the
    image) and pools before its shortcut convolution, as in SNGAN."""
    h = x if first else keras.layers.ReLU(name=f"{name}_relu0")(x)
    h = spectral_conv(filters, 3, f"{name}_conv1")(h)
    h = keras.layers.ReLU(name=f"{name}_relu1")(h)
    h = spectral_conv(filters, 3, f"{name}_conv2")(h)
    if downsample:
        h = keras.layers.AveragePooling2D(2, name=f"{name}_pool")(h)
    shortcut = x
    if first:
        shortcut = keras.layers.AveragePooling2D(2, name=f"{name}_shortcut_pool")(x)
        shortcut = spectral_conv(filters, 1, f"{name}_shortcut_conv")(shortcut)
    elif downsample or x.shape[-1] != filters:
        shortcut = spectral_conv(filters, 1, f"{name}_shortcut_conv")(shortcut)
        if downsample:
            shortcut = keras.layers.AveragePooling2D(2, name=f"{name}_shortcut_pool")(
                shortcut
            )
    return keras.layers.Add(name=f"{name}_add")([h, shortcut])


def sagan_discriminator(
    image_shape=(32, 32, 1),
    width=32,
    num_classes=None,
    attention=True,
    attention_resolution=16,
    name="discriminator",
):
    """The SAGAN discriminator: an image (and a class) to a real/fake logit.

    Residual blocks with spectrally normalized convolutions and average
    pooling halve the image down to 4x4 (channels doubling from `width`), one
    more block keeps 4x4, then ReLU, global sum pooling and a spectrally
    normalized dense layer give the logit. With `num_classes` it is a
    projection discriminator: `logit = psi(phi(x)) + embed(y)^T phi(x)`.
    `SelfAttention2D` follows the block that produces `attention_resolution`.

    Args:
        image_shape: `(size, size, channels)`, size a power of 2, at least 8.
        width: channels of the first block.
        num_classes: number of classes for the projection discriminator.
        attention: add the self-attention block.
        attention_resolution: the feature-map size it attends over.
        name: model name.

    Returns:
        A functional `keras.Model` from images `(B, size, size, channels)` in
        [-1, 1] (and int labels `(B,)`) to float32 logits `(B, 1)`.

    References:
        - [Miyato & Koyama, 2018. cGANs with Projection
          Discriminator](https://arxiv.org/abs/1802.05637)
    """
    size, _, channels = check_network_args(
        image_shape, num_classes, attention, attention_resolution, width=width
    )
    images = keras.Input((size, size, channels), name="images")
    inputs = [images]
    if num_classes:
        labels = keras.Input((), dtype="int32", name="labels")
        inputs.append(labels)
    x = images
    resolution, filters, i = size, width, 0
    while resolution > BASE_RESOLUTION:
        x = _discriminator_block(x, filters, True, i == 0, f"block{i + 1}")
        resolution //= 2
        i += 1
        if attention and resolution == attention_resolution:
            x = SelfAttention2D(spectral_normalization=True, name="self_attention")(x)
        if resolution > BASE_RESOLUTION:
            filters *= 2
    x = _discriminator_block(x, filters, False, False, f"block{i + 1}")
    x = keras.layers.ReLU(name="output_relu")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    # Sum pooling (SNGAN, BigGAN) = mean pooling times the number of positions.
    features = keras.layers.Rescaling(float(resolution * resolution), name="sum")(x)
    logits = spectrally_normalized(
        keras.layers.Dense(1, dtype="float32", name="logit")
    )(features)
    if num_classes:
        # A dense layer on one-hot labels rather than an Embedding: Keras's
        # SpectralNormalization casts its output to the input dtype, which
        # for an Embedding is the integer labels.
        one_hot = keras.layers.CategoryEncoding(
            num_classes, output_mode="one_hot", name="one_hot"
        )(labels)
        class_embedding = spectrally_normalized(
            keras.layers.Dense(filters, use_bias=False, name="class_embedding")
        )(one_hot)
        projection = keras.layers.Dot(axes=1, dtype="float32", name="projection")(
            [class_embedding, features]
        )
        logits = keras.layers.Add(dtype="float32", name="logits")([logits, projection])
    return keras.Model(inputs if num_classes else images, logits, name=name)
