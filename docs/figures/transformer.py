"""Where each of the Transformer's three attention sub-layers may look, drawn
from the weights of a tiny, untrained `keras_attention.models.Transformer`.

The weights of an untrained model carry no meaning; what the figure shows is
the structure the masks impose: padding keys get zero weight in the encoder's
self-attention and in the cross-attention, and the decoder's self-attention
is causal (lower triangular).
"""

import numpy as np

SOURCE = np.array([[5, 6, 7, 8, 9, 0, 0]])  # five tokens, two of padding
TARGET = np.array([[2, 11, 12, 13, 14, 15]])  # <start> = 2, then the target


def sublayer_weights():
    """Head-averaged weights `(rows, columns)` of the three sub-layers."""
    import keras
    from keras import ops

    from keras_attention.models import Transformer

    keras.utils.set_random_seed(0)
    model = Transformer(
        source_vocabulary_size=20,
        target_vocabulary_size=20,
        hidden_dim=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        intermediate_dim=64,
        dropout=0.0,
        max_source_length=8,
        max_target_length=8,
    )
    source_mask = SOURCE != 0
    _, encoder_self = model.encoder_blocks[0](
        model.source_embedding(SOURCE),
        padding_mask=source_mask,
        return_attention_scores=True,
    )
    # Post-norm block: its self-attention sees the target embeddings as they are.
    target = model.target_embedding(TARGET)
    _, decoder_self = model.decoder_blocks[0].self_attention(
        target, target, use_causal_mask=True, return_attention_scores=True
    )
    cross = model.attention_weights(SOURCE, TARGET)
    return [
        ops.convert_to_numpy(ops.mean(encoder_self, axis=1))[0],
        ops.convert_to_numpy(ops.mean(decoder_self, axis=1))[0],
        ops.convert_to_numpy(cross)[0],
    ]


def build(out_dir):
    from keras_attention.viz import plot_attention, pyplot

    encoder_self, decoder_self, cross = sublayer_weights()
    source = ["s1", "s2", "s3", "s4", "s5", "pad", "pad"]
    target = ["<s>", "y1", "y2", "y3", "y4", "y5"]
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.2))
    panels = (
        (encoder_self, source, source, "encoder self-attention"),
        (decoder_self, target, target, "decoder causal self-attention"),
        (cross, source, target, "decoder cross-attention"),
    )
    for ax, (matrix, columns, rows, title) in zip(axes, panels, strict=True):
        plot_attention(matrix, columns, rows, title=title, ax=ax)
    fig.suptitle(
        "Untrained 1 + 1 block Transformer, weights averaged over its 2 heads: "
        "the zeros are the padding and causal masks",
        fontsize=10,
    )
    fig.tight_layout()
    path = out_dir / "transformer-sublayers.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
