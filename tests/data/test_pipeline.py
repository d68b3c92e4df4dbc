import numpy as np
import pytest

from keras_attention.data.dates import generate_date_pairs
from keras_attention.data.pipeline import (
    buckets_within,
    caption_dataset,
    classification_dataset,
    encode_captions,
    encode_texts,
    translation_dataset,
)
from keras_attention.data.tokenization import (
    END_ID,
    PAD_ID,
    START_ID,
    join_punctuation,
    train_word_piece,
)


@pytest.fixture(scope="module")
def pairs():
    return generate_date_pairs(300, seed=0)


@pytest.fixture(scope="module")
def tokenizers(pairs):
    source = train_word_piece([s for s, _ in pairs], 200)
    target = train_word_piece([t for _, t in pairs], 60)
    return source, target


@pytest.fixture(scope="module")
def lengths(tokenizers, pairs):
    """Token counts of the sources and of the targets (without [START]/[END])."""
    source, target = tokenizers
    return (
        np.array([len(source.tokenize(s)) for s, _ in pairs]),
        np.array([len(target.tokenize(t)) for _, t in pairs]),
    )


def test_encode_texts(tokenizers, pairs):
    tokenizer, _ = tokenizers
    texts = [s for s, _ in pairs[:20]]
    ids = encode_texts(texts, tokenizer, 24)
    assert ids.shape == (20, 24) and ids.dtype == np.int32
    for row, text in zip(ids, texts, strict=True):
        expected = list(tokenizer.tokenize(text))
        assert len(expected) < 24
        assert row[: len(expected)].tolist() == expected
        assert (row[len(expected) :] == PAD_ID).all()
        detokenized = tokenizer.detokenize(expected)
        assert detokenized.replace(" ", "") == text.replace(" ", "")


def test_encode_texts_start_end_and_truncation(tokenizers):
    tokenizer, _ = tokenizers
    text = "Wednesday, March 3, 2021"
    tokens = list(tokenizer.tokenize(text))
    long = encode_texts([text], tokenizer, len(tokens) + 4, True, True)[0]
    assert long.tolist() == [START_ID, *tokens, END_ID, PAD_ID, PAD_ID]
    short = encode_texts([text], tokenizer, 4, add_start=True, add_end=True)[0]
    assert short.tolist() == [START_ID, *tokens[:2], END_ID]
    assert encode_texts([], tokenizer, 5).shape == (0, 5)
    with pytest.raises(ValueError, match="max_length"):
        encode_texts([text], tokenizer, 1, add_start=True, add_end=True)


def test_encode_texts_takes_any_keras_hub_tokenizer(tokenizers, pairs):
    """Byte-pair merges (their loops written as TensorFlow ops) and a
    tokenizer that pads to its `sequence_length` give each text's own tokens;
    the cached graph keeps no tokenizer alive."""
    import gc
    import weakref

    import keras_hub

    from keras_attention.data import pipeline

    vocabulary = {"[PAD]": 0, "a": 1, "b": 2, "ab": 3, "Ġ": 4, "Ġa": 5, "Ġab": 6}
    byte_pair = keras_hub.tokenizers.BytePairTokenizer(
        vocabulary, ["a b", "Ġ a", "Ġa b"]
    )
    texts = ["ab a", "b ab ab", "a"]
    ids = encode_texts(texts, byte_pair, 6)
    for row, text in zip(ids, texts, strict=True):
        expected = list(byte_pair.tokenize(text))
        assert row.tolist() == expected + [PAD_ID] * (6 - len(expected))
    word_piece = train_word_piece([s for s, _ in pairs], 200)
    word_piece.sequence_length = 8
    texts = [s for s, _ in pairs[:5]]
    ids = encode_texts(texts, word_piece, 12)
    for row, text in zip(ids, texts, strict=True):
        expected = [int(i) for i in word_piece.tokenize(text) if i != PAD_ID]
        assert row.tolist() == expected + [PAD_ID] * (12 - len(expected))
    cached = len(pipeline._TOKENIZE_GRAPHS)
    reference = weakref.ref(word_piece)
    del word_piece
    gc.collect()
    assert reference() is None and len(pipeline._TOKENIZE_GRAPHS) == cached - 1


def test_translation_dataset(tokenizers, pairs, lengths):
    source_tokenizer, target_tokenizer = tokenizers
    max_source_length = lengths[0].max()
    max_target_length = lengths[1].max() + 2
    dataset, num_kept = translation_dataset(
        pairs,
        source_tokenizer,
        target_tokenizer,
        32,
        int(max_source_length),
        int(max_target_length),
    )
    assert num_kept == len(pairs)
    batches = list(dataset)
    assert [len(b[1]) for b in batches] == [32] * 9 + [12]
    inputs, targets, sample_weight = batches[0]
    assert inputs["encoder_token_ids"].shape == (32, max_source_length)
    assert inputs["decoder_token_ids"].shape == (32, max_target_length)
    assert targets.shape == sample_weight.shape == (32, max_target_length)
    assert inputs["encoder_token_ids"].dtype == "int32"
    assert targets.dtype == "int32" and sample_weight.dtype == "float32"

    encoder = inputs["encoder_token_ids"].numpy()
    decoder = inputs["decoder_token_ids"].numpy()
    targets = targets.numpy()
    sample_weight = sample_weight.numpy()
    for i, (source, target) in enumerate(pairs[:32]):
        target_ids = list(target_tokenizer.tokenize(target))
        n = len(target_ids)
        assert decoder[i, : n + 1].tolist() == [START_ID, *target_ids]
        assert targets[i, : n + 1].tolist() == [*target_ids, END_ID]
        assert (decoder[i, n + 1 :] == PAD_ID).all()
        assert (targets[i, n + 1 :] == PAD_ID).all()
        np.testing.assert_array_equal(sample_weight[i], targets[i] != PAD_ID)
        assert sample_weight[i].sum() == n + 1
        source_ids = encoder[i][encoder[i] != PAD_ID]
        assert source_ids.tolist() == list(source_tokenizer.tokenize(source))
        decoded = join_punctuation(target_tokenizer.detokenize(target_ids))
        assert decoded == target


def test_over_long_pairs_are_dropped(tokenizers, pairs, lengths):
    source_tokenizer, target_tokenizer = tokenizers
    source_lengths, target_lengths = lengths
    max_source_length = int(np.median(source_lengths))
    max_target_length = int(np.median(target_lengths)) + 1  # with [START]/[END]
    expected = np.sum(
        (source_lengths <= max_source_length)
        & (target_lengths + 1 <= max_target_length)
    )
    assert 0 < expected < len(pairs)
    dataset, num_kept = translation_dataset(
        pairs,
        source_tokenizer,
        target_tokenizer,
        64,
        max_source_length,
        max_target_length,
    )
    assert num_kept == expected
    assert sum(len(targets) for _, targets, _ in dataset) == expected
    for _, targets, _ in dataset:  # kept whole: [END] is never cut off
        assert ((targets.numpy() == END_ID).sum(axis=1) == 1).all()
    shortest_target = int(target_lengths.min())
    with pytest.raises(ValueError, match="All 300 pairs are longer"):
        translation_dataset(
            pairs, source_tokenizer, target_tokenizer, 64, 64, shortest_target
        )


def test_bucketing_gives_boundary_shapes(tokenizers, pairs):
    source_tokenizer, target_tokenizer = tokenizers
    dataset, num_kept = translation_dataset(
        pairs,
        source_tokenizer,
        target_tokenizer,
        16,
        max_source_length=20,
        max_target_length=16,
        bucket_boundaries=[6, 8, 10, 12],
    )
    shapes = set()
    total = 0
    for inputs, targets, sample_weight in dataset:
        length = targets.shape[1]
        assert length in (6, 8, 10, 12, 20)
        assert inputs["encoder_token_ids"].shape == targets.shape
        assert inputs["decoder_token_ids"].shape == targets.shape
        assert sample_weight.shape == targets.shape
        shapes.add(length)
        total += len(targets)
        assert (inputs["decoder_token_ids"][:, 0].numpy() == START_ID).all()
        assert (targets.numpy() == END_ID).sum() == len(targets)
    assert total == num_kept == len(pairs)
    assert len(shapes) >= 2, shapes


def test_shuffling_is_seeded_and_reshuffles(tokenizers, pairs):
    source_tokenizer, target_tokenizer = tokenizers

    def epoch(dataset):
        return np.concatenate([t.numpy() for _, t, _ in dataset])

    def make(seed):
        dataset, _ = translation_dataset(
            pairs, source_tokenizer, target_tokenizer, 50, 24, 16, True, seed
        )
        return dataset

    dataset = make(0)
    first, second = epoch(dataset), epoch(dataset)
    assert not np.array_equal(first, second)
    assert sorted(map(tuple, first)) == sorted(map(tuple, second))
    np.testing.assert_array_equal(first, epoch(make(0)))
    assert not np.array_equal(first, epoch(make(1)))


def test_drop_remainder(tokenizers, pairs):
    source_tokenizer, target_tokenizer = tokenizers
    dataset, _ = translation_dataset(
        pairs, source_tokenizer, target_tokenizer, 32, 24, 16, drop_remainder=True
    )
    assert dataset.element_spec[1].shape == (32, 16)
    assert sum(1 for _ in dataset) == 9


@pytest.mark.parametrize("boundaries", [[], [8, 4], [0, 4], [4, 20], [4, 4.5]])
def test_bad_bucket_boundaries(tokenizers, pairs, boundaries):
    source_tokenizer, target_tokenizer = tokenizers
    with pytest.raises(ValueError, match="bucket_boundaries"):
        translation_dataset(
            pairs,
            source_tokenizer,
            target_tokenizer,
            16,
            14,
            8,
            bucket_boundaries=boundaries,
        )


# classification_dataset


def _texts(lengths, width):
    token_ids = np.zeros((len(lengths), width), "int32")
    for i, length in enumerate(lengths):
        token_ids[i, :length] = np.arange(1, length + 1) + 10
    return token_ids


def test_classification_dataset_buckets_cut_batches_and_keep_every_text():
    lengths = [2, 3, 4, 9, 10, 17, 20, 1, 5, 8]
    token_ids = _texts(lengths, 20)
    labels = np.arange(len(lengths))
    dataset = classification_dataset(token_ids, labels, 2, bucket_boundaries=(4, 10))
    seen = {}
    for batch, batch_labels in dataset:
        width = batch.shape[1]
        assert width in (4, 10, 20)
        for row, label in zip(batch.numpy(), batch_labels.numpy(), strict=True):
            length = lengths[label]
            assert width == min(w for w in (4, 10, 20) if w >= length)
            np.testing.assert_array_equal(row[:length], token_ids[label, :length])
            assert not row[length:].any()
            seen[int(label)] = True
    assert sorted(seen) == list(labels)


def test_classification_dataset_cuts_documents_by_sentence_count():
    documents = np.zeros((6, 6, 3), "int32")
    for i, sentences in enumerate([1, 2, 2, 5, 6, 3]):
        documents[i, :sentences, 0] = 7
    dataset = classification_dataset(
        documents,
        np.arange(6),
        3,
        shuffle=True,
        bucket_boundaries=(2,),
        drop_remainder=True,
    )
    shapes = sorted(tuple(batch.shape) for batch, _ in dataset)
    assert shapes == [(3, 2, 3), (3, 6, 3)]


def test_classification_dataset_rejects_mismatched_labels():
    with pytest.raises(ValueError, match=r"\(N,\).*\(4, 5\) and \(3,\)"):
        classification_dataset(np.zeros((4, 5)), np.zeros(3), 2)


@pytest.fixture(scope="module")
def caption_tokenizer():
    return train_word_piece(
        ["a bag above a shirt", "a small top to the left of a bag"] * 5,
        100,
        lowercase=True,
    )


def test_encode_captions_pads_images_with_fewer_captions(caption_tokenizer):
    captions = [["a bag above a shirt", "a shirt below a bag"], ["a top"]]
    ids = encode_captions(captions, caption_tokenizer, 8)
    assert ids.shape == (2, 2, 8) and ids.dtype == np.int32
    assert ids[0, 0, 0] == START_ID and ids[1, 0, 0] == START_ID
    expected = encode_texts(
        ["a top"], caption_tokenizer, 8, add_start=True, add_end=True
    )
    np.testing.assert_array_equal(ids[1, 0], expected[0])
    assert END_ID in ids[1, 0]
    assert not ids[1, 1].any()  # the second image has one caption only
    with pytest.raises(ValueError, match="image 1 has none"):
        encode_captions([["a bag"], []], caption_tokenizer, 8)


def test_caption_dataset_draws_every_phrasing_and_shifts_targets(caption_tokenizer):
    captions = [["a bag above a shirt", "a shirt below a bag", "a top"]]
    ids = encode_captions(captions * 4, caption_tokenizer, 8)
    images = np.random.default_rng(0).random((4, 8, 8, 1)).astype("float32")
    dataset = caption_dataset(images, ids, batch_size=4, shuffle=True, seed=1)
    seen = set()
    for _ in range(5):  # epochs: each draws a phrasing per image anew
        for inputs, targets, weights in dataset:
            decoder = inputs["decoder_token_ids"].numpy()
            targets = targets.numpy()
            np.testing.assert_array_equal(decoder[:, 1:], targets[:, :-1])
            np.testing.assert_array_equal(weights.numpy(), targets != 0)
            assert inputs["images"].shape == (4, 8, 8, 1)
            assert float(inputs["images"].numpy().max()) <= 1.0
            seen.update(tuple(row) for row in decoder)
    assert seen == {tuple(row[:-1]) for row in ids[0]}


def test_caption_dataset_rejects_mismatched_inputs(caption_tokenizer):
    ids = encode_captions([["a bag"]] * 2, caption_tokenizer, 6)
    with pytest.raises(ValueError, match=r"N = 3 images; received \(2, 1, 6\)"):
        caption_dataset(np.zeros((3, 8, 8, 1)), ids, 2)
    with pytest.raises(ValueError, match=r"\(N, height, width, channels\)"):
        caption_dataset(np.zeros((2, 8, 8)), ids, 2)


def test_buckets_within_keep_the_boundaries_shorter_than_the_padded_length():
    assert buckets_within((64, 128), 256) == (64, 128)
    assert buckets_within((64, 128), 128) == (64,)
    assert buckets_within((64, 128), 48) is None
