import keras

from keras_attention.layers.transformer_block_base import (
    TransformerBlockBase,
    as_tuple,
)
from keras_attention.ops.masks import merge_masks


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerEncoderBlock(TransformerBlockBase):
    """One encoder layer of the Transformer: self-attention, then feed-forward.

    Each sub-layer is residual with layer normalization, after the sum as in
    the paper (post-norm) or before the sub-layer with `normalize_first=True`. The
    call arguments follow keras-hub's `TransformerEncoder`.

    Args:
        intermediate_dim: hidden size of the feed-forward network.
        num_heads: attention heads; the head size is `hidden_dim // num_heads`
            (floored, as in keras-hub: 3 heads on a width of 256 have 85
            dimensions each, and the output projection returns the width)
            unless `key_dim` is given.
        dropout: dropout on the attention weights and on each sub-layer output.
        activation: feed-forward activation.
        layer_norm_epsilon: epsilon of the layer normalizations.
        kernel_initializer: initializer of all kernels.
        bias_initializer: initializer of all biases.
        normalize_first: pre-norm instead of the paper's post-norm (keras-hub's
            name; `norm_first` is accepted from older configs).
        key_dim: head size (defaults to `hidden_dim // num_heads`, floored).
        chunk_size: force the memory-efficient attention path with this block.
        num_key_value_heads: key/value heads of the attention (grouped-query
            attention; default `num_heads`).
        attention_positions: None, `"rotary"`, `"alibi"` or `"relative"`:
            positions inside the self-attention (see `MultiHeadAttention`;
            `position_encoding`, the earlier name, is a deprecated alias).
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(B, T, hidden_dim)`.
        padding_mask: boolean `(B, T)`, True at real tokens; taken from the
            Keras mask of `inputs` when not given (as keras-hub does, which
            then ignores the Keras mask for the keys). Padded positions are
            never read as keys or values: NaN there reaches no real token's
            output.
        attention_mask: boolean `(B, T, T)`.
        training: whether dropout is active.
        return_attention_scores: also return the weights `(B, N, T, T)`.
        mask: the Keras mask of `inputs`, filled in by Keras; used as the
            padding mask when `padding_mask` is not given.
        segment_ids: packed sequences: int `(B, T)` ids of the document of
            each token; a token attends only to the tokens of its own
            document (JAX's `SegmentIds`), as if each document were encoded
            alone, on the standard and the memory-efficient path (which
            skips the tiles between documents). Positions inside attention
            restart at each document; give the same ids to the embedding
            (`TokenAndPositionEmbedding(segment_ids=...)`) for the input
            positions.

    What padded positions get (the same as keras-hub's `TransformerEncoder`):
    with only an explicit `padding_mask`, a padded position's query attends
    to the real tokens like any other. A Keras mask on `inputs` (an embedding
    with `mask_zero=True`) is also the self-attention's query mask, as in
    `keras.layers.MultiHeadAttention`, which keras-hub's encoder uses: a
    padded query attends to nothing and its attention output is zero (then
    the output projection's bias, the residual and the feed-forward as
    usual). keras' own layer gives such a query zeros as well when it has a
    dropout rate or returns the weights, but with `dropout=0` its fused path
    gives it the unweighted mean of all the values, padded ones included:
    only there do the two blocks differ, at padded positions only. The
    output carries the Keras mask of `inputs`, as keras-hub's does.

    Example:

    ```python
    x = keras_attention.layers.TokenAndPositionEmbedding(
        vocabulary_size=1000, sequence_length=64, embedding_dim=64, mask_zero=True
    )(tokens)
    x = keras_attention.layers.TransformerEncoderBlock(128, num_heads=4)(x)
    ```

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Xiong et al., 2020 (pre-norm)](https://arxiv.org/abs/2002.04745)
    """

    def build(self, inputs_shape):
        self._check_inputs("inputs", inputs_shape)
        self._build_self_attention(inputs_shape)
        self._build_feedforward(inputs_shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        mask=None,
        segment_ids=None,
    ):
        padding_mask = self._padding_mask(padding_mask, mask, inputs)
        mask = merge_masks(self._key_padding_mask(padding_mask), attention_mask)

        def attend(x):
            out, *weights = as_tuple(
                self.self_attention(
                    x,
                    x,
                    attention_mask=mask,
                    return_attention_scores=return_attention_scores,
                    training=training,
                    segment_ids=segment_ids,
                )
            )
            return (self.self_attention_dropout(out, training=training), *weights)

        x, weights = self._residual(inputs, self.self_attention_layer_norm, attend)
        x = self._feedforward_residual(x, training)
        if return_attention_scores:
            return x, weights[0]
        return x

    def compute_output_spec(self, inputs, return_attention_scores=False, **kwargs):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        batch, length = inputs.shape[0], inputs.shape[1]
        weights = keras.KerasTensor(
            (batch, self.num_heads, length, length), dtype=self.compute_dtype
        )
        return output, weights
