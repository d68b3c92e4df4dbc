"""Memory-efficient attention: online softmax over blocks of keys.

The forward pass walks over the keys in blocks of `chunk_size`, keeping per
query a running maximum `m`, a running normalizer `l` and a running weighted sum
of values, so that no `(T, S)` score matrix ever exists: memory is
O(T * chunk_size). The backward pass is written by hand (the FlashAttention
recurrence): it recomputes each block's weights from the saved log-sum-exp
instead of storing them, so it is memory-efficient too.

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


def chunked_attention(query, key, value, mask, is_causal, scale, chunk_size):
    """Blockwise `softmax(scale * Q K^T) V` in the `(B, T, N, H)` layout.

    `mask` (boolean, broadcastable to `(B, N, T, S)`) and `is_causal` behave as
    in `dot_product_attention`. Rows with no key to attend give zeros.
    """
    out_dtype = backend.standardize_dtype(query.dtype)
    compute_dtype = "float64" if out_dtype == "float64" else "float32"

    def to_heads_first(x):
        return ops.transpose(ops.cast(x, compute_dtype), (0, 2, 1, 3))

    batch, q_len, heads, depth = ops.shape(query)
    key_len, value_depth = ops.shape(key)[1], ops.shape(value)[3]
    num_blocks = (key_len + chunk_size - 1) // chunk_size
    pad = num_blocks * chunk_size - key_len
    padding = [[0, 0], [0, 0], [0, pad], [0, 0]]

    block_mask = None
    if mask is not None:
        block_mask = _rank4_mask(ops.cast(mask, "bool"))
        if block_mask.shape[-1] != 1:
            block_mask = ops.pad(
                block_mask, [[0, 0], [0, 0], [0, 0], [0, pad]], constant_values=False
            )
    rows = ops.arange(q_len)[:, None]

    def block(q_scaled, k, v, index):
        """Scores, validity and the key/value block `index`."""
        start = index * chunk_size
        k_block = ops.slice(k, (0, 0, start, 0), (batch, heads, chunk_size, depth))
        v_block = ops.slice(
            v, (0, 0, start, 0), (batch, heads, chunk_size, value_depth)
        )
        scores = ops.einsum("bnth,bnch->bntc", q_scaled, k_block)
        cols = start + ops.arange(chunk_size)[None, :]
        valid = ops.less(cols, key_len)[None, None]
        if is_causal:
            valid = ops.logical_and(valid, ops.greater_equal(rows, cols)[None, None])
        if block_mask is not None:
            if block_mask.shape[-1] == 1:
                m_block = block_mask
            else:
                shape = ops.shape(block_mask)
                m_block = ops.slice(
                    block_mask, (0, 0, 0, start), (*shape[:3], chunk_size)
                )
            valid = ops.logical_and(valid, m_block)
        return scores, valid, k_block, v_block

    def forward(q_scaled, k, v):
        def step(index, carry):
            acc, running_max, normalizer = carry
            scores, valid, _, v_block = block(q_scaled, k, v, index)
            scores = ops.where(valid, scores, _NEG)
            new_max = ops.maximum(running_max, ops.max(scores, axis=-1))
            weights = ops.where(valid, ops.exp(scores - new_max[..., None]), 0.0)
            correction = ops.exp(running_max - new_max)
            normalizer = normalizer * correction + ops.sum(weights, axis=-1)
            acc = acc * correction[..., None] + ops.einsum(
                "bntc,bncd->bntd", weights, v_block
            )
            return acc, new_max, normalizer

        init = (
            ops.zeros((batch, heads, q_len, value_depth), compute_dtype),
            ops.full((batch, heads, q_len), _NEG, compute_dtype),
            ops.zeros((batch, heads, q_len), compute_dtype),
        )
        acc, running_max, normalizer = ops.fori_loop(0, num_blocks, step, init)
        has_keys = ops.greater(normalizer, 0.0)
        safe = ops.where(has_keys, normalizer, 1.0)
        output = acc / safe[..., None]
        log_sum_exp = running_max + ops.log(safe)
        return output, log_sum_exp

    def backward(q_scaled, k, v, output, log_sum_exp, grad_output):
        # Each block's weights are recomputed from the log-sum-exp, so nothing
        # of size (T, S) is stored between the passes.
        delta = ops.sum(grad_output * output, axis=-1)

        def step(index, carry):
            grad_q, grad_k, grad_v = carry
            scores, valid, k_block, v_block = block(q_scaled, k, v, index)
            weights = ops.where(valid, ops.exp(scores - log_sum_exp[..., None]), 0.0)
            grad_v_block = ops.einsum("bntc,bntd->bncd", weights, grad_output)
            grad_weights = ops.einsum("bntd,bncd->bntc", grad_output, v_block)
            grad_scores = weights * (grad_weights - delta[..., None])
            grad_q = grad_q + ops.einsum("bntc,bnch->bnth", grad_scores, k_block)
            grad_k_block = ops.einsum("bntc,bnth->bnch", grad_scores, q_scaled)
            start = (0, 0, index * chunk_size, 0)
            grad_k = ops.slice_update(grad_k, start, grad_k_block)
            grad_v = ops.slice_update(grad_v, start, grad_v_block)
            return grad_q, grad_k, grad_v

        init = (ops.zeros_like(q_scaled), ops.zeros_like(k), ops.zeros_like(v))
        return ops.fori_loop(0, num_blocks, step, init)

    def from_heads_first(x, length, like):
        x = ops.transpose(x[:, :, :length], (0, 2, 1, 3))
        return ops.cast(x, backend.standardize_dtype(like.dtype))

    scale_t = ops.cast(scale, compute_dtype)

    @ops.custom_gradient
    def attend(query, key, value):
        # Everything differentiable is derived from the arguments: JAX does not
        # allow a custom gradient to close over traced inputs.
        q_scaled = to_heads_first(query) * scale_t
        k = ops.pad(to_heads_first(key), padding)
        v = ops.pad(to_heads_first(value), padding)
        output, log_sum_exp = forward(q_scaled, k, v)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            grad_q, grad_k, grad_v = backward(
                q_scaled, k, v, output, log_sum_exp, to_heads_first(upstream)
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
