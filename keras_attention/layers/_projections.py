"""How `MultiHeadAttention` is built, how it projects its queries and keys,
and the shapes of its outputs.

`EinsumProjections` builds the layer as Keras builds its own
`MultiHeadAttention`: one `EinsumDense` per projection (`_query_dense`,
`_key_dense`, `_gate_dense`, `_value_dense`, `_output_dense`), with Keras'
names, order and equations, so that what Keras builds on them (int8
quantization, LoRA, constraints, dtype-policy maps) works (with
`kernel_layout="flat"`, `Dense` layers: `layers._flat_dense`); and
`_build_attention`, Keras' hook, sets the attention axes, einsum equations
and attention dropout. `_project_query` and `_project_key` apply the query
and key projections, their norms and the rotary encoding (`_project_query`
also gives the output gate); `_project_value` the value projection and its
norm; `_project_keys_values` both (the values from the key projection with
`values_from_keys`). It reads what the
layer's constructor sets (`_dense_arguments`, `_output_dims`, `_use_gate`,
`_num_key_value_heads`, `_attention_positions`, `_relative_bias`,
`_rotary`).
"""

import string

import keras

from keras_attention._checks import check_attention_shapes
from keras_attention.layers._attention_options import (
    heads_first_equation,
    settle_head_size,
    split_packed_gate,
)
from keras_attention.layers._attention_positions import rotate
from keras_attention.layers._flat_dense import HeadsDense, MergedHeadsDense
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.key_value_cache import (
    cache_slots,
    cache_spec,
    keys_values_as_cache,
)
from keras_attention.ops.multi_axis import attention_equations
from keras_attention.utils.initializers import clone_initializer


class EinsumProjections:
    """`build`, `_build_attention`, `_project_query`, `_project_key`,
    `compute_output_shape` and `compute_output_spec` of `MultiHeadAttention`
    (see the module)."""

    # Where the query and key norms come in `weights`: False, right after
    # their projections (Qwen 3's order); True, after the value's (Gemma
    # 3's); or the names in their order after the value's (Gemma 4's
    # `("key", "query")`).
    _norms_after_value = False
    # True: the query, key and value norms after the output projection
    # (keras-hub's Gemma 3n, which makes its norms after its projections).
    _norms_after_output = False
    # Our projections' names ("query", "key", "value", "gate",
    # "attention_output") -> a model's (keras-hub's "q_proj", ...).
    _projection_names = {}

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_attention_shapes(query_shape, value_shape, key_shape)
        settle_head_size(self, query_shape)
        heads, kv_heads = self.num_heads, self._num_key_value_heads
        options = self._options
        # Keras' order of the weights: query, key, gate, value, output; a
        # query or key norm right after its projection, or after the value's
        # where a subclass sets `_norms_after_value` (keras-hub's Gemma 3),
        # or all norms after the output's (`_norms_after_output`, Gemma 3n).
        norms_after_value = not self._norms_after_output and self._norms_after_value
        norms_after_projections = not (norms_after_value or self._norms_after_output)
        # A layer sharing another's keys and values (`shares_keys_values`)
        # has no key or value projection; one taking its values from the
        # keys (`values_from_keys`) no value projection.
        shares = options["shares_keys_values"]
        from_keys = options["values_from_keys"]
        if from_keys and self.value_dim != self.key_dim:
            raise ValueError(
                "`values_from_keys=True` takes the values from the key "
                f"projection: `value_dim` must be `key_dim`; received "
                f"value_dim={self.value_dim}, key_dim={self.key_dim}."
            )
        # A packed gate shares the query's kernel, `(dim, heads, key_dim +
        # value_dim)`: each head's query, then its gate.
        query_size = self.key_dim + (self.value_dim if options["packed_gate"] else 0)
        self._query_dense = self._projection("query", query_shape, heads, query_size)
        if norms_after_projections:
            self._build_norm("query", query_shape, heads)
        self._key_dense = None
        if not shares:
            self._key_dense = self._projection("key", key_shape, kv_heads, self.key_dim)
        if norms_after_projections:
            self._build_norm("key", key_shape, kv_heads)
        if self._use_gate:
            self._gate_dense = self._projection(
                "gate", query_shape, heads, self.value_dim, activation="sigmoid"
            )
        self._value_dense = None
        if not (shares or from_keys):
            self._value_dense = self._projection(
                "value", value_shape, kv_heads, self.value_dim
            )
        if norms_after_value:
            order = ("query", "key") if norms_after_value is True else norms_after_value
            shapes = {"query": (query_shape, heads), "key": (key_shape, kv_heads)}
            for name in order:
                self._build_norm(name, *shapes[name])
        value_norm_shape = key_shape if from_keys else value_shape
        if not self._norms_after_output:
            self._build_norm("value", value_norm_shape, kv_heads, self.value_dim)
        self._build_attention(len(query_shape) + 1)
        if self._relative_bias is not None:
            self._relative_bias.build(query_shape, key_shape)
        output_bias = options["use_output_bias"]
        self._output_dense = self._output_projection(
            (*query_shape[:-1], heads, self.value_dim),
            self._output_dims or (query_shape[-1],),
            self.use_bias if output_bias is None else output_bias,
        )
        if self._norms_after_output:
            self._build_norm("query", query_shape, heads)
            self._build_norm("key", key_shape, kv_heads)
            self._build_norm("value", value_norm_shape, kv_heads, self.value_dim)
        if options["rotary_embedding"] is not None:
            self.rotary_embedding = options["rotary_embedding"]
        if options["use_sinks"]:
            # After the projections, as in keras-hub's GPT-OSS (Keras lists
            # a layer's own weights before its sublayers' either way). Zeros:
            # a sink of logit 0 adds 1 to the softmax's denominator.
            self.sinks = self.add_weight(
                shape=(heads,), initializer="zeros", name="sinks"
            )

    def _build_norm(self, name, input_shape, heads, size=None):
        """The `query_norm`, `key_norm` or `value_norm` option, if given, as
        an attribute of that name, built for `(B, ..., heads, size)` (default
        size `key_dim`)."""
        norm = self._options[f"{name}_norm"]
        if norm is None:
            return
        setattr(self, f"{name}_norm", norm)
        if not norm.built:  # deserialized layers come built
            norm.build((*input_shape[:-1], heads, size or self.key_dim))

    def _projection(self, name, input_shape, heads, size, activation=None):
        """`(B, ..., dim)` -> `(B, ..., heads, size)`."""
        layout = self._options["kernel_layout"]
        if layout == "flat":
            dense = self._flat_dense(
                HeadsDense, name, heads=heads, head_dim=size, activation=activation
            )
        else:
            if layout == "heads_first":
                equation = heads_first_equation(len(input_shape) - 1)
            else:
                equation = projection_equation(len(input_shape) - 1, 1, 2)
            dense = self._dense(equation, (heads, size), name, activation)
        dense.build(input_shape)
        return dense

    def _output_projection(self, input_shape, output_dims, use_bias):
        """`(B, ..., heads, value_dim)` -> `(B, ..., *output_dims)`, built."""
        if self._options["kernel_layout"] == "flat":
            if len(output_dims) != 1:
                raise ValueError(
                    "`kernel_layout='flat'` projects the output with a Dense "
                    f"layer onto one axis; received output_shape={output_dims}."
                )
            dense = self._flat_dense(
                MergedHeadsDense,
                "attention_output",
                units=output_dims[0],
                use_bias=use_bias,
            )
        else:
            dense = self._dense(
                projection_equation(len(input_shape) - 2, 2, len(output_dims)),
                output_dims,
                "attention_output",
                use_bias=use_bias,
            )
        dense.build(input_shape)
        return dense

    def _dense_arguments_cloned(self):
        # Each projection gets its own initializers: a seeded one shared by
        # several would give them all the same values.
        arguments = dict(self._dense_arguments)
        for key in ("kernel_initializer", "bias_initializer"):
            arguments[key] = clone_initializer(arguments[key])
        return arguments

    def _flat_dense(self, cls, name, use_bias=None, **kwargs):
        """A `Dense` layer `cls` of `kernel_layout="flat"` (`HeadsDense`,
        `MergedHeadsDense`) with the layer's arguments."""
        return cls(
            use_bias=self.use_bias if use_bias is None else use_bias,
            name=self._projection_names.get(name, name),
            dtype=self.dtype_policy,
            **self._dense_arguments_cloned(),
            **kwargs,
        )

    def _dense(self, equation, output_dims, name, activation=None, use_bias=None):
        use_bias = self.use_bias if use_bias is None else use_bias
        free = len(equation.split("->")[1]) - len(output_dims)
        return keras.layers.EinsumDense(
            equation,
            output_shape=(None,) * (free - 1) + tuple(output_dims),
            bias_axes=equation[-len(output_dims) :] if use_bias else None,
            activation=activation,
            name=self._projection_names.get(name, name),
            dtype=self.dtype_policy,
            **self._dense_arguments_cloned(),
        )

    def _build_attention(self, rank):
        """The attention axes, einsum equations and dropout for projected
        tensors of `rank` `(B, ..., heads, dim)` (Keras' hook, and names)."""
        axes = self.attention_axes
        if axes is None:
            axes = tuple(range(1, rank - 2))
        self._attention_axes = tuple(a if a >= 0 else rank - 1 + a for a in axes)
        if len(self._attention_axes) != 1:
            for option, value in (
                ("num_key_value_heads", self._num_key_value_heads != self.num_heads),
                ("attention_positions", self._attention_positions),
            ):
                if value:
                    raise ValueError(
                        f"`{option}` needs one attention axis; received "
                        f"attention_axes={self._attention_axes}."
                    )
        self._dot_product_equation, self._combine_equation = attention_equations(
            rank, self._attention_axes
        )
        self._dropout_layer = Dropout(
            rate=self.dropout, dtype=self.dtype_policy, seed=self.seed
        )
        rate = self._options["output_dropout"]
        if rate:
            self.output_dropout = Dropout(
                rate=rate, dtype=self.dtype_policy, seed=self.seed
            )
        if self._options["soft_cap"] is not None and len(self._attention_axes) != 1:
            raise ValueError(
                "`soft_cap` needs one attention axis; received "
                f"attention_axes={self._attention_axes}."
            )

    def _project_query(self, query, start_index=0, positions=None):
        """`(queries, gate)`: the query projection, rotated by position with
        a rotary encoding (from `start_index`, or at `positions`, as the
        rotary layer takes them, when given), and the output gate (None
        without one; `use_gate`'s projection, or the part of the query's
        that `packed_gate` packs in it)."""
        projected = self._query_dense(query)
        gate = None
        if self._options["packed_gate"]:
            projected, gate = split_packed_gate(projected, self.key_dim)
        elif self._use_gate:
            gate = self._gate_dense(query)
        if self._options["query_norm"] is not None:
            projected = self.query_norm(projected)
        return rotate(self._rotary, projected, start_index, positions), gate

    def _project_key(self, key, start_index=0, positions=None):
        """The key projection, rotated as the query's."""
        return self._normalize_and_rotate_key(
            self._key_dense(key), start_index, positions
        )

    def _normalize_and_rotate_key(self, projected, start_index=0, positions=None):
        if self._options["key_norm"] is not None:
            projected = self.key_norm(projected)
        return rotate(self._rotary, projected, start_index, positions)

    def _project_value(self, value):
        """The value projection, normalized by `value_norm` if given."""
        return self._normalize_value(self._value_dense(value))

    def _normalize_value(self, projected):
        if self._options["value_norm"] is not None:
            projected = self.value_norm(projected)
        return projected

    def _project_keys_values(self, key, value, start_index=0, positions=None):
        """The projected keys (rotated as the queries) and values; with
        `values_from_keys`, both from one key projection of `key` (the
        values normalized by `value_norm` alone, before the key norm and
        the rotation; `value` unused)."""
        if not self._options["values_from_keys"]:
            return self._project_key(key, start_index, positions), self._project_value(
                value
            )
        projected = self._key_dense(key)
        keys = self._normalize_and_rotate_key(projected, start_index, positions)
        return keys, self._normalize_value(projected)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        check_attention_shapes(query_shape, value_shape, key_shape)
        return (*query_shape[:-1], *(self._output_dims or (query_shape[-1],)))

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        return_attention_scores=False,
        cache=None,
        shared_keys_values=None,
        return_keys_values=False,
        **kwargs,
    ):
        key_shape = value.shape if key is None else key.shape
        shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        results = [keras.KerasTensor(shape, dtype=self.compute_dtype)]
        slots = cache if shared_keys_values is None else shared_keys_values
        if slots is not None:
            slots = cache_slots(slots, self._options["cache_layout"])
            key_shape = (key_shape[0], slots, *key_shape[2:])
        if return_attention_scores:
            scores_shape = self._scores_shape(query.shape, key_shape)
            results.append(keras.KerasTensor(scores_shape, dtype=self.compute_dtype))
        if cache is not None:
            results.append(cache_spec(cache))
        elif return_keys_values:
            kv_shape = (key_shape[0], key_shape[1], self._num_key_value_heads)
            kv = keras.KerasTensor((*kv_shape, self.key_dim), dtype=self.compute_dtype)
            results.append(
                cache_spec(keys_values_as_cache(kv, kv, self._options["cache_layout"]))
            )
        return results[0] if len(results) == 1 else tuple(results)

    def _scores_shape(self, query_shape, key_shape):
        """`(B, <other axes>, num_heads, <query attention axes>, <key ones>)`."""
        axes = self._attention_axes  # the same indices in inputs and projections
        others = [query_shape[i] for i in range(len(query_shape) - 1) if i not in axes]
        return (
            *others,
            self.num_heads,
            *(query_shape[a] for a in axes),
            *(key_shape[a] for a in axes),
        )


def check_size_argument(name, value):
    """Raises Keras' ValueError unless `value` is a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a "
            f"positive integer. Received: {name}={value!r}"
        )


def as_output_dims(output_shape):
    """`output_shape` as a tuple (an int is one axis), or None."""
    if not output_shape:
        return None
    if isinstance(output_shape, int):
        return (output_shape,)
    return tuple(output_shape)


def projection_equation(free_dims, bound_dims, output_dims):
    """An einsum equation keeping `free_dims` input axes, contracting the
    last `bound_dims` with the kernel and adding `output_dims` axes."""
    letters = iter(string.ascii_lowercase)
    free = "".join(next(letters) for _ in range(free_dims))
    bound = "".join(next(letters) for _ in range(bound_dims))
    output = "".join(next(letters) for _ in range(output_dims))
    return f"{free}{bound},{bound}{output}->{free}{output}"
