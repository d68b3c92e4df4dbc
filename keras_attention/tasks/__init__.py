"""End-to-end jobs behind the `keras-attention` subcommands."""
