"""How `MultiHeadAttention` fills and reads its key/value cache.

`KeyValueCaching` holds the cache methods of the layer: `initial_cache` and
`compute_key_value_cache`, the public entry points (an empty cache for
decoding, and the keys and values of a fixed sequence such as the encoder's
output), and `_apply_cache`, the step of `call` that writes the projected keys
and values of a decoding step into the cache and reads back all it holds;
`_read_shared` reads the keys and values a layer shares from another
(`shared_keys_values`), as a cache is read, without writing them.
The cache itself (its layouts, int8 quantization, checks) is
`keras_attention.layers.key_value_cache`'s. It reads what the layer sets
(`_num_key_value_heads`, `_cache_dtype`, `key_dim`, `value_dim`,
`compute_dtype`) and uses its projections (`_project_keys_values`).
"""

from keras import ops

from keras_attention.layers.key_value_cache import (
    check_cache,
    check_cache_layout,
    empty_cache,
    read_keys_values,
    write_keys_values,
)


class KeyValueCaching:
    """`initial_cache`, `compute_key_value_cache` and `_apply_cache` of
    `MultiHeadAttention` (see the module)."""

    def initial_cache(self, batch_size, max_length, dtype=None, layout=None):
        """An empty self-attention cache
        `(B, 2, max_length, num_key_value_heads, key_dim)` in `dtype`
        (default: the layer's `cache_dtype`, else its compute dtype); with
        `"int8"` the quantized pair `(values, scales)` (see `cache_dtype`).
        With `layout="pair"`, keras-hub's layout (Gemma 3's): the pair
        `(keys, values)` of `(B, max_length, num_key_value_heads, key_dim)`
        tensors; with `layout="heads_first"` (Gemma 3n's), one tensor `(B, 2,
        num_key_value_heads, max_length, key_dim)`, which the layer reads
        where its `cache_layout` is `"heads_first"`. Those two are in `dtype`
        or the compute dtype (not quantized). `layout` defaults to the
        layer's `cache_layout`."""
        layout = layout or self._options["cache_layout"]
        check_cache_layout(layout)
        if layout != "stacked":
            dtype = dtype or self.compute_dtype
        else:
            dtype = dtype or self._cache_dtype or self.compute_dtype
        return empty_cache(
            batch_size,
            max_length,
            self._num_key_value_heads,
            self.key_dim,
            dtype,
            layout=layout,
        )

    def compute_key_value_cache(self, value, key=None):
        """Keys and values of a fixed sequence (e.g. the encoder output) as a
        cache to pass with `cache_update_index=None`."""
        return self._keys_values(value if key is None else key, value)

    def _apply_cache(self, cache, cache_update_index, key, value, positions=None):
        """`(cache, keys, values)`: the cache after writing the projected
        `key` and `value` at `cache_update_index` (unchanged without an
        index; the keys rotated at `positions` where given), and the keys and
        values it holds, in the compute dtype."""
        layout = self._options["cache_layout"]
        check_cache(
            cache, self._num_key_value_heads, self.key_dim, self.value_dim, layout
        )
        if cache_update_index is not None:
            cache = write_keys_values(
                cache,
                cache_update_index,
                *self._project_keys_values(key, value, cache_update_index, positions),
                layout,
            )
        keys, values = read_keys_values(cache, self.compute_dtype, layout)
        return cache, keys, values

    def _read_shared(self, shared_keys_values, cache, segment_ids, decoding):
        """The keys and values of another layer, `shared_keys_values` (any
        cache form), that this call attends to without projecting its own;
        a ValueError where the call cannot take them. Without a cache index
        (not `decoding`) they are the keys of the call's own positions, so
        its `segment_ids` describe them too."""
        shares = self._options["shares_keys_values"]
        if shared_keys_values is None:
            if shares:
                raise ValueError(
                    f"{type(self).__name__} was built with "
                    "`shares_keys_values=True`: each call takes the keys and "
                    "values of another layer as `shared_keys_values`."
                )
            return None
        if cache is not None or (segment_ids is not None and decoding):
            raise ValueError(
                "`shared_keys_values` are read, never written: they take "
                "neither a `cache` of this layer nor, when decoding, "
                "`segment_ids`."
            )
        layout = self._options["cache_layout"]
        check_cache(
            shared_keys_values,
            self._num_key_value_heads,
            self.key_dim,
            self.value_dim,
            layout,
        )
        return read_keys_values(shared_keys_values, self.compute_dtype, layout)

    def _keys_values(self, key, value, start_index=0):
        """The projected keys and values as cache entries `(B, 2, S,
        num_key_value_heads, key_dim)`."""
        return ops.stack(self._project_keys_values(key, value, start_index), axis=1)
