"""Callbacks that interrupt and observe training in the task tests."""

import keras


class StopAt(keras.callbacks.Callback):
    """Simulates a crash at the start of an epoch."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt(f"interrupted at epoch {epoch}")


class Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)
