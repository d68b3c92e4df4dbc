"""Attention sinks: a learned logit per head that joins every softmax.

A sink is one more key with a score `sink_n` and no value. Query `i` of head
`n` then attends with weights `exp(s_ij) / (exp(lse_i) + exp(sink_n))`,
where `lse_i` is the log-sum-exp of its scores over the keys. The output is
the one without the sink, scaled by that row's share of the mass:

    out_i = sigmoid(lse_i - sink_n) * sum_j softmax(s_i)_j v_j

so any path that returns the log-sum-exp computes the sink exactly, at the
cost of one sigmoid per query, with its gradient through the lse. A query that
sees no key (lse = -inf) gives zeros.

References:
    - [Xiao et al., 2023. Efficient Streaming Language Models with Attention
      Sinks](https://arxiv.org/abs/2309.17453)
    - [OpenAI, 2025. gpt-oss-120b & gpt-oss-20b Model Card](
      https://arxiv.org/abs/2508.10925)
"""

from keras import backend, ops


def check_sinks(sinks, num_heads):
    """`sinks` as a float32 tensor `(num_heads,)`, or None; raises a
    ValueError naming its shape otherwise."""
    if sinks is None:
        return None
    sinks = ops.convert_to_tensor(sinks)
    shape = tuple(sinks.shape)
    if shape != (num_heads,):
        raise ValueError(
            f"`sinks` must be one logit per query head, shape ({num_heads},); "
            f"received shape {shape}."
        )
    dtype = backend.standardize_dtype(sinks.dtype)
    if not backend.is_float_dtype(dtype):
        raise ValueError(f"`sinks` must be a float tensor; received dtype {dtype}.")
    return ops.cast(sinks, "float32")


def kept_share(lse, sinks):
    """`sigmoid(lse - sink)` `(B, N, T)` in float32: the share of each
    query's softmax that its keys keep beside the sink (0 where the lse is
    -inf)."""
    return ops.sigmoid(lse - sinks[None, :, None])


def apply_sinks(results, sinks, return_weights, return_lse):
    """The results of an attention call made with its log-sum-exp (the
    output, the weights where asked, the lse last) with `sinks` `(N,)`
    joined to every softmax: the output and the weights scaled by
    `kept_share`, and, where asked, the log-sum-exp over the keys and the
    sink, `sink + softplus(lse - sink)` (finite where the lse is -inf, as is
    its gradient)."""
    output, *rest = results
    lse = rest[-1]  # (B, N, T), float32
    share = kept_share(lse, sinks)
    by_row = ops.transpose(share, (0, 2, 1))[..., None]  # (B, T, N, 1)
    scaled = [output * ops.cast(by_row, output.dtype)]
    if return_weights:
        weights = rest[0]
        scaled.append(weights * ops.cast(share[..., None], weights.dtype))
    if return_lse:
        sinks = sinks[None, :, None]
        scaled.append(sinks + ops.softplus(lse - sinks))
    return scaled[0] if len(scaled) == 1 else tuple(scaled)
