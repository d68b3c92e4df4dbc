import numpy as np
import pytest
from keras import ops

from keras_attention.layers import ConditionalBatchNormalization
from tests.layer_test import run_layer_test

rng = np.random.default_rng(2)
X = rng.normal(2.0, 3.0, size=(6, 4, 4, 5)).astype("float32")
LABELS = np.array([0, 1, 2, 0, 1, 2], "int32")


def normalized(x, epsilon=1e-5):
    mean = x.mean(axis=(0, 1, 2))
    variance = x.var(axis=(0, 1, 2))
    return (x - mean) / np.sqrt(variance + epsilon)


def test_starts_as_plain_batch_normalization():
    layer = ConditionalBatchNormalization(3)
    got = ops.convert_to_numpy(layer(X, LABELS, training=True))
    np.testing.assert_allclose(got, normalized(X), atol=1e-4)


def test_each_class_gets_its_own_scale_and_shift():
    layer = ConditionalBatchNormalization(3)
    layer.build(X.shape)
    scale = rng.normal(size=(3, 5)).astype("float32")
    shift = rng.normal(size=(3, 5)).astype("float32")
    layer.scale_offset.embeddings.assign(scale)
    layer.shift.embeddings.assign(shift)
    got = ops.convert_to_numpy(layer(X, LABELS, training=True))
    want = (1.0 + scale[LABELS])[:, None, None] * normalized(X) + shift[LABELS][
        :, None, None
    ]
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_inference_uses_the_moving_statistics():
    layer = ConditionalBatchNormalization(3, momentum=0.0)
    layer(X, LABELS, training=True)  # momentum 0: the moving stats are this batch
    got = ops.convert_to_numpy(layer(X[:1], LABELS[:1], training=False))
    np.testing.assert_allclose(got, normalized(X)[:1], atol=1e-3)


def test_bad_labels_and_configs_are_refused():
    with pytest.raises(ValueError, match=r"\(batch,\) tensor"):
        ConditionalBatchNormalization(3)(X, LABELS[:, None])
    with pytest.raises(ValueError, match="num_classes"):
        ConditionalBatchNormalization(0)


def test_keeps_the_layer_contract():
    run_layer_test(
        ConditionalBatchNormalization,
        {"num_classes": 3},
        {"inputs": X, "labels": LABELS},
        expected_output_shape=X.shape,
    )
