"""Memory-efficient attention: online softmax over blocks of keys.

The forward pass walks, for each block of `chunk_size` queries, over the keys
in blocks of `chunk_size`, keeping per query a running maximum `m`, a running
normalizer `l` and a running weighted sum of values, so that no `(T, S)` score
matrix ever exists: the scores take O(chunk_size^2) memory per head. The
backward pass is written by hand (the FlashAttention recurrence): it recomputes
each block's weights from the saved log-sum-exp instead of storing them, so it
is memory-efficient too.

Which tiles are computed, and how, is the call's block map
(`AttentionSpec.block_map`): a tile that no query of its block may see (above
the causal diagonal, outside a sliding window, between two packed documents,
wherever `mask` or a `mask_mod` hides it whole) is never visited, as in
FlexAttention's block sparsity; a tile where every query sees every key (below
the diagonal) skips the mask; only the partial ones evaluate it.

References:
    - [Rabe & Staats, 2021. Self-attention Does Not Need O(n^2) Memory](
      https://arxiv.org/abs/2112.05682)
    - [Dao et al., 2022. FlashAttention](https://arxiv.org/abs/2205.14135)
    - [He et al., 2024. FlexAttention](https://pytorch.org/blog/flexattention/)
"""

from keras import backend, ops

from keras_attention.ops.mods import evaluate_mask_mod, evaluate_score_mod, index_grids
from keras_attention.ops.spec import FULL, PARTIAL, BlockGrid
from keras_attention.utils.backend import (
    hoist_closure,
    is_traced,
    vector_jacobian_product,
)

# A finite stand-in for -inf, safe in float32 (the compute dtype here).
_NEG = -1e30

# The tile size of `flash_attention=True` without a `chunk_size`.
DEFAULT_CHUNK_SIZE = 256


def chunked_attention(query, key, value, spec, *, chunk_size, return_lse=False):
    """Blockwise `softmax(scale * Q K^T) V` in the `(B, T, N, H)` layout of
    the call described by `spec` (an `AttentionSpec`: its dense mask, mask
    and score parts, offset and scale; no dense bias). Rows with no key to
    attend give zeros.

    Queries and keys are both cut into blocks of `chunk_size`, so that each
    step works on a `(chunk_size, chunk_size)` tile of scores per head, small
    enough to stay in the CPU's cache, whatever T. Only the tiles that the
    spec's block map does not mark empty are computed: with a causal mask
    half of them at long lengths, with a sliding window of w a band, so that
    the work grows as T * w instead of T * S. The gradients of
    `score_mod_inputs` (a trainable bias table, say) are exact: each tile's
    score function is differentiated where it is recomputed, in the
    backward pass.

    Returns:
        `(B, T, N, value_dim)`, and with `return_lse` also the log-sum-exp of
        each query's scores `(B, N, T)` in float32 (-inf for a query with no
        key).
    """
    out_dtype = backend.standardize_dtype(query.dtype)
    compute_dtype = "float64" if out_dtype == "float64" else "float32"

    def to_heads_first(x):
        return ops.transpose(ops.cast(x, compute_dtype), (0, 2, 1, 3))

    grid = BlockGrid.of(query, key, chunk_size, spec.query_offset)
    batch, heads, static_batch, static_heads = grid.heads_of
    depth = ops.shape(query)[3]
    q_len, key_len, value_depth = (
        grid.query_length,
        grid.key_length,
        ops.shape(value)[3],
    )
    num_query_blocks, num_key_blocks = grid.num_query_blocks, grid.num_key_blocks
    q_pad = num_query_blocks * chunk_size - q_len
    k_pad = num_key_blocks * chunk_size - key_len

    tile_mask = None if spec.mask is None else grid.pad_mask(spec.mask)
    offsets = ops.arange(chunk_size, dtype="int32")
    # Partial tiles are masked inside; full ones, where every query sees every
    # key, skip the mask (most of them under a causal mask at long lengths);
    # empty ones are never visited. `masked` keys the lists.
    # torch.compile traces loops in Python: a trip count read from a tensor
    # breaks its graph (3 x 3 causal tiles: 49 graphs, now 9 on Keras 3.15).
    # There every tile is visited, masked, in loops of fixed length.
    every_tile = backend.backend() == "torch" and is_traced(query)
    key_visits = query_visits = {}
    if not every_tile:
        block_map = spec.block_map(grid, tile_mask)
        kinds = {
            True: ops.equal(block_map, PARTIAL),
            False: ops.equal(block_map, FULL),
        }
        key_visits = {masked: _visit_lists(kind) for masked, kind in kinds.items()}
        query_visits = {
            masked: _visit_lists(ops.transpose(kind)) for masked, kind in kinds.items()
        }

    def loops(visits, row, num_blocks):
        """`(masked, block of step n, steps)` of each loop over the tiles of
        block `row`: first the partial tiles, then the full ones."""
        if every_tile:
            return [(True, lambda n: n, num_blocks)]
        return [
            (
                masked,
                lambda n, order=order: ops.take(order, row * num_blocks + n),
                ops.take(counts, row),
            )
            for masked, (order, counts) in visits.items()
        ]

    mask_mod, score_mod = spec.mask_mod, spec.score_mod

    def transform(raw, grids, inputs):
        """The scores after the spec's score parts."""
        if score_mod is None:
            return raw
        return evaluate_score_mod(score_mod, raw, grids, inputs)

    def tile(q_scaled, k, v, inputs, query_block, key_block, masked):
        """Scores, validity (None unmasked), index grids and the blocks of
        one tile."""
        q_start, k_start = query_block * chunk_size, key_block * chunk_size
        q_tile = ops.slice(
            q_scaled, (0, 0, q_start, 0), (batch, heads, chunk_size, depth)
        )
        k_tile = ops.slice(k, (0, 0, k_start, 0), (batch, heads, chunk_size, depth))
        v_tile = ops.slice(
            v, (0, 0, k_start, 0), (batch, heads, chunk_size, value_depth)
        )
        grids = index_grids(
            batch,
            heads,
            grid.query_positions(q_start, chunk_size),
            grid.key_positions(k_start, chunk_size),
        )
        if not masked:
            raw = ops.einsum("bnth,bnch->bntc", q_tile, k_tile)
            return q_tile, raw, None, grids, k_tile, v_tile
        valid = ops.less((k_start + offsets)[None, None, None, :], key_len)
        if tile_mask is not None:
            shape = ops.shape(tile_mask)
            start = [0, 0, 0, 0]
            size = list(shape)
            if tile_mask.shape[-2] != 1:
                start[2], size[2] = q_start, chunk_size
            if tile_mask.shape[-1] != 1:
                start[3], size[3] = k_start, chunk_size
            valid = ops.logical_and(valid, ops.slice(tile_mask, start, size))
        if mask_mod is not None:
            expected = (static_batch, static_heads, chunk_size, chunk_size)
            valid = ops.logical_and(valid, evaluate_mask_mod(mask_mod, grids, expected))
        # A key no query of the tile sees gets weight 0, but `0 * NaN` is
        # NaN in `P V`, `dS K` and `dO V^T`: zeroed, NaN or inf there reaches
        # no output and no gradient (a full tile's keys are all seen).
        seen = ops.any(valid, axis=2)[..., None]
        k_tile = ops.where(seen, k_tile, 0.0)
        v_tile = ops.where(seen, v_tile, 0.0)
        raw = ops.einsum("bnth,bnch->bntc", q_tile, k_tile)
        return q_tile, raw, valid, grids, k_tile, v_tile

    dropout = bool(spec.dropout_rate)
    batch_index = ops.arange(batch, dtype="int32")[:, None, None, None]
    head_index = ops.arange(heads, dtype="int32")[None, :, None, None]

    def dropout_scale(query_block, key_block):
        """Dropout's factors of one tile, `(B, N, chunk, chunk)`: drawn
        again from the seed and the tile's positions, the same in the
        forward and the backward pass and as the standard path's."""
        return spec.dropout_scale(
            batch_index,
            head_index,
            (query_block * chunk_size + offsets)[:, None],
            (key_block * chunk_size + offsets)[None, :],
            heads,
            q_len,
        )

    def forward(q_scaled, k, v, inputs):
        def query_step(i, carry):
            output, log_sum_exp = carry

            def key_step(masked, block_of):
                def step(n, state):
                    acc, running_max, normalizer = state
                    j = block_of(n)
                    _, raw, valid, grids, _, v_tile = tile(
                        q_scaled, k, v, inputs, i, j, masked
                    )
                    scores = transform(raw, grids, inputs)
                    if masked:
                        scores = ops.where(valid, scores, _NEG)
                    # `amax`: Keras' `max` on PyTorch breaks torch.compile's
                    # graph (it reads the result's `.values`).
                    new_max = ops.maximum(running_max, ops.amax(scores, axis=-1))
                    weights = ops.exp(scores - new_max[..., None])
                    if masked:
                        weights = ops.where(valid, weights, 0.0)
                    correction = ops.exp(running_max - new_max)
                    normalizer = normalizer * correction + ops.sum(weights, axis=-1)
                    if dropout:  # after the normalizer: normalized weights drop
                        weights = weights * ops.cast(dropout_scale(i, j), compute_dtype)
                    acc = acc * correction[..., None] + ops.einsum(
                        "bntc,bncd->bntd", weights, v_tile
                    )
                    return acc, new_max, normalizer

                return step

            state = (
                ops.zeros((batch, heads, chunk_size, value_depth), compute_dtype),
                ops.full((batch, heads, chunk_size), _NEG, compute_dtype),
                ops.zeros((batch, heads, chunk_size), compute_dtype),
            )
            for masked, block_of, steps in loops(key_visits, i, num_key_blocks):
                state = ops.fori_loop(0, steps, key_step(masked, block_of), state)
            acc, running_max, normalizer = state
            has_keys = ops.greater(normalizer, 0.0)
            safe = ops.where(has_keys, normalizer, 1.0)
            start = i * chunk_size
            output = ops.slice_update(output, (0, 0, start, 0), acc / safe[..., None])
            log_sum_exp = ops.slice_update(
                log_sum_exp,
                (0, 0, start),
                ops.where(has_keys, running_max + ops.log(safe), _NEG),
            )
            return output, log_sum_exp

        padded = num_query_blocks * chunk_size
        init = (
            ops.zeros((batch, heads, padded, value_depth), compute_dtype),
            ops.zeros((batch, heads, padded), compute_dtype),
        )
        return ops.fori_loop(0, num_query_blocks, query_step, init)

    def backward(q_scaled, k, v, inputs, output, log_sum_exp, grad_output, grad_lse):
        # Each tile's weights are recomputed from the log-sum-exp, so nothing
        # of size (T, S) is stored between the passes. A gradient reaching
        # the log-sum-exp adds `weights * grad_lse` to the scores' gradient.
        delta = ops.sum(grad_output * output, axis=-1) - grad_lse

        def key_step(j, carry):
            grad_q, grad_k, grad_v, grad_inputs = carry

            def query_step(masked, block_of):
                def step(n, state):
                    grad_q, grad_k_tile, grad_v_tile, grad_inputs = state
                    i = block_of(n)
                    q_tile, raw, valid, grids, k_tile, v_tile = tile(
                        q_scaled, k, v, inputs, i, j, masked
                    )
                    start = (0, 0, i * chunk_size, 0)
                    rows = (batch, heads, chunk_size)
                    lse = ops.slice(log_sum_exp, start[:3], rows)
                    d = ops.slice(delta, start[:3], rows)
                    g_out = ops.slice(grad_output, start, (*rows, value_depth))

                    def scores_of(raw, *inputs):
                        return transform(raw, grids, inputs)

                    scores = scores_of(raw, *inputs)
                    weights = ops.exp(scores - lse[..., None])
                    if masked:
                        weights = ops.where(valid, weights, 0.0)
                    # With dropout M / (1 - r): dV = (P M)^T dO, dP = (dO V^T) M;
                    # dS = P (dP - delta) with delta from the dropped output.
                    dropped = weights
                    if dropout:
                        factor = ops.cast(dropout_scale(i, j), compute_dtype)
                        dropped = weights * factor
                    grad_v_tile = grad_v_tile + ops.einsum(
                        "bntc,bntd->bncd", dropped, g_out
                    )
                    grad_weights = ops.einsum("bntd,bncd->bntc", g_out, v_tile)
                    if dropout:
                        grad_weights = grad_weights * factor
                    grad_scores = weights * (grad_weights - d[..., None])
                    if score_mod is not None:
                        _, grads = vector_jacobian_product(
                            scores_of, (raw, *inputs), grad_scores
                        )
                        grad_scores = grads[0]
                        grad_inputs = tuple(
                            total + ops.cast(g, total.dtype)
                            for total, g in zip(grad_inputs, grads[1:], strict=True)
                        )
                    grad_k_tile = grad_k_tile + ops.einsum(
                        "bntc,bnth->bnch", grad_scores, q_tile
                    )
                    grad_q_tile = ops.slice(grad_q, start, (*rows, depth))
                    grad_q = ops.slice_update(
                        grad_q,
                        start,
                        grad_q_tile
                        + ops.einsum("bntc,bnch->bnth", grad_scores, k_tile),
                    )
                    return grad_q, grad_k_tile, grad_v_tile, grad_inputs

                return step

            state = (
                grad_q,
                ops.zeros((batch, heads, chunk_size, depth), compute_dtype),
                ops.zeros((batch, heads, chunk_size, value_depth), compute_dtype),
                grad_inputs,
            )
            for masked, block_of, steps in loops(query_visits, j, num_query_blocks):
                state = ops.fori_loop(0, steps, query_step(masked, block_of), state)
            grad_q, grad_k_tile, grad_v_tile, grad_inputs = state
            start = (0, 0, j * chunk_size, 0)
            grad_k = ops.slice_update(grad_k, start, grad_k_tile)
            grad_v = ops.slice_update(grad_v, start, grad_v_tile)
            return grad_q, grad_k, grad_v, grad_inputs

        init = (
            ops.zeros_like(q_scaled),
            ops.zeros_like(k),
            ops.zeros_like(v),
            tuple(ops.zeros_like(x) for x in inputs),
        )
        return ops.fori_loop(0, num_key_blocks, key_step, init)

    def from_heads_first(x, length, like):
        x = ops.transpose(x[:, :, :length], (0, 2, 1, 3))
        return ops.cast(x, backend.standardize_dtype(like.dtype))

    scale_t = ops.cast(spec.scale, compute_dtype)
    query_padding = [[0, 0], [0, 0], [0, q_pad], [0, 0]]
    key_padding = [[0, 0], [0, 0], [0, k_pad], [0, 0]]

    @ops.custom_gradient
    def attend(query, key, value, *inputs):
        # Everything differentiable is derived from the arguments: JAX does not
        # allow a custom gradient to close over traced inputs.
        q_scaled = ops.pad(to_heads_first(query) * scale_t, query_padding)
        k = ops.pad(to_heads_first(key), key_padding)
        v = ops.pad(to_heads_first(value), key_padding)
        output, log_sum_exp = forward(q_scaled, k, v, inputs)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            upstream = ops.cast(upstream, compute_dtype)
            if return_lse:
                grad_lse = upstream[..., value_depth]
                upstream = upstream[..., :value_depth]
                grad_lse = ops.pad(
                    ops.transpose(grad_lse, (0, 2, 1)), query_padding[:3]
                )
            else:
                grad_lse = ops.zeros_like(log_sum_exp)
            grad_output = ops.pad(to_heads_first(upstream), query_padding)
            grad_q, grad_k, grad_v, grad_inputs = backward(
                q_scaled, k, v, inputs, output, log_sum_exp, grad_output, grad_lse
            )
            return (
                from_heads_first(grad_q * scale_t, q_len, query),
                from_heads_first(grad_k, key_len, key),
                from_heads_first(grad_v, key_len, value),
                *(
                    ops.cast(g, backend.standardize_dtype(x.dtype))
                    for g, x in zip(grad_inputs, inputs, strict=True)
                ),
            )

        result = from_heads_first(output, q_len, query)
        if return_lse:
            # One output, so that every backend's custom gradient takes it:
            # the log-sum-exp rides along as one more feature of the values.
            lse = ops.cast(
                ops.transpose(log_sum_exp, (0, 2, 1))[:, :q_len], compute_dtype
            )
            result = ops.concatenate(
                [ops.cast(result, compute_dtype), lse[..., None]], axis=-1
            )
        return result, grad

    # Copies, so that a custom gradient sees tensors even when handed
    # variables (TensorFlow would otherwise ask for their gradients too).
    inputs = tuple(ops.copy(ops.convert_to_tensor(x)) for x in spec.score_mod_inputs)
    if score_mod is not None:
        # What the mod reads from its closure and is differentiated becomes
        # one more input (JAX), or is refused with a clear error.
        example = index_grids(
            batch,
            heads,
            grid.query_positions(0, chunk_size),
            grid.key_positions(0, chunk_size),
        )
        scores = ops.zeros((batch, heads, chunk_size, chunk_size), compute_dtype)
        score_mod, hoisted = hoist_closure(
            score_mod, (scores, *example, *inputs), "`score_mod`"
        )
        inputs = (*inputs, *hoisted)
    result = attend(ops.copy(query), ops.copy(key), ops.copy(value), *inputs)
    if not return_lse:
        return result
    outputs = ops.cast(result[..., :value_depth], out_dtype)
    lse = ops.transpose(result[..., value_depth], (0, 2, 1))
    lse = ops.where(ops.greater(lse, _NEG / 2), ops.cast(lse, "float32"), float("-inf"))
    return outputs, lse


def _visit_lists(visible):
    """For each row of the block mask, the visible columns first, in order
    (flattened row by row), and how many there are."""
    columns = ops.shape(visible)[1]
    index = ops.arange(columns, dtype="int32")[None, :]
    order = ops.argsort(ops.where(visible, index, index + columns), axis=1)
    counts = ops.sum(ops.cast(visible, "int32"), axis=1)
    return ops.reshape(ops.cast(order, "int32"), (-1,)), counts
