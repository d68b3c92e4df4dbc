"""The checks of the options every Transformer model of this package takes
(`Transformer`, `GPT`, `TransformerClassifier`, `TransformerTextEncoder`)."""

from keras_attention._checks import check_positive_int, check_rate
from keras_attention.layers.multi_head_attention import check_key_value_heads
from keras_attention.layers.positions import ATTENTION_POSITIONS, INPUT_POSITIONS

# The options besides the sizes, by their constructor and config names.
TRANSFORMER_OPTIONS = (
    "dropout",
    "input_positions",
    "attention_positions",
    "num_key_value_heads",
    "chunk_size",
)


def check_transformer_options(
    hidden_dim,
    num_heads,
    dropout,
    input_positions,
    attention_positions,
    num_key_value_heads=None,
    chunk_size=None,
):
    """Checks a Transformer model's options (its sizes are checked positive
    before, its positions read from the deprecated `position_encoding` by
    `positions_from_alias`).

    Args:
        hidden_dim: the model width, which `num_heads` must divide.
        num_heads: attention heads per block.
        dropout: the dropout rate.
        input_positions: a name of `INPUT_POSITIONS`, or None.
        attention_positions: a name of `ATTENTION_POSITIONS`, or None.
        num_key_value_heads: None, or a divisor of `num_heads`.
        chunk_size: None, or the positive tile size of the chunked path.

    Raises:
        ValueError: naming the first option that is not valid.
    """
    check_rate("dropout", dropout)
    check_positive_int("chunk_size", chunk_size, allow_none=True)
    check_key_value_heads(num_heads, num_key_value_heads)
    INPUT_POSITIONS.check(input_positions)
    ATTENTION_POSITIONS.check(attention_positions)
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` "
            f"({num_heads})."
        )


def check_transformer_arguments(arguments):
    """Checks the options of a Transformer model's constructor.

    Args:
        arguments: the constructor's `locals()`, its positions already read
            by `positions_from_alias`: `hidden_dim`, `num_heads` and the
            `TRANSFORMER_OPTIONS` (`chunk_size` may be absent, as in `GPT`).

    Raises:
        ValueError: naming the first option that is not valid.
    """
    check_transformer_options(
        arguments["hidden_dim"],
        arguments["num_heads"],
        **{name: arguments.get(name) for name in TRANSFORMER_OPTIONS},
    )
