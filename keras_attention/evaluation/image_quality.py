"""FID and Inception-style score with a classifier trained on the real data.

The standard FID and Inception Score use the ImageNet Inception-v3 network.
Its weights are a download and it was never trained on 28x28 clothes or
digits, so this package trains a small convolutional classifier on the real
images instead and measures in its feature space: the Frechet distance
between the Gaussians fitted to its penultimate features of real and
generated images, and `exp(E_x KL(p(y|x) || p(y)))` of its class
predictions. The numbers rank models trained on the same data with the same
classifier; they are not comparable with published FID/IS values.
"""

import json
import os

import keras
import numpy as np

from keras_attention.layers.dropout import Dropout
from keras_attention.utils import keras_internals
from keras_attention.utils.files import write_text, written_whole
from keras_attention.utils.progress import phase

FEATURE_LAYER = "features"


def feature_classifier(image_shape, num_classes):
    """A small CNN for `image_shape` images in [0, 1]: two stages of two 3x3
    convolutions (32 then 64 filters) and 2x2 max-pooling, then a 128-unit
    ReLU layer (the features FID uses, named `"features"`) and the class
    logits."""
    images = keras.Input(image_shape, name="images")
    x = images
    for filters in (32, 64):
        for _ in range(2):
            x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = Dropout(0.3)(x)
    x = keras.layers.Dense(128, activation="relu", name=FEATURE_LAYER)(x)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name="feature_classifier")


def train_feature_classifier(
    images, labels, num_classes, path, epochs=3, batch_size=128, seed=0
):
    """Trains `feature_classifier` on 90% of the images, measures its
    accuracy on the other 10%, and saves it to `path` with that accuracy in
    `<path>.json`; loads both instead when `path` exists.

    Args:
        images: uint8 `(N, H, W, C)`.
        labels: int `(N,)`.
        num_classes: number of classes.
        path: the `.keras` file.
        epochs: training epochs.
        batch_size: batch size.
        seed: seed of the split and the initialization.

    Returns:
        `(classifier, held_out_accuracy)`.
    """
    info_path = f"{path}.json"
    if os.path.exists(path) and os.path.exists(info_path):
        with open(info_path) as f:
            info = json.load(f)
        return keras.saving.load_model(path), info["held_out_accuracy"]
    phase(f"training the evaluation classifier on {len(images)} real images")
    keras.utils.set_random_seed(seed)
    order = np.random.default_rng(seed).permutation(len(images))
    split = int(0.9 * len(images))
    train, held_out = order[:split], order[split:]
    pixels = images.astype("float32") / 255.0
    classifier = feature_classifier(images.shape[1:], num_classes)
    classifier.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    train_pixels, train_labels = pixels[train], labels[train]
    keras_internals.build_training_state(classifier, (train_pixels, train_labels))
    classifier.fit(
        train_pixels, train_labels, batch_size=batch_size, epochs=epochs, verbose=2
    )
    _, accuracy = classifier.evaluate(
        pixels[held_out], labels[held_out], batch_size=256, verbose=0
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with written_whole(path) as partial:
        classifier.save(partial)
    write_text(
        info_path,
        json.dumps({"held_out_accuracy": accuracy, "train_images": len(train)}),
    )
    phase(f"evaluation classifier: held-out accuracy {accuracy:.3f}; saved {path}")
    return classifier, accuracy


def frechet_distance(mean_a, covariance_a, mean_b, covariance_b):
    """`||m_a - m_b||^2 + Tr(C_a + C_b - 2 (C_a C_b)^(1/2))`: the Frechet
    (2-Wasserstein) distance between two Gaussians.

    The trace of the square root is the sum of the square roots of the
    eigenvalues of `C_a C_b`, which are real and non-negative for two
    covariance matrices (the product is similar to a positive semi-definite
    one): no matrix square root is needed, and the result holds for singular
    covariances too (dead features).
    """
    eigenvalues = np.linalg.eigvals(
        np.asarray(covariance_a, "float64") @ np.asarray(covariance_b, "float64")
    )
    # Rounding leaves tiny imaginary parts and tiny negative values.
    root_trace = np.sqrt(np.clip(eigenvalues.real, 0.0, None)).sum()
    difference = np.asarray(mean_a, "float64") - np.asarray(mean_b, "float64")
    return float(
        difference @ difference
        + np.trace(covariance_a)
        + np.trace(covariance_b)
        - 2.0 * root_trace
    )


def inception_score(probabilities, splits=10):
    """`exp(E_x KL(p(y|x) || p(y)))` over `splits` equal parts of the
    predictions; returns the mean and standard deviation over the parts."""
    probabilities = np.asarray(probabilities, "float64")
    scores = []
    for part in np.array_split(probabilities, splits):
        marginal = part.mean(axis=0, keepdims=True)
        kl = part * (np.log(part + 1e-12) - np.log(marginal + 1e-12))
        scores.append(np.exp(kl.sum(axis=1).mean()))
    return float(np.mean(scores)), float(np.std(scores))


class ImageQuality:
    """FID and Inception-style score of images against real images, in the
    space of a trained classifier.

    Args:
        classifier: a trained `feature_classifier`.
        real_images: uint8 or [0, 1] float images whose statistics are the
            reference.
        batch_size: images per forward pass.
    """

    def __init__(self, classifier, real_images, batch_size=500):
        self.batch_size = batch_size
        self.network = keras.Model(
            classifier.inputs,
            [classifier.get_layer(FEATURE_LAYER).output, classifier.outputs[0]],
        )
        features, _ = self._features(real_images)
        self.real_mean, self.real_covariance = _gaussian(features)
        self.num_real = len(real_images)

    def _features(self, images):
        images = np.asarray(images)
        if images.dtype == np.uint8:
            images = images.astype("float32") / 255.0
        expected = tuple(self.network.inputs[0].shape[1:])
        if images.shape[1:] != expected:
            raise ValueError(
                f"Images must have shape (N, {', '.join(map(str, expected))}) "
                f"to be measured; received {images.shape}."
            )
        features, logits = self.network.predict(
            images, batch_size=self.batch_size, verbose=0
        )
        return np.asarray(features, "float64"), np.asarray(logits, "float64")

    def __call__(self, images):
        """`{"fid", "inception_score", "inception_score_std"}` of `images`
        (uint8, or float in [0, 1])."""
        features, logits = self._features(images)
        mean, covariance = _gaussian(features)
        logits = logits - logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        score, spread = inception_score(probabilities)
        return {
            "fid": frechet_distance(
                mean, covariance, self.real_mean, self.real_covariance
            ),
            "inception_score": score,
            "inception_score_std": spread,
        }


def _gaussian(features):
    return features.mean(axis=0), np.cov(features, rowvar=False)
