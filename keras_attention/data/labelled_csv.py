"""Labelled texts from a user's CSV file: a header row naming the columns,
then one `text,label` example per row, read strictly (every malformed row
named by its line)."""

import csv

from keras_attention.data.files import (
    DataFormatError,
    malformed_error,
    not_utf8_error,
    read_data_file,
)

_VALID_CSV = (
    "a header row naming the columns, e.g. 'text,label', then one example per "
    "row, e.g. '\"Great taste, would buy again.\",great' (fields with commas or "
    "line breaks in double quotes; more columns are ignored)"
)


def _decode_lines(path, data):
    """Decodes UTF-8 `data`, naming every line that is not valid UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    # A UTF-8 sequence never spans a newline byte: the lines decode alone.
    problems = []
    for line_number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as error:
            problems.append((line_number, error.start))
    raise not_utf8_error(path, problems, f"a UTF-8 CSV file: {_VALID_CSV}")


def _csv_records(path, text):
    """Yields `(first line number, fields)` for each CSV record of `text`."""
    lines = text.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + [lines[-1]]
    reader = csv.reader(lines, strict=True)
    line_number = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise DataFormatError(
                f"'{path}' is not a valid CSV file: {error} (the record starting "
                f"on line {line_number}). Expected {_VALID_CSV}."
            ) from error
        yield line_number, fields
        line_number = reader.line_num + 1


def read_labelled_csv(path, text_column="text", label_column="label"):
    """Reads labelled texts from a CSV file with a header row.

    The file is UTF-8 (a byte-order mark is allowed) in the usual CSV dialect:
    comma-separated, with fields that hold commas, quotes or line breaks in
    double quotes. The header row names the columns; the text and label
    columns are found by name and other columns are ignored. Blank lines are
    skipped. Line numbers in error messages are those of the file; a record
    spanning several lines is numbered by its first.

    Args:
        path: path of the file.
        text_column: name of the column of the texts.
        label_column: name of the column of the labels.

    Returns:
        A list of `(text, label)` string tuples, stripped of surrounding
        whitespace, in file order.

    Raises:
        FileNotFoundError: if `path` does not exist.
        DataFormatError: if the file is binary or not UTF-8, is not valid
            CSV, its header lacks the text or label column, it has rows with
            a missing field, an empty text or an empty label, it has no rows,
            or its labels have fewer than 2 distinct values. The message
            names the file and the offending line numbers.
    """
    for name, value in (("text_column", text_column), ("label_column", label_column)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                f"`{name}` must be a non-empty column name; received {name}={value!r}."
            )
    if text_column == label_column:
        raise ValueError(
            "`text_column` and `label_column` must differ; received "
            f"text_column=label_column={text_column!r}."
        )
    data = read_data_file(path, "CSV file", f"a UTF-8 CSV file with {_VALID_CSV}")
    text = _decode_lines(path, data)

    records = ((n, fields) for n, fields in _csv_records(path, text) if fields)
    header_line, header = next(records, (None, None))
    if header is None:
        raise DataFormatError(
            f"'{path}' is empty: it has no header row and no examples. Expected "
            f"{_VALID_CSV}."
        )
    header = [name.strip() for name in header]
    missing = [c for c in (text_column, label_column) if c not in header]
    if missing:
        raise DataFormatError(
            f"The header of '{path}' (line {header_line}) is {header}, which lacks "
            f"the column(s) {missing}: expected columns named {text_column!r} and "
            f"{label_column!r}. Expected {_VALID_CSV}."
        )
    text_index = header.index(text_column)
    label_index = header.index(label_column)
    num_fields = max(text_index, label_index) + 1

    pairs = []
    problems = []  # (line number, what was found)
    for line_number, fields in records:
        if len(fields) < num_fields:
            problems.append(
                (
                    line_number,
                    f"{len(fields)} field(s), expected at least {num_fields} to "
                    f"reach the {text_column!r} and {label_column!r} columns: "
                    f"{','.join(fields)[:60]!r}",
                )
            )
            continue
        example_text = fields[text_index].strip()
        label = fields[label_index].strip()
        if not example_text or not label:
            column = text_column if not example_text else label_column
            problems.append(
                (line_number, f"an empty {column!r} field: {','.join(fields)[:60]!r}")
            )
            continue
        pairs.append((example_text, label))

    if problems:
        raise malformed_error(path, problems, "row(s)", f"Expected {_VALID_CSV}.")
    if not pairs:
        raise DataFormatError(
            f"'{path}' has a header (line {header_line}) but no rows. Expected "
            f"{_VALID_CSV}."
        )
    labels = sorted({label for _, label in pairs})
    if len(labels) < 2:
        raise DataFormatError(
            f"'{path}' has a single label, {labels[0]!r}, in its {len(pairs)} "
            f"row(s): classification needs at least 2 distinct labels in the "
            f"{label_column!r} column."
        )
    return pairs
