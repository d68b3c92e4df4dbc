"""Reading users' data files, with errors that name the file and the line."""

import os

_MAX_LISTED_LINES = 5


class DataFormatError(ValueError):
    """A data file does not have the expected format."""


def list_lines(line_numbers):
    """ "3, 5, 8" (the first few line numbers, then "...")."""
    listed = ", ".join(str(n) for n in line_numbers[:_MAX_LISTED_LINES])
    if len(line_numbers) > _MAX_LISTED_LINES:
        listed += ", ..."
    return listed


def not_utf8_error(path, problems, expected):
    """The `DataFormatError` for the lines of `path` that are not UTF-8.

    Args:
        path: the file.
        problems: `(line number, column)` of each such line, in order.
        expected: what a valid file is, ending the message's last sentence.
    """
    first_line, first_column = problems[0]
    return DataFormatError(
        f"'{path}' is not valid UTF-8: {len(problems)} line(s) (line "
        f"{list_lines([n for n, _ in problems])}) have bytes that are not "
        f"UTF-8, the first on line {first_line} at column {first_column}. "
        f"Expected {expected}."
    )


def malformed_error(path, problems, what, expected):
    """The `DataFormatError` for the malformed records of `path`.

    Args:
        path: the file.
        problems: `(line number, what is wrong)` of each such record, in order.
        what: what a record is, plural ("row(s)").
        expected: the message's last sentence, what a valid record is.
    """
    first_line, first_problem = problems[0]
    return DataFormatError(
        f"'{path}' has {len(problems)} malformed {what} (line "
        f"{list_lines([n for n, _ in problems])}). Line {first_line} has "
        f"{first_problem}. {expected}"
    )


def read_data_file(path, kind, expected):
    """The bytes of a text data file, without a UTF-8 byte-order mark.

    Args:
        path: the file.
        kind: what the file holds, for messages ("Translation file").
        expected: what a valid file looks like, for messages.

    Raises:
        FileNotFoundError: if `path` does not exist.
        DataFormatError: if the file is binary (has a NUL byte), naming the
            line.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{kind} not found: '{path}'. Expected {expected}.")
    with open(path, "rb") as file:
        data = file.read()
    if b"\x00" in data:
        line_number = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise DataFormatError(
            f"'{path}' looks like a binary file: it has a NUL byte on line "
            f"{line_number}. Expected {expected}."
        )
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data
