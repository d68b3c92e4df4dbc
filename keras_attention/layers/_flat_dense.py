"""The projections of `kernel_layout="flat"`: Keras `Dense` layers whose
kernels are `(dim, heads * head_dim)` and `(heads * head_dim, dim)`, as
keras-hub's Gemma 3n and SmolLM 3 build theirs (and Hugging Face's
`nn.Linear`), with the heads split or merged around `Dense`'s own call.

The reshape is in `__call__`, outside `call`: `Dense`'s `call`, its int8
`quantize` and its LoRA (`enable_lora`) act on the flat kernel as they do on
keras-hub's `Dense`, so both quantize and adapt alike.
"""

import keras
from keras import ops


class _FlatDense(keras.layers.Dense):
    """A `Dense` whose call is `Dense`'s (see the module)."""

    def quantize(self, mode=None, type_check=True, **kwargs):
        # `Dense` refuses its subclasses (whose `call` it cannot know): this
        # one's `call` is `Dense`'s. The rest (`config`, from Keras 3.12) as
        # the release takes it.
        return super().quantize(mode, type_check=False, **kwargs)


@keras.saving.register_keras_serializable(package="keras_attention")
class HeadsDense(_FlatDense):
    """`(B, ..., dim) -> (B, ..., heads, head_dim)` through a `Dense` of
    `heads * head_dim` units: its kernel `(dim, heads * head_dim)`, its bias
    `(heads * head_dim,)`, the output split into heads.

    Args:
        heads: the number of heads.
        head_dim: the size of each head.
        **kwargs: `keras.layers.Dense`'s arguments but `units`.
    """

    def __init__(self, heads, head_dim, **kwargs):
        super().__init__(heads * head_dim, **kwargs)
        self.heads = heads
        self.head_dim = head_dim

    def __call__(self, inputs, *args, **kwargs):
        outputs = super().__call__(inputs, *args, **kwargs)
        shape = (*outputs.shape[:-1], self.heads, self.head_dim)
        if isinstance(outputs, keras.KerasTensor):
            return keras.KerasTensor(shape, dtype=outputs.dtype)
        leading = ops.shape(outputs)[:-1]
        return ops.reshape(outputs, (*leading, self.heads, self.head_dim))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.heads, self.head_dim)

    def get_config(self):
        config = super().get_config()
        config.pop("units")
        config.update(heads=self.heads, head_dim=self.head_dim)
        return config


@keras.saving.register_keras_serializable(package="keras_attention")
class MergedHeadsDense(_FlatDense):
    """`(B, ..., heads, head_dim) -> (B, ..., units)` through a `Dense` on
    the heads merged into one axis: its kernel `(heads * head_dim, units)`.

    Args:
        units: the output size.
        **kwargs: `keras.layers.Dense`'s arguments.
    """

    def build(self, input_shape):
        *leading, heads, head_dim = input_shape
        super().build((*leading, heads * head_dim))

    def __call__(self, inputs, *args, **kwargs):
        *leading, heads, head_dim = inputs.shape
        if isinstance(inputs, keras.KerasTensor):
            merged = keras.KerasTensor((*leading, heads * head_dim), dtype=inputs.dtype)
        else:
            leading = ops.shape(inputs)[:-2]
            merged = ops.reshape(inputs, (*leading, heads * head_dim))
        if not self.built:
            self.build(inputs.shape)
        return super().__call__(merged, *args, **kwargs)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-2], self.units)
