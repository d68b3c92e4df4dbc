"""`MultiHeadAttention`, a drop-in for Keras': its constructor, config and
properties (and `check_key_value_heads`). Its bases, in the private modules
beside this one, hold the rest: `AttentionCall` (`call`, as the steps of one
call), `EinsumProjections` (`build`, the projections, the output shapes),
`AttentionPaths` (`_compute_attention` and its paths), `KeyValueCaching` (the
cache methods), `KerasConversion` (`from_keras`, `load_keras_weights`)."""

from operator import attrgetter

import keras
from keras import constraints, initializers, regularizers

from keras_attention._checks import (
    check_positive_int,
    check_rate,
)
from keras_attention.layers import _attention_options
from keras_attention.layers._attention_call import AttentionCall
from keras_attention.layers._attention_paths import AttentionPaths
from keras_attention.layers._keras_conversion import KerasConversion
from keras_attention.layers._key_value_caching import KeyValueCaching
from keras_attention.layers._projections import (
    EinsumProjections,
    as_output_dims,
    check_size_argument,
)
from keras_attention.layers.key_value_cache import (
    check_cache_dtype,
)
from keras_attention.layers.positions import ATTENTION_POSITIONS, positions_from_alias
from keras_attention.utils import keras_internals


def check_key_value_heads(num_heads, num_key_value_heads):
    """Raises a ValueError for key/value heads that do not divide the query
    heads."""
    check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
    if num_key_value_heads is not None and num_heads % num_key_value_heads:
        raise ValueError(
            "`num_key_value_heads` must divide `num_heads` (each group of "
            f"query heads shares one key/value head); received num_heads="
            f"{num_heads}, num_key_value_heads={num_key_value_heads}."
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadAttention(
    keras_internals.KeepsKerasMasksWhenCast,
    AttentionCall,
    EinsumProjections,
    AttentionPaths,
    KeyValueCaching,
    KerasConversion,
    keras.layers.MultiHeadAttention,
):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    `MultiHead(Q, K, V) = Concat(head_1..head_h) W^O` with
    `head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V`.

    A subclass of `keras.layers.MultiHeadAttention` (as keras-hub's
    `CachedMultiHeadAttention` is) with Keras' constructor and call arguments,
    config, weights and sublayers (`_query_dense`, `_key_dense`,
    `_value_dense`, `_gate_dense`, `_output_dense`, which quantization, LoRA,
    constraints and dtype-policy maps reach); `_compute_attention` stays the
    place to customise the attention. It builds and calls itself, so every
    argument works on every Keras release from 3.11 (`sliding_window` and
    `use_gate` included, which Keras gained later). On top of Keras it adds:

    - **incremental decoding**: `cache` `(B, 2, S, num_key_value_heads,
      key_dim)` and `cache_update_index`, as in keras-hub's
      `CachedMultiHeadAttention`: with an index, the keys/values of the new
      query steps are written into the cache at that position; without one,
      the cache is used as the precomputed keys/values (cross-attention over
      a fixed encoder output). With a cache the call returns
      `(output, cache)` (or `(output, scores, cache)`). With
      `cache_dtype="int8"` the cache is stored quantized, about 4x smaller
      than float32.
    - **memory-efficient attention** for long sequences (online softmax over
      tiles of queries and keys, the tiles above a causal diagonal or outside
      a sliding window skipped, forward and backward, on every backend and on
      CPU): always with `chunk_size=N` or `flash_attention=True`, and by
      itself from 1024 x 1024 scores (queries x keys), 512 x 512 with a
      causal mask or a window, where it is measured to be faster, unless
      `flash_attention=False` (or `keras.config.disable_flash_attention()`)
      or the weights are returned (`return_attention_scores=True`). On a GPU
      a fused kernel serves first wherever one computes the call. The choice
      is `layers.attention_plan.plan_attention`, then the op's
      `ops.plan.plan_kernel`.
    - **attention dropout inside every path**: in training, `dropout` drops
      the normalized weights inside the op (the standard and chunked paths,
      the Pallas kernel; PyTorch's SDPA with its own generator), so training
      keeps a fused or memory-efficient path. A subclass's
      `_compute_attention` and several attention axes still drop the
      weights out as Keras does.
    - **fully masked query rows get zero weights**: a query that may attend
      to nothing (a padded position under the query's mask, a row of
      `attention_mask` all False) attends to nothing, so its output is the
      output projection's bias. This is the one place the layer differs from
      Keras', which gives such a row the mean of the values (its fused path)
      or attends it as if it were not masked (when it returns the weights);
      the output's Keras mask marks the row as padding in both.
    - **masked keys and values are never read**: padding or cache slots
      holding NaN or inf reach neither the output nor the gradients.
    - a 2-D `(T, S)` or 4-D `(B, num_heads, T, S)` `attention_mask` as well
      as Keras' `(B, T, S)`.
    - **packed sequences**: `segment_ids` (JAX's `SegmentIds` convention)
      keep each query within its document, on both paths; the chunked path
      skips the tiles between documents, and no `(T, S)` mask is built
      unless the weights are needed.
    - **grouped-query and multi-query attention** with `num_key_value_heads`
      below `num_heads` (see `GroupedQueryAttention`); the cache holds only
      the key/value heads.
    - **positions inside attention**: `attention_positions="rotary"` (RoPE)
      or `"alibi"` (on both paths and with the cache) or `"relative"` (T5's
      bucketed bias, a table of this layer, a score mod on both paths), and an
      `attention_bias` call argument for any `(B, N, T, S)` bias, such as
      one `RelativePositionBias` shared by the blocks of a stack as in T5.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        value_dim: size of each head for value (defaults to `key_dim`).
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        output_shape: shape of the output besides the batch and attention axes
            (an int or a tuple; defaults to the query's last axis).
        attention_axes: axes to attend over (default: every axis but the batch
            and feature axes). Several axes (images, video) take the standard
            path; the chunked path, positions and the cache need one.
        sliding_window: restrict each query to keys within
            `sliding_window - 1` positions (a symmetric band, as in Keras).
        flash_attention: True forces the chunked path (and, as in Keras,
            refuses attention dropout and `return_attention_scores`); False
            forbids the automatic switch; None chooses by length.
        chunk_size: tile size of the chunked path; setting it forces the
            chunked path whenever the weights are not needed and the layer
            adds no dense bias of its own (ALiBi's or T5's with a cache).
        kernel_initializer: as for `keras.layers.EinsumDense`.
        bias_initializer: as for `keras.layers.EinsumDense`.
        kernel_regularizer: as for `keras.layers.EinsumDense`.
        bias_regularizer: as for `keras.layers.EinsumDense`.
        activity_regularizer: as for `keras.layers.EinsumDense`.
        kernel_constraint: as for `keras.layers.EinsumDense`.
        bias_constraint: as for `keras.layers.EinsumDense`.
        use_gate: gate the attention output with `sigmoid(query W^G)` before
            the output projection (as in Keras).
        seed: dropout seed.
        num_key_value_heads: heads of the key and value projections, a divisor
            of `num_heads` (default `num_heads`; 1 is multi-query attention).
        attention_positions: None, `"rotary"`, `"alibi"` or `"relative"`:
            relative positions inside attention, counted from
            `cache_update_index` with a cache (the names of
            `keras_attention.layers.positions.ATTENTION_POSITIONS`).
            `"relative"` is T5's bias with its 32 buckets up to offsets of
            128, both directions, in a table of this layer.
            `position_encoding`, the earlier name, is read as a deprecated
            alias.
        max_wavelength: the rotary embedding's longest wavelength.
        alibi_bias_max: ALiBi's slopes run from `2^(-alibi_bias_max / N)` to
            `2^(-alibi_bias_max)` (keras-hub's name and default, 8).
        cache_dtype: the storage of the decoding cache that `initial_cache`
            makes: None (the compute dtype, one tensor) or `"int8"`, a
            quantized cache (`keras_attention.layers.key_value_cache`): the pair
            `(values, scales)`, int8 values `(B, 2, S, num_key_value_heads,
            key_dim)` and one scale per row of `key_dim` values (symmetric,
            `scale = max|x| / 127`), stored in 2 bytes as an int16 code of
            `log2(scale)` in steps of 1/1024 (`(B, 2, S,
            num_key_value_heads)`; within 0.034% of the scale, like a
            float16, but an integer, which Keras' autocasting of a layer's
            float inputs leaves alone). The new keys and values are
            quantized when written at `cache_update_index` and the whole
            cache dequantized to the compute dtype when read. That is `2 *
            num_key_value_heads * (key_dim + 2)` bytes per token, against
            `2 * num_key_value_heads * key_dim * 4` in float32:
            `(key_dim + 2) / (4 * key_dim)` of it, 0.28x at `key_dim=16`,
            0.26x at 64. Each value is off by at most half a step,
            `max|row| / 254` (and the scale's 0.034%).
        scale: the scores' scale (default `1 / sqrt(key_dim)`).
        soft_cap: if set, the scaled scores `s` become `soft_cap *
            tanh(s / soft_cap)` (Gemma 2), on every path, tile by tile on the
            chunked one.
        query_norm, key_norm: layers applied to the projected queries and
            keys `(B, T, heads, key_dim)` before the rotary encoding (Qwen
            3's and Gemma 3's RMS norms); each is built, and its weights
            placed, right after its projection's.
        value_norm: a layer applied to the projected values `(B, S,
            num_key_value_heads, value_dim)` before they are cached (Gemma
            3n's and Gemma 4's RMS norms); built, and its weights placed,
            right after the value projection's.
        rotary_embedding: a rotary layer of the model's own (e.g.
            keras-hub's Llama 3.1, LongRoPE or scaled rotary), called as
            `layer(x, start_index=..., positions=...)` on the projected
            queries and keys, in place of `attention_positions`.
        output_dropout: dropout rate on the attention output, before the
            output projection (keras-hub's place; unlike `dropout` it needs
            no weights, so the memory-efficient path stays open).
        use_output_bias: whether the output projection has a bias (None:
            as `use_bias`; Qwen 2 has biases on the query, key and value
            only).
        kernel_layout: `"input_first"`, Keras' `(dim, heads, size)` query,
            key and value kernels, `"heads_first"`, Gemma's `(heads, dim,
            size)`, or `"flat"`, `keras.layers.Dense` projections with
            kernels `(dim, heads * size)` and an output kernel `(heads *
            size, output_dim)` (keras-hub's Gemma 3n, Hugging Face's
            `nn.Linear`); their int8 `quantize` and LoRA are `Dense`'s.
        use_sinks: a trainable logit per head, `sinks` `(num_heads,)`
            (zeros at first), that joins every query's softmax as one more
            key with no value (GPT-OSS; `ops.dot_product_attention`'s
            `sinks`). Computed from the log-sum-exp on every path, fused
            kernels that return it included. Needs one attention axis and
            the layer's own `_compute_attention`.
        packed_gate: gate the attention output with `sigmoid(g)` before the
            output projection, `g` packed in the query projection: its kernel
            `(dim, heads, key_dim + value_dim)` gives each head its query
            (the first `key_dim`) and `g` (the rest), as Qwen 3.5's and
            Qwen3-Next's attention does. Excludes `use_gate` (Keras' gate,
            a projection of its own).
        cache_layout: the layout of the float cache the layer makes
            (`initial_cache`) and reads: `"stacked"`, `(B, 2, S,
            num_key_value_heads, key_dim)`; `"heads_first"`, `(B, 2,
            num_key_value_heads, S, key_dim)` (keras-hub's Gemma 3n); or
            `"pair"`, keras-hub's `(keys, values)` (Gemma 3). A pair and a
            quantized cache are read whatever the option.
        values_from_keys: the values are the key projection (no value
            projection; `value` unused), normalized by `value_norm` alone,
            before the key norm and the rotary encoding (Gemma 4's global
            layers, `attention_k_eq_v`). `value_dim` must be `key_dim`.
        shares_keys_values: the layer builds no key or value projection:
            each call attends to another layer's keys and values, passed as
            `shared_keys_values` (Gemma 3n's and Gemma 4's last layers,
            `is_kv_shared_layer`). `key_norm`, `value_norm` and
            `values_from_keys` must be unset.
        **kwargs: base layer arguments. `key_dim=None` (with `value_dim`
            None) settles the head size in `build` as the query's last axis
            divided by `num_heads`, as keras-hub's models do.

    Call arguments:
        query: `(B, T, dim)` (or `(B, ..., dim)` with `attention_axes`).
        value: `(B, S, dim)`.
        key: `(B, S, dim)`, defaults to `value`.
        query_mask, value_mask, key_mask: boolean `(B, T)` / `(B, S)` masks;
            taken from the Keras masks of the inputs when not given.
        attention_mask: boolean `(T, S)`, `(B, T, S)` or
            `(B, num_heads, T, S)`, True = attend.
        return_attention_scores: also return the weights `(B, N, T, S)`.
        training: whether dropout is active.
        use_causal_mask: query `t` attends to keys `<= t` (with a cache: keys
            `<= cache_update_index + t`).
        cache: `(B, 2, S, num_key_value_heads, key_dim)` keys and values,
            or a quantized cache `(values, scales)` (`cache_dtype="int8"`:
            int8 values of that shape, int16 scale codes `(B, 2, S,
            num_key_value_heads)`), or keras-hub's pair `(keys, values)` of
            two float `(B, S, num_key_value_heads, key_dim)` tensors (Gemma
            3's layout, `initial_cache(..., layout="pair")`), or with
            `cache_layout="heads_first"` one float tensor `(B, 2,
            num_key_value_heads, S, key_dim)`; the layer reads each,
            whatever its own `cache_dtype`, and returns the cache in the
            form it got.
        cache_update_index: where the new keys/values go in the cache.
        attention_bias: float, broadcastable to `(B, num_heads, T, S)`,
            added to the scaled scores; it keeps the layer on the standard
            path.
        segment_ids: packed sequences (several documents in one row): int
            `(B, T)` ids of the document of each position, for
            self-attention (`T == S`), or a pair `(query_ids (B, T),
            key_ids (B, S))`; a query attends only to the keys with its id
            (JAX's `SegmentIds`), as if each document were run alone. A
            rotary encoding then restarts its positions at each document
            (`ops.segment_positions`); ALiBi's and T5's biases, relative
            already, need nothing more. With a `cache` the keys are the
            cache's slots, so only the pair is accepted, `key_ids` covering
            the `max_length` slots (`(B, max_length)`), and the rotary
            positions stay the absolute ones of the cache. Needs one
            attention axis.
        positions: the rotary positions of the queries and keys (with a
            cache, of the new keys), handed to the rotary encoding as given,
            in any shape it takes: `(B, T)` for the built-in one, `(B, 4,
            T)` for keras-hub's Qwen 3.5 multi-axis rotary (text and image
            axes). Default: counted from `cache_update_index`, or restarting
            at each document of `segment_ids`. Needs a rotary encoding;
            self-attention (the keys take the queries' positions).
        shared_keys_values: the keys and values of another layer, already
            normalized and rotated, in any form of `cache` (e.g. its cache,
            or what it returned with `return_keys_values=True`), attended to
            in place of this layer's own and never written. With
            `cache_update_index` (decoding) they are read as cache slots
            and the queries start at that index; without, query `t` is at
            position `t` and `key_mask`/`value_mask` `(B, S)` mask them.
            Takes no `cache`; `segment_ids` only without
            `cache_update_index` (the keys are then the call's positions,
            in the same documents). Required with
            `shares_keys_values=True`; any layer may take them.
        return_keys_values: without a `cache`, also return the keys and
            values attended to, `(B, 2, S, num_key_value_heads, key_dim)`
            (in the layer's `cache_layout`: heads first, or a pair)
            (needs `value_dim == key_dim`), for a layer sharing them; with a
            cache, the returned cache holds them.

    Returns:
        `(B, T, output_dim)`; then the weights if requested; then the updated
        cache if one was passed, else the keys and values if
        `return_keys_values`.

    Example:

    ```python
    x = keras.Input((None, 64))
    y = keras_attention.layers.MultiHeadAttention(num_heads=4, key_dim=16)(
        x, x, use_causal_mask=True
    )
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Rabe & Staats, 2021](https://arxiv.org/abs/2112.05682)
        - [Ainslie et al., 2023. GQA](https://arxiv.org/abs/2305.13245)
        - [Su et al., 2021. RoFormer](https://arxiv.org/abs/2104.09864)
        - [Press et al., 2022. ALiBi](https://arxiv.org/abs/2108.12409)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        flash_attention=None,
        chunk_size=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        num_key_value_heads=None,
        attention_positions=None,
        max_wavelength=10000,
        alibi_bias_max=8,
        cache_dtype=None,
        scale=None,
        soft_cap=None,
        query_norm=None,
        key_norm=None,
        value_norm=None,
        rotary_embedding=None,
        output_dropout=0.0,
        use_output_bias=None,
        kernel_layout="input_first",
        use_sinks=False,
        packed_gate=False,
        cache_layout="stacked",
        values_from_keys=False,
        shares_keys_values=False,
        **kwargs,
    ):
        keras_internals.require("get_keras_mask", "set_keras_mask")
        check_cache_dtype(cache_dtype)
        check_size_argument("num_heads", num_heads)
        if key_dim is not None:
            check_size_argument("key_dim", key_dim)
        if value_dim is not None:
            check_size_argument("value_dim", value_dim)
        check_rate("dropout", dropout)
        check_positive_int("sliding_window", sliding_window, allow_none=True)
        check_positive_int("chunk_size", chunk_size, allow_none=True)
        (attention_positions,) = positions_from_alias(
            kwargs,
            MultiHeadAttention.__init__,
            type(self).__name__,
            attention_positions=attention_positions,
        )
        check_key_value_heads(num_heads, num_key_value_heads)
        ATTENTION_POSITIONS.check(attention_positions)
        options = _attention_options.options_from(locals())
        _attention_options.check_options(options, attention_positions)
        _attention_options.check_gate(options, use_gate)
        if flash_attention not in (None, True, False):
            raise ValueError(
                f"`flash_attention` must be None, True or False; received "
                f"{flash_attention!r}."
            )
        dense_arguments = {
            "kernel_initializer": initializers.get(kernel_initializer),
            "bias_initializer": initializers.get(bias_initializer),
            "kernel_regularizer": regularizers.get(kernel_regularizer),
            "bias_regularizer": regularizers.get(bias_regularizer),
            "activity_regularizer": regularizers.get(activity_regularizer),
            "kernel_constraint": constraints.get(kernel_constraint),
            "bias_constraint": constraints.get(bias_constraint),
        }
        # Keras' constructor gets the arguments every Keras 3 release takes
        # (the first seven keep their place in all); those it gained later
        # (`sliding_window`, `use_gate`) are this layer's own, since it builds
        # and calls itself.
        super().__init__(
            num_heads,
            key_dim or 1,  # Keras refuses None; settled in `build` then
            value_dim,
            dropout,
            use_bias,
            output_shape,
            attention_axes,
            flash_attention=flash_attention,
            seed=seed,
            **dense_arguments,
            **kwargs,
        )
        self._dense_arguments = dense_arguments
        if key_dim is None:
            self._key_dim, self._value_dim = None, value_dim
        self._output_dims = as_output_dims(output_shape)
        self._use_gate = use_gate
        self._sliding_window = sliding_window
        # False stays False (Keras' `flash_attention or ...` turns it into
        # the global setting, None by default: the automatic choice).
        self._flash_attention = (
            keras.config.is_flash_attention_enabled()
            if flash_attention is None
            else flash_attention
        )
        self._flash_attention_argument = flash_attention
        self._chunk_size = chunk_size
        self._num_key_value_heads = num_key_value_heads or num_heads
        self._attention_positions = attention_positions
        self._max_wavelength = max_wavelength
        self._alibi_bias_max = alibi_bias_max
        self._cache_dtype = cache_dtype
        self._rotary, self._alibi_slopes, self._relative_bias = (
            ATTENTION_POSITIONS.build(
                attention_positions,
                num_heads=num_heads,
                max_wavelength=max_wavelength,
                alibi_bias_max=alibi_bias_max,
                dtype=self.dtype_policy,
            )
        )
        # Past Keras' attribute tracking until `build` (see
        # `layers._attention_options`).
        self.__dict__["_options"] = options
        if rotary_embedding is not None:
            self.__dict__["_rotary"] = rotary_embedding

    chunk_size = property(attrgetter("_chunk_size"))
    num_key_value_heads = property(attrgetter("_num_key_value_heads"))
    attention_positions = property(attrgetter("_attention_positions"))
    cache_dtype = property(attrgetter("_cache_dtype"))

    @property
    def attention_path(self):
        """How the last call attended: `"torch_sdpa"` or `"jax_cudnn"` (a
        backend's fused kernel, see `keras_attention.ops.attention_path`),
        `"chunked"`, `"standard"` (where the weights are needed too) or
        `"multi_axis"`; None before the first call. In a compiled function,
        the path of the call that was traced."""
        return self.__dict__.get("_attention_path")

    def _record_path(self, path):
        # Past Keras' attribute tracking: a string, set while tracing too.
        self.__dict__["_attention_path"] = path

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "use_gate": self._use_gate,
                "sliding_window": self._sliding_window,
                "flash_attention": self._flash_attention_argument,
                "chunk_size": self._chunk_size,
                "num_key_value_heads": self._num_key_value_heads,
                "attention_positions": self._attention_positions,
                "max_wavelength": self._max_wavelength,
                "alibi_bias_max": self._alibi_bias_max,
                "cache_dtype": self._cache_dtype,
                **_attention_options.options_config(self._options),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return super().from_config(_attention_options.deserialize_layers(config))
