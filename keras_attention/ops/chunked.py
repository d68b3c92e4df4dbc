"""Memory-efficient attention: online softmax over blocks of keys.

The forward pass walks, for each block of `chunk_size` queries, over the keys
in blocks of `chunk_size`, keeping per query a running maximum `m`, a running
normalizer `l` and a running weighted sum of values, so that no `(T, S)` score
matrix ever exists: the scores take O(chunk_size^2) memory per head. The
backward pass is written by hand (the FlashAttention recurrence): it recomputes
each block's weights from the saved log-sum-exp instead of storing them, so it
is memory-efficient too.

References:
    - [Rabe & Staats, 2021. Self-attention Does Not Need O(n^2) Memory](
      https://arxiv.org/abs/2112.05682)
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
"""

from keras import backend, ops

# A finite stand-in for -inf, safe in float32 (the compute dtype here).
_NEG = -1e30


def _rank4_mask(mask):
    while len(mask.shape) < 4:
        mask = ops.expand_dims(mask, 0)
    return mask


def chunked_attention(
    query,
    key,
    value,
    mask,
    *,
    is_causal,
    scale,
    chunk_size,
    sliding_window=None,
    alibi_slopes=None,
):
    """Blockwise `softmax(scale * Q K^T) V` in the `(B, T, N, H)` layout.

    `mask` (boolean, broadcastable to `(B, N, T, S)`), `is_causal`,
    `sliding_window` and `alibi_slopes` (NumPy `(N,)`) behave as in
    `dot_product_attention`. Rows with no key to attend give zeros.

    Queries and keys are both cut into blocks of `chunk_size`, so that each
    step works on a `(chunk_size, chunk_size)` tile of scores per head, small
    enough to stay in the CPU's cache, whatever T. Tiles that no query of
    theirs may see are never computed: with `is_causal` those above the
    diagonal (half of the work at long lengths), with a `sliding_window` of w
    those wholly farther than w - 1 positions from the diagonal, so that the
    work grows as T * w instead of T * S.
    """
    out_dtype = backend.standardize_dtype(query.dtype)
    compute_dtype = "float64" if out_dtype == "float64" else "float32"

    def to_heads_first(x):
        return ops.transpose(ops.cast(x, compute_dtype), (0, 2, 1, 3))

    batch, q_len, heads, depth = ops.shape(query)
    key_len, value_depth = ops.shape(key)[1], ops.shape(value)[3]
    num_query_blocks = (q_len + chunk_size - 1) // chunk_size
    num_key_blocks = (key_len + chunk_size - 1) // chunk_size
    q_pad = num_query_blocks * chunk_size - q_len
    k_pad = num_key_blocks * chunk_size - key_len

    tile_mask = None
    if mask is not None:
        tile_mask = _rank4_mask(ops.cast(mask, "bool"))
        rows_pad = 0 if tile_mask.shape[-2] == 1 else q_pad
        cols_pad = 0 if tile_mask.shape[-1] == 1 else k_pad
        tile_mask = ops.pad(
            tile_mask,
            [[0, 0], [0, 0], [0, rows_pad], [0, cols_pad]],
            constant_values=False,
        )
    offsets = ops.arange(chunk_size)
    slopes = None
    if alibi_slopes is not None:
        slopes = ops.cast(ops.convert_to_tensor(alibi_slopes), compute_dtype)
        slopes = slopes[None, :, None, None]

    # How far a query may look back and ahead, in positions (None: no limit).
    reach_back = None if sliding_window is None else sliding_window - 1
    reach_ahead = 0 if is_causal else reach_back

    def blocks_within(block, before, after, num_blocks):
        """The blocks `[first, stop)` of the other axis that hold the
        positions from `before` positions ahead of `block`'s first to `after`
        past its last (None: unbounded on that side)."""
        start = block * chunk_size
        first = 0 if before is None else ops.maximum(start - before, 0) // chunk_size
        if after is None:
            return first, num_blocks
        last = start + chunk_size - 1 + after
        return first, ops.minimum(last // chunk_size + 1, num_blocks)

    def key_blocks_of(query_block):
        """The key blocks `[first, stop)` the queries of `query_block` may see."""
        return blocks_within(query_block, reach_back, reach_ahead, num_key_blocks)

    def query_blocks_of(key_block):
        """The query blocks `[first, stop)` that may see `key_block`."""
        return blocks_within(key_block, reach_ahead, reach_back, num_query_blocks)

    def tile(q_scaled, k, v, query_block, key_block):
        """Scores, validity and the key/value blocks of one tile."""
        q_start, k_start = query_block * chunk_size, key_block * chunk_size
        q_tile = ops.slice(
            q_scaled, (0, 0, q_start, 0), (batch, heads, chunk_size, depth)
        )
        k_tile = ops.slice(k, (0, 0, k_start, 0), (batch, heads, chunk_size, depth))
        v_tile = ops.slice(
            v, (0, 0, k_start, 0), (batch, heads, chunk_size, value_depth)
        )
        scores = ops.einsum("bnth,bnch->bntc", q_tile, k_tile)
        rows = (q_start + offsets)[:, None]
        cols = (k_start + offsets)[None, :]
        if slopes is not None:
            distance = ops.cast(ops.abs(rows - cols), compute_dtype)
            scores = scores - slopes * distance[None, None]
        valid = ops.less(cols, key_len)
        if is_causal:
            valid = ops.logical_and(valid, ops.greater_equal(rows, cols))
        if sliding_window is not None:
            valid = ops.logical_and(
                valid, ops.less(ops.abs(rows - cols), sliding_window)
            )
        valid = valid[None, None]
        if tile_mask is not None:
            shape = ops.shape(tile_mask)
            start = [0, 0, 0, 0]
            size = list(shape)
            if tile_mask.shape[-2] != 1:
                start[2], size[2] = q_start, chunk_size
            if tile_mask.shape[-1] != 1:
                start[3], size[3] = k_start, chunk_size
            valid = ops.logical_and(valid, ops.slice(tile_mask, start, size))
        return q_tile, scores, valid, k_tile, v_tile

    def forward(q_scaled, k, v):
        def query_step(i, carry):
            output, log_sum_exp = carry

            def key_step(j, state):
                acc, running_max, normalizer = state
                _, scores, valid, _, v_tile = tile(q_scaled, k, v, i, j)
                scores = ops.where(valid, scores, _NEG)
                new_max = ops.maximum(running_max, ops.max(scores, axis=-1))
                weights = ops.where(valid, ops.exp(scores - new_max[..., None]), 0.0)
                correction = ops.exp(running_max - new_max)
                normalizer = normalizer * correction + ops.sum(weights, axis=-1)
                acc = acc * correction[..., None] + ops.einsum(
                    "bntc,bncd->bntd", weights, v_tile
                )
                return acc, new_max, normalizer

            init = (
                ops.zeros((batch, heads, chunk_size, value_depth), compute_dtype),
                ops.full((batch, heads, chunk_size), _NEG, compute_dtype),
                ops.zeros((batch, heads, chunk_size), compute_dtype),
            )
            acc, running_max, normalizer = ops.fori_loop(
                *key_blocks_of(i), key_step, init
            )
            has_keys = ops.greater(normalizer, 0.0)
            safe = ops.where(has_keys, normalizer, 1.0)
            start = i * chunk_size
            output = ops.slice_update(output, (0, 0, start, 0), acc / safe[..., None])
            log_sum_exp = ops.slice_update(
                log_sum_exp, (0, 0, start), running_max + ops.log(safe)
            )
            return output, log_sum_exp

        padded = num_query_blocks * chunk_size
        init = (
            ops.zeros((batch, heads, padded, value_depth), compute_dtype),
            ops.zeros((batch, heads, padded), compute_dtype),
        )
        return ops.fori_loop(0, num_query_blocks, query_step, init)

    def backward(q_scaled, k, v, output, log_sum_exp, grad_output):
        # Each tile's weights are recomputed from the log-sum-exp, so nothing
        # of size (T, S) is stored between the passes.
        delta = ops.sum(grad_output * output, axis=-1)

        def key_step(j, carry):
            grad_q, grad_k, grad_v = carry

            def query_step(i, state):
                grad_q, grad_k_tile, grad_v_tile = state
                q_tile, scores, valid, k_tile, v_tile = tile(q_scaled, k, v, i, j)
                start = (0, 0, i * chunk_size, 0)
                rows = (batch, heads, chunk_size)
                lse = ops.slice(log_sum_exp, start[:3], rows)
                d = ops.slice(delta, start[:3], rows)
                g_out = ops.slice(grad_output, start, (*rows, value_depth))
                weights = ops.where(valid, ops.exp(scores - lse[..., None]), 0.0)
                grad_v_tile = grad_v_tile + ops.einsum(
                    "bntc,bntd->bncd", weights, g_out
                )
                grad_weights = ops.einsum("bntd,bncd->bntc", g_out, v_tile)
                grad_scores = weights * (grad_weights - d[..., None])
                grad_k_tile = grad_k_tile + ops.einsum(
                    "bntc,bnth->bnch", grad_scores, q_tile
                )
                grad_q_tile = ops.slice(grad_q, start, (*rows, depth))
                grad_q = ops.slice_update(
                    grad_q,
                    start,
                    grad_q_tile + ops.einsum("bntc,bnch->bnth", grad_scores, k_tile),
                )
                return grad_q, grad_k_tile, grad_v_tile

            tiles = (
                ops.zeros((batch, heads, chunk_size, depth), compute_dtype),
                ops.zeros((batch, heads, chunk_size, value_depth), compute_dtype),
            )
            grad_q, grad_k_tile, grad_v_tile = ops.fori_loop(
                *query_blocks_of(j), query_step, (grad_q, *tiles)
            )
            start = (0, 0, j * chunk_size, 0)
            grad_k = ops.slice_update(grad_k, start, grad_k_tile)
            grad_v = ops.slice_update(grad_v, start, grad_v_tile)
            return grad_q, grad_k, grad_v

        init = (ops.zeros_like(q_scaled), ops.zeros_like(k), ops.zeros_like(v))
        return ops.fori_loop(0, num_key_blocks, key_step, init)

    def from_heads_first(x, length, like):
        x = ops.transpose(x[:, :, :length], (0, 2, 1, 3))
        return ops.cast(x, backend.standardize_dtype(like.dtype))

    scale_t = ops.cast(scale, compute_dtype)
    query_padding = [[0, 0], [0, 0], [0, q_pad], [0, 0]]
    key_padding = [[0, 0], [0, 0], [0, k_pad], [0, 0]]

    @ops.custom_gradient
    def attend(query, key, value):
        # Everything differentiable is derived from the arguments: JAX does not
        # allow a custom gradient to close over traced inputs.
        q_scaled = ops.pad(to_heads_first(query) * scale_t, query_padding)
        k = ops.pad(to_heads_first(key), key_padding)
        v = ops.pad(to_heads_first(value), key_padding)
        output, log_sum_exp = forward(q_scaled, k, v)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            grad_output = ops.pad(to_heads_first(upstream), query_padding)
            grad_q, grad_k, grad_v = backward(
                q_scaled, k, v, output, log_sum_exp, grad_output
            )
            return (
                from_heads_first(grad_q * scale_t, q_len, query),
                from_heads_first(grad_k, key_len, key),
                from_heads_first(grad_v, key_len, value),
            )

        return from_heads_first(output, q_len, query), grad

    # Copies, so that a custom gradient sees tensors even when handed
    # variables (TensorFlow would otherwise ask for their gradients too).
    return attend(ops.copy(query), ops.copy(key), ops.copy(value))
