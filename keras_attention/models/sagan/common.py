"""What the SAGAN generator and discriminator share: the base resolution,
the checks of their arguments, and their spectrally normalized layers."""

import math

import keras

from keras_attention._checks import check_positive_int

# The base resolution of both networks: the generator starts from a 4x4 map
# and the discriminator ends on one.
BASE_RESOLUTION = 4


def check_image_shape(image_shape):
    """Checks a network's `image_shape`.

    Args:
        image_shape: `(size, size, channels)`, size a power of 2 of at least
            twice `BASE_RESOLUTION`.

    Returns:
        `image_shape` as a tuple.
    """
    image_shape = tuple(image_shape)
    size = image_shape[0] if len(image_shape) == 3 else None
    if (
        len(image_shape) != 3
        or image_shape[0] != image_shape[1]
        or not isinstance(size, int)
        or size < 2 * BASE_RESOLUTION
        or size & (size - 1)
    ):
        raise ValueError(
            "`image_shape` must be (size, size, channels) with size a power of "
            f"2 of at least {2 * BASE_RESOLUTION}; received {image_shape}."
        )
    check_positive_int("channels (image_shape[2])", image_shape[2])
    return image_shape


def attention_resolutions(image_size):
    """The feature-map sizes where both SAGAN networks can attend: from the
    4x4 map up to half the image size."""
    return [2**k for k in range(2, int(math.log2(image_size)))]


def check_network_args(
    image_shape, num_classes, attention, attention_resolution, **sizes
):
    """Checks the arguments both networks take, and a network's own positive
    sizes.

    Args:
        image_shape: see `check_image_shape`.
        num_classes: None, or the number of classes of a conditional network.
        attention: whether the network has a self-attention block.
        attention_resolution: the feature-map size it attends over, one of
            `attention_resolutions` of the image size (read with `attention`
            only).
        **sizes: the network's positive sizes, by name.

    Returns:
        `image_shape` as a tuple.
    """
    image_shape = check_image_shape(image_shape)
    for name, value in sizes.items():
        check_positive_int(name, value)
    if num_classes is not None:
        check_positive_int("num_classes", num_classes)
    allowed = attention_resolutions(image_shape[0])
    if attention and attention_resolution not in allowed:
        raise ValueError(
            f"`attention_resolution` must be one of {allowed} for "
            f"{image_shape[0]}x{image_shape[0]} images (a feature-map size "
            f"found in both networks); received {attention_resolution!r}."
        )
    return image_shape


def spectrally_normalized(layer):
    """`layer` wrapped in `keras.layers.SpectralNormalization`, named after
    it."""
    return keras.layers.SpectralNormalization(layer, name=f"{layer.name}_sn")


def spectral_conv(filters, kernel_size, name, dtype=None):
    """A spectrally normalized "same"-padded `Conv2D`."""
    return spectrally_normalized(
        keras.layers.Conv2D(
            filters, kernel_size, padding="same", name=name, dtype=dtype
        )
    )
