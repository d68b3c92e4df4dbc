"""tokamax's flash attention (`pip install keras-attention[tokamax]`), the
plan's `"jax_tokamax"`: DeepMind's Mosaic GPU kernels for Hopper (sm90) and
Blackwell (sm100), forward and backward, for the calls cuDNN does not take
and tokamax computes whole (`keras_attention.ops.plan`).

The spec's parts become tokamax's own arguments: the scale, the soft cap,
and one range of keys per query row, `[k_start, k_end)`, which tokamax's
kernels use to skip tiles as well as to mask:

- the causal mask: `k_end = i + 1` (tokamax's `is_causal` alone);
- a window of `w` keys: `k_start = i - w + 1`, and `k_end = i + w` when
  it is not causal;
- packed documents whose key ids do not decrease along each batch row:
  the keys of a query's document are one run, found by binary search;
- padding over the keys where it is right padding: `k_end = length`.

Other documents (ids out of order) and other padding (left padding,
holes) take the Pallas kernel, `fallback`: both are compiled, a check in
the graph picks one per call. A query row whose range is empty (its
document has no key, every key is padding) reads one key there and gives
zeros, as on every path.

tokamax is imported here only, when a call takes this kernel. Its
implementation is named: its `"mosaic"` picks the TPU kernel wherever the
default device is not an NVIDIA GPU (a CPU that lowers for CUDA), and the
ranges need its `Mask`, which its public `dot_product_attention` does not
take; both come from tokamax's `_src`, hence the extra's exact pin.
"""

# tokamax's name of its Mosaic GPU attention (`tokamax._src.ops.attention.
# api.IMPLEMENTATIONS`), read at each call: the tests set `"xla"`, tokamax's
# reference, to check the arguments on a CPU.
IMPLEMENTATION = "mosaic_gpu"
# tokamax's Hopper forward reads the key ranges in tiles of twice its
# `block_q` queries (64 by its heuristics), which must divide the queries:
# with ranges, the queries are padded to a multiple of this.
QUERY_TILE = 128


def tokamax_attention(query, key, value, spec, fallback=None):
    """Attention of `(B, T, N, H)` queries over `(B, S, N_kv, H)` keys and
    values as `spec` describes it, with tokamax's `IMPLEMENTATION`:
    `(B, T, N, H_v)`. `spec` holds what `plan._tokamax_takes` admits;
    `fallback()` computes the call where the graph finds documents out of
    order or padding that is not right padding (required then)."""
    import jax
    import jax.numpy as jnp

    attention, mask_class = _tokamax(IMPLEMENTATION)
    batch, query_length = query.shape[:2]
    key_length = key.shape[1]
    rows = jnp.arange(query_length, dtype="int32")[None, :]
    start = jnp.zeros((batch, query_length), "int32")
    end = jnp.full((batch, query_length), key_length, "int32")
    ranges, checks = False, []
    window = spec.window
    if window is not None:
        ranges = True
        start = jnp.maximum(start, rows - (window - 1))
        if not spec.is_causal:
            end = jnp.minimum(end, rows + window)
    for part in spec.mask_parts:
        if part.kind == "documents":
            ranges = True
            query_ids, key_ids = part.data
            start = jnp.maximum(start, _search(key_ids, query_ids, "left"))
            end = jnp.minimum(end, _search(key_ids, query_ids, "right"))
            checks.append(jnp.all(key_ids[:, 1:] >= key_ids[:, :-1]))
    if spec.mask is not None:
        ranges = True
        keys = _key_mask(spec.mask, batch, key_length)
        lengths = jnp.sum(keys, axis=1, dtype="int32")
        positions = jnp.arange(key_length, dtype="int32")
        checks.append(jnp.all(keys == (positions[None, :] < lengths[:, None])))
        end = jnp.minimum(end, lengths[:, None])
    soft_cap = None
    for part in spec.score_parts:
        soft_cap = float(part.data[0])  # the plan admits the soft cap alone

    def call():
        if not ranges:
            mask = mask_class(is_causal=spec.is_causal)
            return _attend(attention, query, key, value, spec.scale, mask, soft_cap)
        causal_end = jnp.minimum(end, rows + 1) if spec.is_causal else end
        sees = causal_end > start
        padding = -query_length % QUERY_TILE
        # Padding rows (and rows that see no key) read the first key alone.
        k_start = jnp.pad(jnp.where(sees, start, 0), ((0, 0), (0, padding)))
        k_end = jnp.pad(
            jnp.where(sees, end, 1), ((0, 0), (0, padding)), constant_values=1
        )
        padded = jnp.pad(query, ((0, 0), (0, padding), (0, 0), (0, 0)))
        # tokamax's ranges are per `(batch, kv head or 1, query)`.
        mask = mask_class(
            k_start=k_start[:, None, :],
            k_end=k_end[:, None, :],
            is_causal=spec.is_causal,
        )
        output = _attend(attention, padded, key, value, spec.scale, mask, soft_cap)
        output = output[:, :query_length]
        return jnp.where(sees[:, :, None, None], output, jnp.zeros((), output.dtype))

    if not checks:
        return call()
    served = checks[0]
    for check in checks[1:]:
        served = jnp.logical_and(served, check)
    return jax.lax.cond(served, call, fallback)


def _attend(attention, query, key, value, scale, mask, soft_cap):
    return attention(
        query,
        key,
        value,
        mask=mask,
        logits_scale=float(scale),
        logits_soft_cap=soft_cap,
    )


def _search(sorted_ids, ids, side):
    """Per batch row, where each of `ids` `(B, T)` goes in `sorted_ids`
    `(B, S)`: the first (`"left"`) or one past the last (`"right"`) key of
    its document."""
    import jax
    import jax.numpy as jnp

    def row(keys, queries):
        return jnp.searchsorted(keys, queries, side=side).astype("int32")

    return jax.vmap(row)(sorted_ids, ids)


def _key_mask(mask, batch, key_length):
    """A padding mask `(B or 1, 1, 1, S)` (or `(S,)`) as bool `(B, S)`."""
    import jax.numpy as jnp

    keys = jnp.reshape(jnp.asarray(mask).astype(bool), (-1, key_length))
    return jnp.broadcast_to(keys, (batch, key_length))


def tokamax_traces():
    """Whether tokamax's kernel traces with the JAX installed, checked once
    on a small abstract call (never run): tokamax builds on Pallas' Mosaic
    GPU internals, which a newer JAX can change (tokamax 0.0.12 on JAX
    0.11.2: a TypeError from Pallas' `Mesh`, seen on an H100). Where it does
    not, a warning names the error and the plan leaves tokamax out."""
    import warnings

    import jax

    def call(query, key, value, start, end):
        attention, mask_class = _tokamax(IMPLEMENTATION)
        mask = mask_class(k_start=start, k_end=end, is_causal=True)
        return _attend(attention, query, key, value, 0.125, mask, 50.0)

    tiles = jax.ShapeDtypeStruct((1, QUERY_TILE, 1, 64), "bfloat16")
    ranges = jax.ShapeDtypeStruct((1, 1, QUERY_TILE), "int32")
    try:
        jax.eval_shape(call, tiles, tiles, tiles, ranges, ranges)
    except Exception as error:  # noqa: BLE001 - any failure means "not usable"
        first_line = str(error).splitlines()[0] if str(error) else ""
        warnings.warn(
            f"tokamax does not trace with JAX {jax.__version__} "
            f"({type(error).__name__}: {first_line}); the Pallas kernel "
            "serves the calls it would take.",
            stacklevel=2,
        )
        return False
    return True


def _tokamax(implementation):
    """tokamax's attention `implementation` and its `Mask` class, imported
    on first use. tokamax reads its absl flags on first use and would parse
    `sys.argv` (a program's own arguments) for them: they keep their
    defaults instead, unless the program parsed them itself."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    from tokamax._src.ops.attention import api, base

    return api.IMPLEMENTATIONS[implementation], base.Mask
