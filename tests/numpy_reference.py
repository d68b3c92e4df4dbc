"""Independent NumPy implementations of the seeds' formulas, for the tests."""

import numpy as np


def softmax(scores, mask=None):
    scores = np.asarray(scores, dtype="float64")
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, bool), scores.shape)
        scores = np.where(mask, scores, -np.inf)
    peak = np.max(scores, axis=-1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    exp = np.exp(scores - peak)
    total = exp.sum(axis=-1, keepdims=True)
    return np.where(total > 0, exp / np.where(total > 0, total, 1.0), 0.0)


def dot(q, k):
    return np.einsum("...td,...sd->...ts", q, k)


def general(q, k, w):
    # score(s, h) = s^T W h
    return np.einsum("...td,de,...se->...ts", q, w, k)


def additive(q, k, w1, w2, v, b=None):
    # score(s, h) = v^T tanh(W [s; h]) with W = [W1 W2]
    t, s = q.shape[-2], k.shape[-2]
    out = np.zeros(q.shape[:-2] + (t, s))
    w = np.concatenate([w1, w2], axis=0)
    for index in np.ndindex(*q.shape[:-2]):
        for i in range(t):
            for j in range(s):
                concat = np.concatenate([q[index + (i,)], k[index + (j,)]])
                hidden = concat @ w + (0 if b is None else b)
                out[index + (i, j)] = v @ np.tanh(hidden)
    return out


def cosine(q, k, beta=1.0):
    qn = q / np.linalg.norm(q, axis=-1, keepdims=True)
    kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
    return beta * dot(qn, kn)


def attend(weights, values):
    return np.einsum("...ts,...sd->...td", weights, values)


def multi_head_attention(q, k, v, mask=None, scale=None):
    """(B, T, N, H) layout, like keras.ops.dot_product_attention."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("btnh,bsnh->bnts", q, k) * scale
    weights = softmax(scores, mask)
    return np.einsum("bnts,bsnh->btnh", weights, v), weights


def sinusoidal(length, depth, max_wavelength=10000.0, start=0):
    pe = np.zeros((length, depth))
    for pos in range(length):
        for i in range(0, depth, 2):
            angle = (pos + start) / max_wavelength ** (i / depth)
            pe[pos, i] = np.sin(angle)
            if i + 1 < depth:
                pe[pos, i + 1] = np.cos(angle)
    return pe


def grouped_attention(q, k, v, bias=None, causal=False):
    """Grouped-query attention (B, T, N, H) over (B, S, N_kv, H): each run of
    N / N_kv query heads shares one key/value head, as if repeated."""
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    scores = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    mask = np.tril(np.ones(scores.shape[-2:], bool)) if causal else None
    return np.einsum("bnts,bsnh->btnh", softmax(scores, mask), v)


def alibi(num_heads, query_length, key_length, max_bias=8.0, offset=0):
    """-m_h |i - j| with the paper's slopes m_h = 2^(-max_bias (h+1) / n) for
    n a power of two (Press et al. 2022, section 3)."""
    slopes = 2.0 ** (-max_bias * np.arange(1, num_heads + 1) / num_heads)
    rows = np.arange(query_length)[:, None] + offset
    distance = np.abs(rows - np.arange(key_length)[None, :])
    return -slopes[:, None, None] * distance[None]


def t5_bucket(relative, num_buckets, max_distance, bidirectional):
    """T5's bucket of one relative position `key - query` (Raffel et al.
    2020, the reference implementation's rule), written with Python scalars."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if relative > 0:
            bucket += num_buckets
        distance = abs(relative)
    else:
        distance = max(-relative, 0)
    exact = num_buckets // 2
    if distance < exact:
        return bucket + distance
    scaled = np.log(distance / exact) / np.log(max_distance / exact)
    return bucket + min(exact + int(scaled * (num_buckets - exact)), num_buckets - 1)


def rotary(x, positions=None, max_wavelength=10000.0, scaling_factor=1.0):
    """RoFormer's rotation (Su et al., 2021, section 3.2) of `x` `(B, T, ..., d)`,
    the sequence on axis 1: at position m, feature i and feature i + d/2 (the
    pairing of keras-hub and GPT-NeoX) turn by m * theta_i, with
    theta_i = max_wavelength^(-2i/d) / scaling_factor."""
    x = np.asarray(x, dtype="float64")
    batch, length, depth = x.shape[0], x.shape[1], x.shape[-1]
    half = depth // 2
    if positions is None:
        positions = np.arange(length)
    positions = np.broadcast_to(np.asarray(positions, "float64"), (batch, length))
    out = np.empty_like(x)
    for b in range(batch):
        for t in range(length):
            for i in range(half):
                theta = max_wavelength ** (-2 * i / depth) / scaling_factor
                angle = positions[b, t] * theta
                rotation = np.array(
                    [[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]
                )
                pair = np.stack([x[b, t, ..., i], x[b, t, ..., i + half]])
                out[b, t, ..., i], out[b, t, ..., i + half] = np.tensordot(
                    rotation, pair, axes=1
                )
    return out
