"""Five attention layers, one model each: which score learns a toy alignment task?

Each model reads a sequence of random vectors and must output, at every step t,
the vector at position (length - 1 - t): a reversal, which a model can only
solve by attending to the right place. Runs in about a minute on 2 CPU cores.

    python examples/quickstart.py
"""

import os

import keras
import numpy as np

import keras_attention

# KERAS_ATTENTION_TINY_EXAMPLES=1 runs the same code on a few examples and
# steps: CI's check that the example still runs (its figures then mean nothing).
TINY = os.environ.get("KERAS_ATTENTION_TINY_EXAMPLES") == "1"

LENGTH, DEPTH = 10, 8
rng = np.random.default_rng(0)
x_train = rng.normal(size=(64 if TINY else 4000, LENGTH, DEPTH)).astype("float32")
x_test = rng.normal(size=(16 if TINY else 500, LENGTH, DEPTH)).astype("float32")

# Queries carry the output position; keys carry the input position and content.
positions = keras_attention.layers.SinusoidalPositionEncoding()
choices = {
    "additive (Bahdanau)": keras_attention.layers.AdditiveAttention(units=32),
    "multiplicative (Luong general)": keras_attention.layers.MultiplicativeAttention(),
    "scaled dot-product": keras_attention.layers.DotProductAttention(scale=True),
    "cosine (Graves)": keras_attention.layers.CosineAttention(),
    "location (Luong)": keras_attention.layers.LocationAttention(max_length=LENGTH),
}
for name, attention in choices.items():
    inputs = keras.Input((LENGTH, DEPTH))
    queries = keras.layers.Dense(32)(positions(keras.ops.zeros_like(inputs)))
    if isinstance(attention, keras_attention.layers.LocationAttention):
        outputs = attention([queries, inputs])  # scores positions, not keys
    else:
        keys = keras.layers.Dense(32)(
            keras.layers.Concatenate()([inputs, positions(inputs)])
        )
        outputs = attention([queries, inputs, keys])
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    model.fit(
        x_train, x_train[:, ::-1], epochs=1 if TINY else 8, batch_size=64, verbose=0
    )
    mse = model.evaluate(x_test, x_test[:, ::-1], verbose=0)
    print(f"{name:32s} held-out MSE {mse:.4f} (predicting zeros: 1.0)")
