import keras
import numpy as np
import pytest

from keras_attention.evaluation import LongRangeAgreement

NUM_CLASSES = 10
REGIONS = [(0, 0), (8, 8)]
IMAGE_SHAPE = (12, 12, 1)


def brightness_classifier():
    """A fixed classifier of 4x4 regions: class k is the brightness nearest
    k / 9 (logit `2 t_k m - t_k^2` is `-(m - t_k)^2` up to a term shared by
    all classes)."""
    targets = np.arange(NUM_CLASSES) / (NUM_CLASSES - 1)
    model = keras.Sequential(
        [
            keras.Input((4, 4, 1)),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.layers[-1].set_weights([2 * targets[None, :], -(targets**2)])
    return model


def images_of(classes):
    """uint8 `(N, 12, 12, 1)` whose regions have the brightness of `classes`
    (`(N, 2)`), on a background of another brightness."""
    classes = np.asarray(classes)
    images = np.full((len(classes), *IMAGE_SHAPE), 255, "uint8")
    for slot, (top, left) in enumerate(REGIONS):
        value = np.round(classes[:, slot] * 255 / (NUM_CLASSES - 1)).astype("uint8")
        images[:, top : top + 4, left : left + 4, 0] = value[:, None, None]
    return images


@pytest.fixture(scope="module")
def measure():
    return LongRangeAgreement(brightness_classifier(), IMAGE_SHAPE, REGIONS)


def test_regions_are_classified_where_they_lie(measure):
    classes = np.array([[0, 9], [3, 3], [7, 2]])
    np.testing.assert_array_equal(measure.region_classes(images_of(classes)), classes)


def test_agreeing_regions_score_one_and_mismatched_ones_zero(measure):
    first = np.arange(200) % NUM_CLASSES
    agreeing = measure(images_of(np.stack([first, first], axis=1)))
    assert agreeing == {"agreement": 1.0, "chance": pytest.approx(0.1)}
    mismatched = measure(images_of(np.stack([first, (first + 1) % 10], axis=1)))
    assert mismatched["agreement"] == 0.0
    # Both regions still show every class equally often.
    assert mismatched["chance"] == pytest.approx(0.1)
    assert all(type(v) is float for v in agreeing.values())


def test_independent_regions_agree_at_chance(measure):
    classes = np.random.default_rng(0).integers(0, NUM_CLASSES, (2000, 2))
    found = measure(images_of(classes))
    assert found["agreement"] == pytest.approx(np.mean(classes[:, 0] == classes[:, 1]))
    assert found["agreement"] == pytest.approx(found["chance"], abs=0.02)
    assert found["chance"] == pytest.approx(0.1, abs=0.01)


def test_a_single_class_agrees_but_only_at_chance(measure):
    # A generator that makes one class only: agreement 1, as expected by chance.
    found = measure(images_of(np.full((50, 2), 4)))
    assert found == {"agreement": 1.0, "chance": 1.0}


def test_float_images_in_the_unit_range_measure_the_same(measure):
    classes = np.random.default_rng(1).integers(0, NUM_CLASSES, (40, 2))
    images = images_of(classes)
    assert measure(images / 255.0) == measure(images)


def test_bad_images_and_regions_are_refused(measure):
    with pytest.raises(
        ValueError,
        match=r"shape \(N, 12, 12, 1\) to be measured; received \(3, 8, 8, 1\)",
    ):
        measure(np.zeros((3, 8, 8, 1), "uint8"))
    with pytest.raises(ValueError, match=r"received \(12, 12, 1\)"):
        measure(np.zeros(IMAGE_SHAPE, "uint8"))
    with pytest.raises(ValueError, match="empty batch"):
        measure(np.zeros((0, *IMAGE_SHAPE), "uint8"))
    classifier = brightness_classifier()
    with pytest.raises(ValueError, match=r"region at \(top, left\) = \(9, 0\)"):
        LongRangeAgreement(classifier, IMAGE_SHAPE, [(0, 0), (9, 0)])
    with pytest.raises(ValueError, match="at least two regions"):
        LongRangeAgreement(classifier, IMAGE_SHAPE, [(0, 0)])
    with pytest.raises(ValueError, match="3 channels; the classifier expects 1"):
        LongRangeAgreement(classifier, (12, 12, 3), REGIONS)
