"""Shared machinery of the score-function attention layers."""

import keras
from keras import ops

from keras_attention._checks import (
    check_dims_match,
    check_rank,
    check_rate,
    static_shape,
)
from keras_attention.ops.masks import (
    causal_mask,
    hide_unattended_inputs,
    merge_masks,
)
from keras_attention.ops.random import dropout
from keras_attention.ops.softmax import masked_softmax
from keras_attention.utils import keras_internals


class ScoreAttention(keras_internals.KeepsKerasMasksWhenCast, keras.layers.Layer):
    """Base class of context attention layers defined by a score function.

    Computes `c_t = sum_i softmax_i(score(s_t, h_i)) v_i`, where subclasses
    define `score` in `compute_scores(query, key)`. The call convention is that
    of `keras.layers.Attention`, so these layers are drop-in replacements for
    it, plus a rank-2 query for a single decoder step.

    Subclasses override `build_scores(query_dim, key_dim, key_length)` to create
    their weights, `compute_scores(query, key)` returning `(B, Tq, Tv)` scores
    (or, when part of the score depends on the keys alone, `prepare_keys(key)`
    and `compute_prepared_scores(query, prepared_key)`, so that a decoder does
    that part once per source rather than once per step), and
    `check_dims(query_dim, key_dim, key_length)` to reject shapes they cannot
    score (a score of queries and keys of one size sets `same_size_hint`
    instead: the default `check_dims` then refuses other sizes, with that
    hint).

    Args:
        dropout: rate of dropout applied to the attention weights in training.
        seed: seed of the dropout.
        **kwargs: base layer arguments such as `name` and `dtype`.

    Call arguments:
        inputs: list `[query, value]` or `[query, value, key]` (key defaults to
            value). query `(B, Tq, Dq)` or `(B, Dq)` for one decoder step;
            value `(B, Tv, Dv)`; key `(B, Tv, Dk)`. As in
            `keras.layers.Attention`, extra leading axes are batch axes shared
            by all three (query `(B, ..., Tq, Dq)`, value `(B, ..., Tv, Dv)`,
            e.g. the rows of a feature map).
        mask: list `[query_mask, value_mask]` of boolean tensors `(B, Tq)` (or
            `(B,)` for a rank-2 query) and `(B, Tv)`; either may be None. Keras
            masks of the inputs are passed automatically. Padded queries give
            zero outputs; padded values get zero weight and are never read:
            NaN or inf in the keys and values there reaches no output.
        training: whether dropout is active.
        return_attention_scores: also return the attention weights (after the
            softmax) `(B, Tq, Tv)`, or `(B, Tv)` for a rank-2 query.
        use_causal_mask: forbid query `i` to attend to values after `i`
            (decoder self-attention). Not allowed with a rank-2 query.

    Returns:
        `(B, Tq, Dv)` (or `(B, Dv)` for a rank-2 query), and the weights if
        requested.
    """

    def __init__(self, dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        check_rate("dropout", dropout)
        self.dropout = dropout
        self.seed = seed
        self.supports_masking = True
        self.seed_generator = keras.random.SeedGenerator(seed) if dropout > 0 else None

    # -- hooks for subclasses ------------------------------------------------

    # Set by a score that compares queries and keys of one size: the hint of
    # the error for other sizes.
    same_size_hint = None

    def check_dims(self, query_dim, key_dim, key_length):
        """Raises ValueError for feature sizes the score cannot combine."""
        if self.same_size_hint is not None:
            check_dims_match(
                "query",
                query_dim,
                "key",
                key_dim,
                "last dimension",
                hint=self.same_size_hint,
            )

    def build_scores(self, query_dim, key_dim, key_length):
        """Creates the weights of the score function."""

    def compute_scores(self, query, key):
        """Scores `(B, Tq, Tv)` of queries `(B, Tq, Dq)` and keys `(B, Tv, Dk)`."""
        return self.compute_prepared_scores(query, self.prepare_keys(key))

    def prepare_keys(self, key):
        """The key-side work of the score (`W_2 h_i` for additive attention).

        A decoder that attends over the same keys at every step prepares them
        once with this method and scores each step with
        `compute_prepared_scores`, as Bahdanau et al. (appendix A.1.2) suggest.
        The default is the identity.
        """
        return key

    def compute_prepared_scores(self, query, prepared_key):
        """Scores `(B, Tq, Tv)` of queries against keys from `prepare_keys`.

        A subclass that only overrides `compute_scores` (and so prepares
        nothing) is scored through it.
        """
        if type(self).compute_scores is not ScoreAttention.compute_scores:
            return self.compute_scores(query, prepared_key)
        raise NotImplementedError(
            f"{type(self).__name__} must implement `compute_scores(query, key)` "
            "or `compute_prepared_scores(query, prepared_key)`."
        )

    # -- Keras API -----------------------------------------------------------

    def build(self, input_shape):
        query_shape, value_shape, key_shape = self._check_shapes(input_shape)
        self.build_scores(query_shape[-1], key_shape[-1], key_shape[-2])

    def call(
        self,
        inputs,
        mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        query, value, key = self._unpack(inputs)
        self._check_shapes([static_shape(t) for t in (query, value, key)])
        query_mask, value_mask = self._unpack_mask(mask, query, value)
        if len(query.shape) > 3:
            # Extra leading axes are batch axes: attend over the flattened
            # batch, then restore them.
            leading = ops.shape(query)[:-2]
            query, value, key, query_mask, value_mask = (
                None if t is None else _merge_leading_axes(t, keep=len(t.shape) - 2)
                for t in (query, value, key, query_mask, value_mask)
            )
            results = self.call(
                [query, value, key],
                mask=[query_mask, value_mask],
                training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask,
            )
            if not return_attention_scores:
                return _split_leading_axes(results, leading)
            return tuple(_split_leading_axes(t, leading) for t in results)
        single_step = len(query.shape) == 2
        if single_step:
            if use_causal_mask:
                raise ValueError(
                    "`use_causal_mask=True` needs a query sequence (rank 3); a "
                    "rank-2 query is a single decoder step, which attends to "
                    "every value."
                )
            query = ops.expand_dims(query, 1)
            if query_mask is not None:
                query_mask = ops.expand_dims(query_mask, 1)

        key, value = _hide_unattended(
            key, value, value_mask, ops.shape(query)[1], use_causal_mask
        )
        scores = self.compute_scores(query, key)
        outputs, weights = self._attend(
            scores, value, value_mask, training, use_causal_mask
        )
        if query_mask is not None:
            outputs = ops.where(ops.expand_dims(query_mask, -1), outputs, 0)
        if single_step:
            outputs, weights = ops.squeeze(outputs, 1), ops.squeeze(weights, 1)
        if return_attention_scores:
            return outputs, weights
        return outputs

    def attend_prepared(self, query, value, prepared_key, value_mask=None):
        """One decoder step over keys prepared once with `prepare_keys`.

        Args:
            query: `(B, Dq)`, the decoder state of this step.
            value: `(B, Tv, Dv)`.
            prepared_key: `prepare_keys(key)` for the key `(B, Tv, Dk)`.
            value_mask: boolean `(B, Tv)` or None.

        Returns:
            The context `(B, Dv)` and the weights `(B, Tv)`.
        """
        query = ops.expand_dims(query, 1)
        prepared_key, value = _hide_unattended(prepared_key, value, value_mask, 1)
        scores = self.compute_prepared_scores(query, prepared_key)
        outputs, weights = self._attend(scores, value, value_mask, training=False)
        return ops.squeeze(outputs, 1), ops.squeeze(weights, 1)

    def _attend(self, scores, value, value_mask, training, use_causal_mask=False):
        """The outputs `(B, Tq, Dv)` and weights `(B, Tq, Tv)` of `scores`:
        masked softmax over the values, dropout in training."""
        score_mask = None
        if value_mask is not None:
            score_mask = ops.expand_dims(value_mask, 1)
        if use_causal_mask:
            shape = ops.shape(scores)
            score_mask = merge_masks(score_mask, causal_mask(shape[1], shape[2]))
        weights = masked_softmax(scores, score_mask)
        if training and self.dropout > 0:
            weights = dropout(weights, self.dropout, seed=self.seed_generator)
        outputs = ops.matmul(weights, ops.cast(value, weights.dtype))
        return outputs, weights

    def compute_mask(self, inputs, mask=None):
        if mask is None or mask[0] is None:
            return None
        return ops.convert_to_tensor(mask[0])

    def compute_output_shape(self, input_shape):
        query_shape, value_shape, _ = self._check_shapes(input_shape)
        return (*query_shape[:-1], value_shape[-1])

    def compute_output_spec(
        self,
        inputs,
        mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        query, value, key = self._unpack(inputs)
        shapes = [tuple(t.shape) for t in (query, value, key)]
        output = keras.KerasTensor(
            self.compute_output_shape(shapes), dtype=self.compute_dtype
        )
        if not return_attention_scores:
            return output
        weights = keras.KerasTensor(
            (*query.shape[:-1], key.shape[-2]), dtype=self.compute_dtype
        )
        return output, weights

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout, "seed": self.seed})
        return config

    # -- helpers -------------------------------------------------------------

    def _unpack(self, inputs):
        name = type(self).__name__
        if not isinstance(inputs, (list, tuple)) or len(inputs) not in (2, 3):
            got = (
                f"a list of length {len(inputs)}"
                if isinstance(inputs, (list, tuple))
                else f"a single {type(inputs).__name__}"
            )
            raise ValueError(
                f"{name} must be called on a list of length 2 or 3, [query, "
                f"value] or [query, value, key]; received {got}."
            )
        query, value = inputs[0], inputs[1]
        key = inputs[2] if len(inputs) == 3 and inputs[2] is not None else value
        return query, value, key

    def _check_shapes(self, input_shape):
        name = type(self).__name__
        if isinstance(input_shape, (list, tuple)) and all(
            d is None or isinstance(d, int) for d in input_shape
        ):
            raise ValueError(
                f"{name} must be called on a list of length 2 or 3, [query, "
                f"value] or [query, value, key]; received a single tensor of "
                f"shape {tuple(input_shape)}."
            )
        if not isinstance(input_shape, (list, tuple)) or len(input_shape) not in (2, 3):
            raise ValueError(
                f"{name} expects a list of length 2 or 3, the shapes of [query, "
                f"value] or [query, value, key]; received {input_shape}."
            )
        query_shape = tuple(input_shape[0])
        value_shape = tuple(input_shape[1])
        key_shape = (
            tuple(input_shape[2])
            if len(input_shape) == 3 and input_shape[2] is not None
            else value_shape
        )
        query_rank = len(query_shape)
        value_rank = 3 if query_rank == 2 else query_rank
        if query_rank < 2 or len(value_shape) != value_rank:
            raise ValueError(
                "`query` must be (batch, ..., Tq, dim) (or (batch, dim) for one "
                "step) and `value` (batch, ..., Tv, dim) with the same leading "
                f"axes; received query shape {query_shape} and value shape "
                f"{value_shape}."
            )
        check_rank("key", key_shape, value_rank)
        batch_axes = range(value_rank - 2)
        for axis in batch_axes:
            what = "batch size" if axis == 0 else f"size of batch axis {axis}"
            check_dims_match(
                "query", query_shape[axis], "value", value_shape[axis], what
            )
        for axis in (*batch_axes, value_rank - 2):
            what = "sequence length" if axis == value_rank - 2 else "batch size"
            check_dims_match(
                "key",
                key_shape[axis],
                "value",
                value_shape[axis],
                f"{what} (axis {axis})",
            )
        self.check_dims(query_shape[-1], key_shape[-1], key_shape[-2])
        return query_shape, value_shape, key_shape

    def _unpack_mask(self, mask, query, value):
        if mask is None:
            return None, None
        if not isinstance(mask, (list, tuple)) or len(mask) not in (2, 3):
            raise ValueError(
                f"{type(self).__name__}: the layer mask must be a list of length "
                f"2 or 3, [query_mask, value_mask]; received {mask!r}."
            )
        query_mask, value_mask = mask[0], mask[1]
        if value_mask is None and len(mask) == 3:
            value_mask = mask[2]
        checked = []
        for name, m, tensor in (
            ("query_mask", query_mask, query),
            ("value_mask", value_mask, value),
        ):
            if m is not None:
                m = ops.convert_to_tensor(m)
                expected = static_shape(tensor)[:-1]
                got = static_shape(m)
                if len(got) != len(expected) or any(
                    g is not None and e is not None and g != e
                    for g, e in zip(got, expected, strict=True)
                ):
                    raise ValueError(
                        f"`{name}` must have shape {expected} (the shape of the "
                        f"{name.split('_')[0]} without its feature axis); "
                        f"received {got}."
                    )
                m = ops.cast(m, "bool")
            checked.append(m)
        return tuple(checked)


class WeightedScoreAttention(ScoreAttention):
    """A `ScoreAttention` whose score has kernels: shared kernel options.

    Args:
        kernel_initializer: initializer of the score's kernels.
        kernel_regularizer: regularizer of the score's kernels.
        kernel_constraint: constraint of the score's kernels.
        dropout: dropout rate on the attention weights.
        seed: dropout seed.
        **kwargs: base layer arguments.
    """

    def __init__(
        self,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        kernel_constraint=None,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def add_kernel(self, name, shape, initializer=None):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=initializer or self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "kernel_regularizer": keras.regularizers.serialize(
                    self.kernel_regularizer
                ),
                "kernel_constraint": keras.constraints.serialize(
                    self.kernel_constraint
                ),
            }
        )
        return config


def _merge_leading_axes(x, keep):
    """`(B, ..., *last keep axes)` -> `(B * ..., *last keep axes)`."""
    shape = ops.shape(x)
    return ops.reshape(x, (-1, *shape[len(shape) - keep :]))


def _split_leading_axes(x, leading):
    """The inverse of `_merge_leading_axes`: `leading` axes back in front."""
    return ops.reshape(x, (*leading, *ops.shape(x)[1:]))


def _hide_unattended(key, value, value_mask, query_length, use_causal_mask=False):
    """`key` and `value` `(B, Tv, D)` with zeros at the positions no query may
    attend to (`hide_unattended_inputs` with the value mask as `(B, 1, Tv)`)."""
    if value_mask is not None:
        value_mask = ops.expand_dims(value_mask, 1)
    return hide_unattended_inputs(
        key, value, value_mask, query_length, ops.shape(value)[1], use_causal_mask
    )
