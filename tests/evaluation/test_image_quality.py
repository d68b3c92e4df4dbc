import numpy as np
import pytest

# Data from the applications (the `apps` extra), absent on a core install.
pytest.importorskip("tensorflow")

from keras_attention.data.labelled_images import load_digits_images
from keras_attention.evaluation.image_quality import (
    ImageQuality,
    frechet_distance,
    inception_score,
    train_feature_classifier,
)


def test_frechet_distance_of_gaussians():
    identity = np.eye(3)
    assert frechet_distance(np.zeros(3), identity, np.zeros(3), identity) == (
        pytest.approx(0.0, abs=1e-9)
    )
    # Means apart by (1, 2, 2): squared distance 9.
    shifted = frechet_distance(np.zeros(3), identity, np.array([1, 2, 2]), identity)
    assert shifted == pytest.approx(9.0)
    # Diagonal covariances: sum (sqrt(a) - sqrt(b))^2.
    a, b = np.diag([1.0, 4.0]), np.diag([9.0, 1.0])
    assert frechet_distance(np.zeros(2), a, np.zeros(2), b) == pytest.approx(5.0)


@pytest.mark.parametrize("rank", [6, 3])
def test_frechet_distance_matches_the_matrix_square_root(rank):
    # Against the textbook formula with scipy's sqrtm, for full-rank and for
    # singular covariances (features that never vary).
    from scipy import linalg

    rng = np.random.default_rng(rank)
    a = rng.normal(size=(6, rank)) @ rng.normal(size=(rank, 6))
    b = rng.normal(size=(6, rank)) @ rng.normal(size=(rank, 6))
    cov_a, cov_b = a @ a.T, b @ b.T
    mean_a, mean_b = rng.normal(size=6), rng.normal(size=6)
    root = np.real(linalg.sqrtm(cov_a @ cov_b))
    expected = (
        np.sum((mean_a - mean_b) ** 2)
        + np.trace(cov_a)
        + np.trace(cov_b)
        - 2 * np.trace(root)
    )
    got = frechet_distance(mean_a, cov_a, mean_b, cov_b)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_inception_score_is_the_number_of_classes_for_confident_diverse_images():
    confident = np.eye(10)[np.arange(1000) % 10] * 0.999 + 0.0001
    score, spread = inception_score(confident)
    assert score == pytest.approx(10.0, rel=0.02) and spread < 0.1
    same_class = np.tile(np.eye(10)[3], (1000, 1))
    assert inception_score(same_class)[0] == pytest.approx(1.0, abs=1e-6)


@pytest.fixture(scope="module")
def digits_quality(tmp_path_factory):
    data = load_digits_images()
    path = tmp_path_factory.mktemp("quality") / "classifier.keras"
    classifier, accuracy = train_feature_classifier(
        data.images, data.labels, 10, str(path), epochs=4
    )
    return data, path, classifier, accuracy, ImageQuality(classifier, data.images[:800])


@pytest.mark.slow
def test_real_images_score_well_and_noise_scores_badly(digits_quality):
    data, _, _, accuracy, quality = digits_quality
    assert accuracy > 0.8
    real = quality(data.images[800:1600])
    noise = quality(np.random.default_rng(0).integers(0, 256, (800, 8, 8, 1), "uint8"))
    assert real["fid"] < 0.1 * noise["fid"]
    assert real["inception_score"] > 2 * noise["inception_score"]
    with pytest.raises(ValueError, match=r"\(N, 8, 8, 1\)"):
        quality(np.zeros((4, 16, 16, 1), "uint8"))


@pytest.mark.slow
def test_classifier_is_trained_once_and_cached(digits_quality):
    data, path, classifier, accuracy, _ = digits_quality
    cached, cached_accuracy = train_feature_classifier(
        data.images[:10], data.labels[:10], 10, str(path)
    )
    assert cached_accuracy == accuracy
    np.testing.assert_array_equal(
        cached.predict(data.images[:5] / 255.0, verbose=0),
        classifier.predict(data.images[:5] / 255.0, verbose=0),
    )
