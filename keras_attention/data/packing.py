"""Packed sequences: whole documents placed side by side in the rows a
model reads, each token told which document it belongs to.

A language model trained on windows of the token stream
(`data.pipeline.language_model_dataset`) reads across documents; one trained
on one document per row (the *padded* layout) spends most of each row on
padding (the fortunes average 166 characters: at 256 per row, 62 % of the
tokens are padding). Packing fills the rows with whole documents and gives
every token a segment id, so that with `segment_ids` the attention keeps each
document to itself (`keras_attention.ops.dot_product_attention`) and positions
restart at every document.

**Pieces.** Each document `d` (its tokens, from `token_stream` split at
`END_ID`) is read as `[END] d [END]`: inputs `[END] d`, targets `d [END]`,
`len(d) + 1` (input, target) pairs. The first pair predicts the document's
first token from the end-of-text token (what `lm`'s samples start from, and
what the stream windows also learn, from the previous document's end); the
last pair predicts the document's end. No target is ever another document's
token, so nothing at a boundary needs masking: a row's only masked targets are
its padding (`PAD_ID` targets, weight 0).

**Long documents.** A document of more pairs than a row holds is cut as the
stream windows cut the stream: into consecutive pieces of `sequence_length`
pairs (each a full row of its own) and a last, shorter piece, packed like a
short document. Each piece is a segment of its own (its attention and
positions start at its first token, as a stream window's do).

**Packing.** Best fit, documents taken in order (shuffled first when
training): a piece goes into the open row with the least room that holds
it (the earliest such row on a tie), or opens a new row. Rows are filled left
to right, padding only at their end. As with every such rule, no two rows
together fit in one: a later row's first piece did not fit in the room any
earlier row had when it was placed.

**Segment ids.** Within a row, the documents are numbered 1, 2, ... in the
order they sit; padding has id 0 (`PAD_SEGMENT`).
"""

import numpy as np

from keras_attention._checks import check_positive_int
from keras_attention.data.tokenization import END_ID, PAD_ID

PAD_SEGMENT = 0
LAYOUTS = ("packed", "padded")


def split_stream(token_ids):
    """The documents of a token stream (`data.pipeline.token_stream`: each
    document's ids followed by `END_ID`), without their `END_ID`: a list of
    int32 arrays. A stream not ending with `END_ID` keeps its tail as a last
    document."""
    token_ids = np.asarray(token_ids, "int32").reshape(-1)
    ends = np.flatnonzero(token_ids == END_ID)
    starts = np.concatenate([[0], ends + 1])
    stops = np.concatenate([ends, [len(token_ids)]])
    return [
        token_ids[start:stop]
        for start, stop in zip(starts, stops, strict=True)
        if stop > start or stop < len(token_ids)
    ]


def document_pieces(documents, sequence_length):
    """The pieces of each document, `[(document, start, length), ...]`: pair
    indices `start` to `start + length - 1` of the document's
    `len(document) + 1` (input, target) pairs, at most `sequence_length`
    each (see the module docstring)."""
    pieces = []
    for index, document in enumerate(documents):
        pairs = len(document) + 1
        for start in range(0, pairs, sequence_length):
            pieces.append((index, start, min(sequence_length, pairs - start)))
    return pieces


def _best_fit(lengths, sequence_length):
    """The row and offset of each piece length, placed by best fit."""
    # Open rows by free room: `rooms[r]` lists the rows with `r` free tokens
    # (oldest first); `counts[r]` how many there are.
    rooms = [[] for _ in range(sequence_length + 1)]
    counts = np.zeros(sequence_length + 1, "int64")
    filled = []
    placements = []
    for length in lengths:
        candidates = np.flatnonzero(counts[length:])
        if len(candidates):
            room = length + int(candidates[0])
            row = rooms[room].pop(0)
            counts[room] -= 1
        else:
            row, room = len(filled), sequence_length
            filled.append(0)
        placements.append((row, filled[row]))
        filled[row] += length
        left = room - length
        if left:
            rooms[left].append(row)
            counts[left] += 1
    return placements, len(filled)


def _place(pieces, sequence_length, layout):
    """`(placements, num_rows)`: the row and offset of each piece."""
    if layout == "packed":
        return _best_fit([length for *_, length in pieces], sequence_length)
    return [(row, 0) for row in range(len(pieces))], len(pieces)


def _fill_rows(pieces, sequence_length, layout, sequence_of, with_targets):
    """The rows' arrays (see `pack_texts` and `pack_documents`): each piece
    `(index, start, length)` of `sequence_of(index)` where `layout` places
    it, with the next tokens as `targets` when `with_targets`."""
    placements, num_rows = _place(pieces, sequence_length, layout)
    shape = (num_rows, sequence_length)
    rows = {"token_ids": np.full(shape, PAD_ID, "int32")}
    if with_targets:
        rows["targets"] = np.full(shape, PAD_ID, "int32")
    rows["segment_ids"] = np.full(shape, PAD_SEGMENT, "int32")
    rows["positions"] = np.zeros(shape, "int32")
    next_segment = np.ones(num_rows, "int32")
    for (index, start, length), (row, offset) in zip(pieces, placements, strict=True):
        sequence = sequence_of(index)
        span = slice(offset, offset + length)
        rows["token_ids"][row, span] = sequence[start : start + length]
        if with_targets:
            rows["targets"][row, span] = sequence[start + 1 : start + 1 + length]
        rows["segment_ids"][row, span] = next_segment[row]
        rows["positions"][row, span] = np.arange(length, dtype="int32")
        next_segment[row] += 1
    rows["weights"] = (rows["segment_ids"] != PAD_SEGMENT).astype("float32")
    return rows


def _check(documents, layout):
    if layout not in LAYOUTS:
        raise ValueError(f"`layout` must be one of {LAYOUTS}; received {layout!r}.")
    documents = [np.asarray(d, "int32").reshape(-1) for d in documents]
    if not documents:
        raise ValueError("`documents` is empty: expected token id sequences.")
    return documents


def pack_texts(texts, sequence_length, layout="packed", seed=None):
    """Rows of whole texts side by side, for a model that reads its inputs
    as they are (a masked language model): `pack_documents` without the
    next-token pairs.

    Args:
        texts: token id sequences, one per text; a trailing `PAD_ID` padding
            is dropped (so the rows of `data.pipeline.encode_texts` can be
            given). A text longer than a row is cut into pieces of
            `sequence_length` tokens, each a segment of its own.
        sequence_length: tokens per row.
        layout: `"packed"` (best fit) or `"padded"` (one piece per row).
        seed: when not None, the texts are shuffled with it first.

    Returns:
        A dict of int32 `(R, sequence_length)` arrays: `token_ids` (`PAD_ID`
        after the last piece), `segment_ids` (1, 2, ... per piece in a row,
        `PAD_SEGMENT` on padding), `positions` (counted from each piece's
        start) and float32 `weights` (1 on tokens, 0 on padding).
    """
    check_positive_int("sequence_length", sequence_length)
    texts = _check(texts, layout)
    texts = [text[: len(np.trim_zeros(text, "b"))] for text in texts]
    texts = [text for text in texts if len(text)]
    if not texts:
        raise ValueError("Every text of `texts` is empty.")
    order = np.arange(len(texts))
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(texts))
    pieces = [
        (int(index), start, min(sequence_length, len(texts[index]) - start))
        for index in order
        for start in range(0, len(texts[index]), sequence_length)
    ]
    return _fill_rows(pieces, sequence_length, layout, texts.__getitem__, False)


def pack_documents(documents, sequence_length, layout="packed", seed=None):
    """Rows of (input, target) pairs of whole documents, with segment ids.

    Args:
        documents: token id sequences, one per document, without `END_ID`
            (see `split_stream`).
        sequence_length: tokens per row.
        layout: `"packed"` (best fit, several documents per row) or
            `"padded"` (one piece per row, the rest padding).
        seed: when not None, the documents are shuffled with it before
            packing (a packed row then mixes documents from anywhere).

    Returns:
        A dict of `(R, sequence_length)` arrays: `token_ids` (int32 inputs,
        `PAD_ID` after the last piece), `targets` (int32, `PAD_ID` on
        padding), `segment_ids` (int32, 1, 2, ... per piece in a row,
        `PAD_SEGMENT` on padding), `positions` (int32, each piece's pair index
        counted from the piece's start, 0 on padding) and `weights`
        (float32, 1 on real targets, 0 on padding).
    """
    check_positive_int("sequence_length", sequence_length)
    documents = _check(documents, layout)
    order = np.arange(len(documents))
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(documents))
    pieces = document_pieces([documents[i] for i in order], sequence_length)

    def sequence_of(index):
        document = documents[order[index]]
        return np.concatenate([[END_ID], document, [END_ID]]).astype("int32")

    return _fill_rows(pieces, sequence_length, layout, sequence_of, True)


def padding_fraction(rows):
    """The fraction of the rows' tokens that are padding."""
    weights = rows["weights"]
    return float(1.0 - weights.sum() / max(weights.size, 1))


def packed_dataset(
    rows, batch_size, model_inputs=None, shuffle=False, seed=0, repeat=False
):
    """Batches `(inputs, targets, weights)` of `pack_documents`' rows, as
    `data.pipeline.language_model_dataset` batches stream windows.

    Args:
        rows: `pack_documents`' dict.
        batch_size: rows per batch.
        model_inputs: the model's inputs from `(token_ids, segment_ids)` (a
            function on tensors; default a dict of both).
        shuffle: shuffle the rows (again every epoch); training then takes
            full batches only, so that every step has one shape.
        seed: shuffling seed.
        repeat: repeat the rows without end (for `fit` with
            `steps_per_epoch`).

    Returns:
        A prefetched `tf.data.Dataset`.
    """
    import tensorflow as tf

    check_positive_int("batch_size", batch_size)
    if model_inputs is None:

        def model_inputs(token_ids, segment_ids):
            return {"token_ids": token_ids, "segment_ids": segment_ids}

    num_rows = len(rows["token_ids"])
    dataset = tf.data.Dataset.from_tensor_slices(
        (rows["token_ids"], rows["segment_ids"], rows["targets"], rows["weights"])
    )
    if shuffle:
        dataset = dataset.shuffle(num_rows, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=shuffle)
    dataset = dataset.map(
        lambda ids, segments, targets, weights: (
            model_inputs(ids, segments),
            targets,
            weights,
        )
    )
    return dataset.prefetch(tf.data.AUTOTUNE)
