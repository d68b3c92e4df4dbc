"""An untrained evaluation classifier, cached where `train_feature_classifier`
looks for its trained one, for tests whose figures need only be computed."""

import json
import os

from keras_attention.evaluation import feature_classifier


def cache_untrained_classifier(path, image_shape, num_classes=10):
    """Saves an untrained `feature_classifier` to `path` with the held-out
    accuracy 0.0 in `<path>.json`, as `train_feature_classifier` caches its
    own: a run then loads it instead of training one."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    feature_classifier(image_shape, num_classes).save(path)
    with open(f"{path}.json", "w") as f:
        json.dump({"held_out_accuracy": 0.0}, f)
