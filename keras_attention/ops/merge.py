"""Attention over several sets of keys as one softmax: the results of
separate attention calls merged through their log-sum-exp.

A query's attention over keys split into parts `K_1, ..., K_n` (its own and
an encoder's, or the chunks of a long cache) is the weighted mean of the
attention over each part. Part `p` gives the output `o_p` (normalized within
the part) and the log-sum-exp `l_p` of its scores; the whole softmax is

    out = sum_p exp(l_p - m) o_p / sum_p exp(l_p - m),  m = max_p l_p
    lse = m + log(sum_p exp(l_p - m))

exactly, with no `(T, S)` tensor over all the keys: each part may take a
memory-efficient path or a fused kernel of its own. Subtracting `m` keeps
every exponent at most 0 (the online softmax's rescaling). A query that sees
no key of any part (every `l_p = -inf`) gives zeros and `lse = -inf`, with
zero gradients, never NaN.

References:
    - [Milakov & Gimelshein, 2018. Online normalizer calculation for
      softmax](https://arxiv.org/abs/1805.02867)
    - [Dao et al., 2023. Flash-Decoding for long-context inference](
      https://crfm.stanford.edu/2023/10/12/flashdecoding.html)
"""

from keras import ops


def merge_attention(outputs, lses):
    """The attention over the union of several sets of keys, from the
    attention over each set.

    Args:
        outputs: a sequence of attention outputs `(B, T, N, H)`, each
            normalized over its own keys (`dot_product_attention`'s output).
        lses: their log-sum-exps `(B, N, T)`, float32, -inf for a query
            that sees no key of that set (`dot_product_attention(...,
            return_lse=True)`).

    Returns:
        `(output, lse)`: the output `(B, T, N, H)` of one softmax over all
        the keys, in the first output's dtype, and its log-sum-exp
        `(B, N, T)` in float32.

    Example:

    >>> q = keras.random.normal((1, 3, 2, 4))
    >>> k1, k2 = keras.random.normal((1, 5, 2, 4)), keras.random.normal((1, 2, 2, 4))
    >>> o1, l1 = dot_product_attention(q, k1, k1, return_lse=True)
    >>> o2, l2 = dot_product_attention(q, k2, k2, return_lse=True)
    >>> merge_attention((o1, o2), (l1, l2))[0].shape
    (1, 3, 2, 4)
    """
    outputs, lses = list(outputs), [ops.cast(lse, "float32") for lse in lses]
    if not outputs or len(outputs) != len(lses):
        raise ValueError(
            "`merge_attention` takes one log-sum-exp per output, at least one; "
            f"received {len(outputs)} outputs and {len(lses)} log-sum-exps."
        )
    if len(outputs) == 1:
        return outputs[0], lses[0]
    top = lses[0]
    for lse in lses[1:]:
        top = ops.maximum(top, lse)
    # A query that sees no key has m = -inf: shift by 0 there, so that
    # exp(-inf - 0) = 0 instead of exp(-inf + inf) = NaN.
    top = ops.stop_gradient(ops.where(ops.isfinite(top), top, 0.0))
    shares = [ops.exp(lse - top) for lse in lses]
    total = shares[0]
    for share in shares[1:]:
        total = total + share
    seen = total > 0
    safe_total = ops.where(seen, total, 1.0)
    dtype = outputs[0].dtype
    merged = None
    for output, share in zip(outputs, shares, strict=True):
        weight = ops.transpose(share / safe_total, (0, 2, 1))[..., None]
        term = ops.cast(output, "float32") * weight
        merged = term if merged is None else merged + term
    lse = ops.where(seen, top + ops.log(safe_total), -float("inf"))
    return ops.cast(merged, dtype), lse
