"""Long-range agreement: do two distant parts of a generated image agree?

Zhang et al. (2019, "Self-Attention Generative Adversarial Networks",
arXiv:1805.08318) motivate self-attention with structure that convolutions,
whose receptive fields are local, model poorly: parts of an image far apart
that must be consistent with each other. FID measures how the images look on
the whole, not that. This module measures it directly for images made of
items in known regions (such as the fashion pairs of
`keras_attention.data.fashion_pairs`, two items of one class at the ends of a
diagonal): a classifier of single items names the class in each region, and
the agreement is the fraction of images whose regions all get the same
class.

Two references make the figure readable:

- **chance**: the agreement expected if the regions were drawn independently,
  each with the class frequencies it shows in the same images
  (`sum_k p_1(k) p_2(k)` for two regions): 0.1 for ten balanced classes, and
  higher for a generator that makes few classes, which a bare agreement
  would reward;
- **the real-data ceiling**: the same measure on real images (their regions
  do agree), below 1 by the classifier's errors alone.
"""

import keras
import numpy as np


class LongRangeAgreement:
    """The fraction of images whose regions a classifier puts in one class.

    Args:
        classifier: a Keras model from `(h, w, c)` images in [0, 1] to class
            logits or probabilities, e.g. a `feature_classifier` trained on
            single items (`train_feature_classifier`). Its input shape is the
            region's.
        image_shape: `(H, W, C)` of the images to measure.
        regions: the top-left corners `(top, left)` of the regions, two or
            more, each inside `image_shape`.
        batch_size: regions per forward pass.

    Raises:
        ValueError: for fewer than two regions, a region outside the image,
            or channels that differ from the classifier's.

    Example:
        >>> measure = LongRangeAgreement(
        ...     classifier, (64, 64, 1), regions=[(0, 0), (32, 32)])
        >>> measure(images)  # uint8 (N, 64, 64, 1)
        {'agreement': 0.82, 'chance': 0.101}
    """

    def __init__(self, classifier, image_shape, regions, batch_size=500):
        self.classifier = classifier
        self.image_shape = tuple(int(d) for d in image_shape)
        self.region_shape = tuple(int(d) for d in classifier.inputs[0].shape[1:])
        self.regions = [tuple(int(v) for v in region) for region in regions]
        self.batch_size = batch_size
        if len(self.image_shape) != 3 or len(self.region_shape) != 3:
            raise ValueError(
                "`image_shape` and the classifier's input must be (height, width, "
                f"channels); received {self.image_shape} and {self.region_shape}."
            )
        if self.image_shape[2] != self.region_shape[2]:
            raise ValueError(
                f"`image_shape` has {self.image_shape[2]} channels; the "
                f"classifier expects {self.region_shape[2]}."
            )
        if len(self.regions) < 2:
            raise ValueError(
                f"`regions` must name at least two regions to compare; received "
                f"{self.regions}."
            )
        height, width = self.region_shape[:2]
        for top, left in self.regions:
            if not (
                0 <= top <= self.image_shape[0] - height
                and 0 <= left <= self.image_shape[1] - width
            ):
                raise ValueError(
                    f"The {height}x{width} region at (top, left) = ({top}, {left}) "
                    f"does not fit in {self.image_shape[0]}x{self.image_shape[1]} "
                    "images."
                )

    def region_classes(self, images):
        """The class the classifier gives each region of each image.

        Args:
            images: uint8 `(N, H, W, C)`, or float in [0, 1].

        Returns:
            int64 `(N, num_regions)`.

        Raises:
            ValueError: if the images do not have `image_shape`.
        """
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[1:] != self.image_shape:
            raise ValueError(
                "Images must have shape (N, "
                f"{', '.join(map(str, self.image_shape))}) to be measured; "
                f"received {images.shape}."
            )
        if not len(images):
            raise ValueError(
                "No images to measure: received an empty batch of shape "
                f"{images.shape}; expected N >= 1."
            )
        if images.dtype == np.uint8:
            images = images.astype("float32") / 255.0
        height, width = self.region_shape[:2]
        crops = np.concatenate(
            [
                images[:, top : top + height, left : left + width]
                for top, left in self.regions
            ]
        )
        scores = self.classifier.predict(crops, batch_size=self.batch_size, verbose=0)
        classes = np.argmax(keras.ops.convert_to_numpy(scores), axis=-1)
        return classes.reshape(len(self.regions), len(images)).T

    def __call__(self, images):
        """`{"agreement", "chance"}` of `images` (uint8, or float in [0, 1]),
        plain floats: the fraction whose regions all get one class, and the
        fraction expected of regions drawn independently with the class
        frequencies each shows here."""
        classes = self.region_classes(images)
        agreement = np.all(classes == classes[:, :1], axis=1).mean()
        num_classes = int(classes.max()) + 1
        frequencies = [
            np.bincount(column, minlength=num_classes) / len(classes)
            for column in classes.T
        ]
        chance = np.sum(np.prod(frequencies, axis=0))
        return {"agreement": float(agreement), "chance": float(chance)}
