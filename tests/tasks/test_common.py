import keras
import numpy as np
import pytest

from keras_attention.tasks.common import (
    ArgumentError,
    check_training_size,
    fit_resumable,
    read_epoch_log,
)
from tests.tasks.callbacks import Record, StopAt


def diverging_task():
    """Training pulls the output towards +1 while validation wants -1, so
    the validation loss is best after the first epoch and worse after it."""
    dense = keras.layers.Dense(1, kernel_initializer="zeros")
    model = keras.Sequential([keras.Input((3,)), dense])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    x = np.ones((16, 3), "float32")
    return model, (x, np.ones((16, 1))), (x, -np.ones((16, 1)))


def test_best_epoch_before_an_interruption_is_kept(tmp_path):
    model, train, valid = diverging_task()
    options = {"epochs": 8, "validation_data": valid, "patience": 2, "verbose": 0}
    x, y = train
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(2)], **options)
    model, _, _ = diverging_task()
    record = Record()
    history = fit_resumable(model, x, tmp_path, y=y, callbacks=[record], **options)
    # Resumed at epoch 2; epochs 2 and 3 did not beat epoch 0: stopped.
    assert record.epochs == [2, 3]
    assert history["epochs"] == 4 and history["best_epoch"] == 1
    assert len(history["val_loss"]) == 4
    assert history["val_loss"][0] == min(history["val_loss"])
    # The model holds the weights of epoch 0, saved before the interruption.
    loss = model.evaluate(*valid, verbose=0)
    assert loss == pytest.approx(history["val_loss"][0], rel=1e-5)
    logged = read_epoch_log(tmp_path / "checkpoints" / "epochs.csv")
    assert [row["epoch"] for row in logged] == [0, 1, 2, 3]
    assert history["train_seconds"] == pytest.approx(
        sum(row["seconds"] for row in logged), abs=0.1
    )


def test_a_finished_run_loads_its_final_weights_instead_of_training(tmp_path):
    model, (x, y), valid = diverging_task()
    options = {"epochs": 2, "validation_data": valid, "verbose": 0}
    first = fit_resumable(model, x, tmp_path, y=y, **options)
    assert not (tmp_path / "checkpoints" / "backup").exists()
    again, _, _ = diverging_task()
    record = Record()
    second = fit_resumable(again, x, tmp_path, y=y, callbacks=[record], **options)
    assert record.epochs == []
    assert second == first
    np.testing.assert_array_equal(again.get_weights()[0], model.get_weights()[0])


def test_log_lines_beyond_the_backup_are_dropped_on_resume(tmp_path):
    """A kill after an epoch's log line but before its backup, or in the
    middle of writing a line, must leave one line per epoch."""
    model, (x, y), valid = diverging_task()
    options = {"epochs": 4, "validation_data": valid, "verbose": 0}
    with pytest.raises(KeyboardInterrupt):
        fit_resumable(model, x, tmp_path, y=y, callbacks=[StopAt(2)], **options)
    log = tmp_path / "checkpoints" / "epochs.csv"
    lines = log.read_text().splitlines(keepends=True)
    # Epoch 2 logged but not backed up, then a line cut short.
    log.write_text("".join([*lines, lines[-1].replace("1,", "2,", 1), "3,0.5"]))
    model, _, _ = diverging_task()
    record = Record()
    history = fit_resumable(model, x, tmp_path, y=y, callbacks=[record], **options)
    assert record.epochs == [2, 3]
    assert [row["epoch"] for row in read_epoch_log(log)] == [0, 1, 2, 3]
    assert history["epochs"] == 4 and len(history["loss"]) == 4


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
