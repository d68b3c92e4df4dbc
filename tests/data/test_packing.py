import numpy as np
import pytest

from keras_attention.data.packing import (
    PAD_SEGMENT,
    document_pieces,
    pack_documents,
    pack_texts,
    packed_dataset,
    padding_fraction,
    split_stream,
)
from keras_attention.data.tokenization import END_ID, PAD_ID


def random_documents(count=300, longest=70, seed=0):
    """Documents of ids 10 and up (never `PAD_ID` or `END_ID`), each a
    run of distinct ids so that its tokens can be found again."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, longest, count)
    first = 10 + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return [
        np.arange(f, f + n, dtype="int32") for f, n in zip(first, lengths, strict=True)
    ]


def pieces_of(rows):
    """`[(row, segment, inputs, targets, positions)]` of every piece."""
    found = []
    for row in range(len(rows["token_ids"])):
        segments = rows["segment_ids"][row]
        for segment in np.unique(segments[segments != PAD_SEGMENT]):
            where = np.flatnonzero(segments == segment)
            found.append(
                (
                    row,
                    where,
                    rows["token_ids"][row, where],
                    rows["targets"][row, where],
                    rows["positions"][row, where],
                )
            )
    return found


@pytest.mark.parametrize("layout", ["packed", "padded"])
@pytest.mark.parametrize("seed", [None, 3])
def test_every_document_appears_once_in_order_within_rows(layout, seed):
    documents = random_documents()
    length = 16  # some documents take several rows
    rows = pack_documents(documents, length, layout=layout, seed=seed)
    assert rows["token_ids"].shape == rows["targets"].shape
    assert rows["token_ids"].shape[1] == length
    owner = {int(t): i for i, d in enumerate(documents) for t in d}
    pairs = [[] for _ in documents]
    for _, where, inputs, targets, positions in pieces_of(rows):
        assert np.all(np.diff(where) == 1)  # contiguous: no piece crosses a row
        assert positions.tolist() == list(range(len(where)))  # restart per piece
        # The targets are the inputs moved by one: never another piece's.
        assert inputs[1:].tolist() == targets[:-1].tolist()
        tokens = [int(t) for t in (*inputs, *targets) if t != END_ID]
        document = owner[tokens[0]]
        assert {owner[t] for t in tokens} == {document}  # one document a piece
        sequence = [END_ID, *documents[document].tolist(), END_ID]
        # A piece is a run of consecutive pairs of its document.
        start = sequence.index(int(targets[0]), 1) - 1
        assert inputs.tolist() == sequence[start : start + len(inputs)]
        pairs[document] += list(zip(inputs.tolist(), targets.tolist(), strict=True))
    for document, found in zip(documents, pairs, strict=True):
        sequence = [END_ID, *document.tolist(), END_ID]
        # Every pair exactly once: [END] d as inputs, d [END] as targets.
        expected = list(zip(sequence[:-1], sequence[1:], strict=True))
        assert sorted(found, key=expected.index) == expected


def test_boundaries_and_padding_are_never_learned_across_documents():
    documents = [np.array([11, 12, 13]), np.array([21, 22]), np.array([31])]
    rows = pack_documents(documents, 10)
    assert rows["token_ids"].tolist() == [[3, 11, 12, 13, 3, 21, 22, 3, 31, 0]]
    # The last target of a document is its end, never the next one's first
    # token; the next document's first token is learned from its own END.
    assert rows["targets"].tolist() == [[11, 12, 13, 3, 21, 22, 3, 31, 3, 0]]
    assert rows["segment_ids"].tolist() == [[1, 1, 1, 1, 2, 2, 2, 3, 3, 0]]
    assert rows["positions"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1, 0]]
    assert rows["weights"].tolist() == [[1] * 9 + [0]]
    # The third document (2 pairs) does not fit the 1 token left: a new row.
    rows = pack_documents(documents, 8)
    assert rows["targets"].tolist() == [
        [11, 12, 13, 3, 21, 22, 3, 0],
        [31, 3, 0, 0, 0, 0, 0, 0],
    ]
    for key in ("targets", "token_ids"):
        assert np.all(rows[key][rows["segment_ids"] == PAD_SEGMENT] == PAD_ID)
    assert padding_fraction(rows) == pytest.approx(7 / 16)


def test_long_documents_are_cut_into_full_rows_and_a_packed_tail():
    document = np.arange(10, 30)  # 21 pairs: rows of 8, 8 and a tail of 5
    assert document_pieces([document], 8) == [(0, 0, 8), (0, 8, 8), (0, 16, 5)]
    rows = pack_documents([document, np.array([41, 42])], 8)
    assert rows["token_ids"][0].tolist() == [3, *range(10, 17)]
    assert rows["targets"][1].tolist() == list(range(18, 26))
    assert rows["token_ids"][2].tolist() == [25, 26, 27, 28, 29, 3, 41, 42]
    assert rows["segment_ids"][2].tolist() == [1] * 5 + [2] * 3
    assert rows["targets"][2].tolist() == [26, 27, 28, 29, 3, 41, 42, 3]


def test_rows_are_full_up_to_their_last_document():
    documents = random_documents(800, longest=60, seed=1)
    length = 64
    packed = pack_documents(documents, length, seed=0)
    padded = pack_documents(documents, length, layout="padded", seed=0)
    for rows in (packed, padded):
        real = rows["segment_ids"] != PAD_SEGMENT
        # Padding only after the last document of a row.
        assert np.all(real[:, :-1] >= real[:, 1:])
        assert real.sum() == sum(len(d) + 1 for d in documents)
    # Best fit: no two rows would fit in one, so at most one row is half
    # empty, and packing leaves little padding where one document per row
    # leaves half.
    sizes = np.sort(packed["weights"].sum(axis=1))
    assert sizes[0] + sizes[1] > length
    assert padding_fraction(packed) < 0.05 < 0.4 < padding_fraction(padded)
    assert len(padded["token_ids"]) == len(documents)
    # Shuffled with a seed: another packing of the same tokens, repeatable.
    again = pack_documents(documents, length, seed=0)
    assert np.array_equal(again["token_ids"], packed["token_ids"])
    other = pack_documents(documents, length, seed=1)
    assert not np.array_equal(other["token_ids"][:5], packed["token_ids"][:5])


def test_a_token_stream_splits_back_into_its_documents():
    stream = np.array([5, 6, END_ID, 7, END_ID, 8, 9, 10, END_ID])
    assert [d.tolist() for d in split_stream(stream)] == [[5, 6], [7], [8, 9, 10]]
    assert [d.tolist() for d in split_stream(stream[:-1])][-1] == [8, 9, 10]


def test_the_dataset_batches_rows_with_segment_ids():
    rows = pack_documents(random_documents(40), 16, seed=0)
    dataset = packed_dataset(rows, 4)
    batches = list(dataset.as_numpy_iterator())
    assert sum(len(targets) for _, targets, _ in batches) == len(rows["targets"])
    inputs, targets, weights = batches[0]
    assert set(inputs) == {"token_ids", "segment_ids"}
    assert np.array_equal(inputs["segment_ids"], rows["segment_ids"][:4])
    assert np.array_equal(targets, rows["targets"][:4])
    assert weights.dtype == np.float32
    shuffled = packed_dataset(rows, 3, shuffle=True, seed=0, repeat=True)
    for inputs, _, _ in shuffled.take(len(rows["targets"])):
        assert inputs["token_ids"].shape == (3, 16)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="layout"):
        pack_documents([[5]], 8, layout="stream")
    with pytest.raises(ValueError, match="empty"):
        pack_documents([], 8)
    with pytest.raises(ValueError, match="sequence_length"):
        pack_documents([[5]], 0)


def test_texts_are_packed_as_they_are_for_a_masked_language_model():
    texts = np.array(
        [[11, 12, 13, 0, 0], [21, 22, 0, 0, 0], [31, 32, 33, 34, 35], [41, 0, 0, 0, 0]]
    )
    rows = pack_texts(texts, 5)
    # Padding is dropped: 21-22 fills the room 11-13 left.
    assert rows["token_ids"].tolist() == [
        [11, 12, 13, 21, 22],
        [31, 32, 33, 34, 35],
        [41, 0, 0, 0, 0],
    ]
    assert rows["segment_ids"].tolist() == [
        [1, 1, 1, 2, 2],
        [1, 1, 1, 1, 1],
        [1, 0, 0, 0, 0],
    ]
    assert rows["positions"][0].tolist() == [0, 1, 2, 0, 1]
    long = pack_texts([np.arange(10, 17)], 3, layout="padded")
    assert long["token_ids"].tolist() == [[10, 11, 12], [13, 14, 15], [16, 0, 0]]
    shuffled = pack_texts(texts, 5, seed=0)
    assert sorted(shuffled["token_ids"][shuffled["token_ids"] > 0].tolist()) == sorted(
        texts[texts > 0].tolist()
    )
    with pytest.raises(ValueError, match="empty"):
        pack_texts([[0, 0]], 4)
