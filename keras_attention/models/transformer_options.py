"""The checks of the options every Transformer model of this package takes
(`Transformer`, `GPT`, `TransformerClassifier`, `TransformerTextEncoder`)."""

from keras_attention._checks import check_positive_int, check_rate
from keras_attention.layers.multi_head_attention import check_key_value_heads
from keras_attention.layers.positions import (
    ATTENTION_POSITIONS,
    INPUT_POSITIONS,
    positions_from_alias,
)

# The options besides the sizes, by their constructor and config names.
TRANSFORMER_OPTIONS = (
    "dropout",
    "input_positions",
    "attention_positions",
    "num_key_value_heads",
    "chunk_size",
)


def check_transformer_options(arguments, constructor, owner):
    """Reads a Transformer model's positions and checks its options (its
    sizes are checked positive before).

    Args:
        arguments: the constructor's `locals()`: `hidden_dim` (which
            `num_heads` must divide), `num_heads`, `kwargs` (where a saved
            config of an earlier release passes the deprecated
            `position_encoding`, read by `positions_from_alias`), and the
            `TRANSFORMER_OPTIONS`: `dropout` a rate, `input_positions` and
            `attention_positions` names of `INPUT_POSITIONS` and
            `ATTENTION_POSITIONS` or None, `num_key_value_heads` None or a
            divisor of `num_heads`, `chunk_size` None or a positive tile
            size (absent, as in `GPT`, it is None).
        constructor: the model's `__init__` (the defaults of its positions).
        owner: the model's class name, for the messages.

    Returns:
        `(input_positions, attention_positions)`, read from
        `position_encoding` where a saved config passes it.

    Raises:
        ValueError: naming the first option that is not valid.
    """
    positions = positions_from_alias(
        arguments["kwargs"],
        constructor,
        owner,
        input_positions=arguments["input_positions"],
        attention_positions=arguments["attention_positions"],
    )
    input_positions, attention_positions = positions
    hidden_dim, num_heads = arguments["hidden_dim"], arguments["num_heads"]
    check_rate("dropout", arguments["dropout"])
    check_positive_int("chunk_size", arguments.get("chunk_size"), allow_none=True)
    check_key_value_heads(num_heads, arguments["num_key_value_heads"])
    INPUT_POSITIONS.check(input_positions)
    ATTENTION_POSITIONS.check(attention_positions)
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` "
            f"({num_heads})."
        )
    return positions
