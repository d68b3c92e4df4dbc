import pytest

from keras_attention.tasks.common import ArgumentError, check_training_size


def test_training_sizes_are_checked_against_the_data():
    check_training_size(64, 64, "pairs")
    check_training_size(8, 100, "texts", num_train=100, available=100)
    with pytest.raises(ArgumentError) as error:
        check_training_size(100_000, 19_990, "pairs")
    assert str(error.value) == (
        "batch size 100,000 is larger than the training split (19,990 pairs): "
        "no full batch to train on"
    )
    assert error.value.exit_status == 2
    with pytest.raises(ArgumentError, match="num_train 5,000 is more than the "):
        check_training_size(8, 1_000, "images", num_train=5_000, available=1_000)
