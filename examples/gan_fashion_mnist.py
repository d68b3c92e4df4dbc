"""Train a self-attention GAN on Fashion-MNIST, measure it, and look at where
its generator attends.

SAGAN on the 60,000 Fashion-MNIST training images (Debian package
`dataset-fashion-mnist`, padded to 32x32): residual generator and
discriminator with spectral normalization, self-attention on the 16x16 maps,
hinge loss and the two time-scale update rule. This short run takes 800
steps; `keras-attention gan` adds per-epoch FID, checkpoints and the ablation
(see docs/tutorials/gan.md for the figures of longer runs).

    python examples/gan_fashion_mnist.py
"""

import os

import numpy as np

import keras_attention
from keras_attention.data.labelled_images import load_fashion_mnist_images
from keras_attention.evaluation.image_quality import (
    ImageQuality,
    train_feature_classifier,
)
from keras_attention.tasks.gan import image_dataset, plot_attention_maps
from keras_attention.viz import plot_image_grid

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"
STEPS, EPOCHS, MEASURED = (2, 1, 64) if TINY else (400, 2, 5000)

# 1. Data: uint8 images (60000, 32, 32, 1) and their classes; the pipeline
#    scales them to [-1, 1], the range of the generator's tanh.
data = load_fashion_mnist_images()
dataset = image_dataset(data.images, batch_size=64, seed=0, repeat=True)

# 2. The GAN; compile() sets up the two Adam optimizers (lr 1e-4 for G,
#    4e-4 for D, beta_1 = 0, beta_2 = 0.9).
gan = keras_attention.models.SAGAN(
    image_shape=(32, 32, 1), generator_width=16, discriminator_width=16, seed=0
)
gan.compile(jit_compile=True)
gan.fit(dataset, steps_per_epoch=STEPS, epochs=EPOCHS)

# 3. Measure: FID and an Inception-style score in the feature space of a small
#    classifier trained on the real images (not ImageNet's Inception network).
classifier, accuracy = train_feature_classifier(
    data.images[: 512 if TINY else None],
    data.labels[: 512 if TINY else None],
    10,
    "runs/example_gan/classifier.keras",
    epochs=EPOCHS,
)
quality = ImageQuality(classifier, data.images[:MEASURED])
scores = quality(gan.sample(MEASURED, seed=1))
print(
    f"classifier accuracy {accuracy:.3f}; FID {scores['fid']:.1f}, "
    f"Inception-style score {scores['inception_score']:.2f}"
)

# 4. Look: samples, and where four positions of generated images attend.
plot_image_grid(gan.sample(64, seed=2), "runs/example_gan/samples.png")
plot_attention_maps(gan.generator, "runs/example_gan/attention.png")
gamma = float(np.asarray(gan.generator.get_layer("self_attention").gamma))
print(f"generator attention gamma {gamma:.3f}; wrote runs/example_gan/")
