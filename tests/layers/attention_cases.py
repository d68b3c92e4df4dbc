"""The score-function layers, each with a small config, for shared tests."""

from keras_attention import layers

MAX_LENGTH = 9

FACTORIES = {
    "dot": lambda **kw: layers.DotProductAttention(**kw),
    "scaled_dot": lambda **kw: layers.DotProductAttention(scale=True, **kw),
    "multiplicative": lambda **kw: layers.MultiplicativeAttention(**kw),
    "additive": lambda **kw: layers.AdditiveAttention(units=6, use_bias=True, **kw),
    "cosine": lambda **kw: layers.CosineAttention(sharpness=4.0, **kw),
    "location": lambda **kw: layers.LocationAttention(
        max_length=MAX_LENGTH, use_bias=True, **kw
    ),
}
# Layers whose scores do not depend on the key positions' contents.
POSITION_BASED = {"location"}
