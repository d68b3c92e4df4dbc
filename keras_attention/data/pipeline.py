"""Token id arrays and `tf.data` pipelines for sequence-to-sequence and
language-model training."""

import weakref

import numpy as np
import tensorflow as tf

from keras_attention._checks import check_positive_int
from keras_attention.data.tokenization import END_ID, PAD_ID, START_ID

# One graph per tokenizer, traced once for texts of any number: a `tf.data`
# map traced the tokenizer anew at each call (0.25 s), and AutoGraph's
# conversion of keras-hub's code took a second more in each process.
# keras-hub's tokenizers write their graph's control flow as TensorFlow ops.
_TOKENIZE_GRAPHS = weakref.WeakKeyDictionary()


def _tokenize(tokenizer, texts):
    """Tokenizes all `texts` in one vectorised call; returns a ragged int32
    tensor `(N, None)`."""
    graph = _TOKENIZE_GRAPHS.get(tokenizer)
    if graph is None:
        # Traced, keras-hub tokenizers take their TensorFlow path, which
        # handles the whole batch at once; eagerly, they return Python lists.
        # The graph holds the tokenizer weakly: the cache keeps no tokenizer.
        reference = weakref.ref(tokenizer)
        graph = tf.function(
            lambda texts: reference().tokenize(texts),
            input_signature=[tf.TensorSpec([None], tf.string)],
            autograph=False,
        )
        _TOKENIZE_GRAPHS[tokenizer] = graph
    token_ids = graph(tf.constant([str(text) for text in texts], dtype=tf.string))
    if not isinstance(token_ids, tf.RaggedTensor):  # `sequence_length` was set
        token_ids = tf.RaggedTensor.from_tensor(token_ids, padding=PAD_ID)
    return tf.cast(token_ids, "int32")


def _column(num_rows, token_id):
    return tf.RaggedTensor.from_tensor(tf.fill([num_rows, 1], token_id))


def _check_bucket_boundaries(bucket_boundaries, max_length):
    boundaries = list(bucket_boundaries)
    valid = all(
        isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b > 0
        for b in boundaries
    )
    if not boundaries or not valid or boundaries != sorted(set(boundaries)):
        raise ValueError(
            "`bucket_boundaries` must be a non-empty, strictly increasing list of "
            f"positive integers; received bucket_boundaries={bucket_boundaries!r}."
        )
    if boundaries[-1] > max_length:
        raise ValueError(
            f"`bucket_boundaries` must not exceed the padded length {max_length}; "
            "received "
            f"bucket_boundaries={bucket_boundaries!r}."
        )
    return [int(b) for b in boundaries if b < max_length] + [max_length]


def encode_texts(texts, tokenizer, max_length, add_start=False, add_end=False):
    """Tokenizes texts into a padded array of token ids.

    Args:
        texts: a list of strings.
        tokenizer: a keras-hub tokenizer whose vocabulary has the special
            tokens at `PAD_ID`, `START_ID` and `END_ID` (see
            `train_word_piece`).
        max_length: the length of every row. Longer token sequences are
            truncated; with `add_end`, `[END]` stays their last token.
        add_start: whether to prepend `[START]`.
        add_end: whether to append `[END]`.

    Returns:
        An int32 array `(len(texts), max_length)`, right-padded with `PAD_ID`.
    """
    check_positive_int("max_length", max_length)
    budget = max_length - int(add_start) - int(add_end)
    if budget < 1:
        raise ValueError(
            f"`max_length` ({max_length}) leaves no room for tokens with "
            f"add_start={add_start} and add_end={add_end}."
        )
    texts = list(texts)
    if not texts:
        return np.zeros((0, max_length), "int32")
    token_ids = _tokenize(tokenizer, texts)[:, :budget]
    if add_start:
        token_ids = tf.concat([_column(len(texts), START_ID), token_ids], axis=1)
    if add_end:
        token_ids = tf.concat([token_ids, _column(len(texts), END_ID)], axis=1)
    dense = token_ids.to_tensor(default_value=PAD_ID, shape=[len(texts), max_length])
    return dense.numpy().astype("int32")


def translation_dataset(
    pairs,
    source_tokenizer,
    target_tokenizer,
    batch_size,
    max_source_length,
    max_target_length,
    shuffle=False,
    seed=0,
    bucket_boundaries=None,
    drop_remainder=False,
):
    """Builds a batched `tf.data.Dataset` for teacher-forced translation.

    The pairs are tokenized once, up front. Each example is
    `(inputs, targets, sample_weight)`: `inputs["encoder_token_ids"]` are the
    source ids, `inputs["decoder_token_ids"]` are `[START]` followed by the
    target ids, and `targets` are the target ids followed by `[END]`, so
    decoder step `t` learns to predict token `t + 1`. Padding is `PAD_ID` (0)
    and `sample_weight` is 1.0 on real target tokens and 0.0 on padding.

    Pairs whose source has more than `max_source_length` tokens, or whose
    target with `[START]` (or `[END]`) has more than `max_target_length`, are
    dropped rather than truncated, so the model never learns to stop early.

    Without `bucket_boundaries`, every batch is padded to
    `(max_source_length, max_target_length)`. With them, examples are grouped
    by `max(source length, target length)`, and a batch of examples no longer
    than boundary `b` has source and target both padded to `b` (the longest
    examples to `max(max_source_length, max_target_length)`): batches come in
    a few static shapes, and short ones cost less.

    Args:
        pairs: a list of `(source, target)` string tuples.
        source_tokenizer: tokenizer of the source side.
        target_tokenizer: tokenizer of the target side.
        batch_size: examples per batch.
        max_source_length: longest source kept, in tokens.
        max_target_length: longest target kept, in tokens, `[END]` included.
        shuffle: whether to shuffle the examples (reshuffled each epoch).
        seed: the shuffling seed.
        bucket_boundaries: optional strictly increasing ints, the padded
            lengths of the buckets.
        drop_remainder: whether to drop the last, smaller batch (of each
            bucket).

    Returns:
        A tuple `(dataset, num_kept)`: the prefetched `tf.data.Dataset` and the
        number of pairs kept after dropping the over-long ones.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("max_source_length", max_source_length)
    check_positive_int("max_target_length", max_target_length)
    max_length = max(max_source_length, max_target_length)
    if bucket_boundaries is not None:
        bucket_boundaries = _check_bucket_boundaries(bucket_boundaries, max_length)
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty: expected `(source, target)` tuples.")
    sources, targets = zip(*pairs, strict=True)

    source_ids = _tokenize(source_tokenizer, sources)
    target_ids = _tokenize(target_tokenizer, targets)
    source_lengths = source_ids.row_lengths().numpy()
    target_lengths = target_ids.row_lengths().numpy() + 1
    keep = (source_lengths <= max_source_length) & (target_lengths <= max_target_length)
    num_kept = int(keep.sum())
    if num_kept == 0:
        raise ValueError(
            f"All {len(pairs)} pairs are longer than max_source_length="
            f"{max_source_length} or max_target_length={max_target_length} "
            f"tokens (the shortest source has {source_lengths.min()} tokens, the "
            f"shortest target {target_lengths.min()} with [START]/[END])."
        )
    source_ids = tf.ragged.boolean_mask(source_ids, keep)
    target_ids = tf.ragged.boolean_mask(target_ids, keep)
    encoder = source_ids.to_tensor(PAD_ID, shape=[num_kept, max_source_length])
    decoder = tf.concat([_column(num_kept, START_ID), target_ids], axis=1)
    decoder = decoder.to_tensor(PAD_ID, shape=[num_kept, max_target_length])
    labels = tf.concat([target_ids, _column(num_kept, END_ID)], axis=1)
    labels = labels.to_tensor(PAD_ID, shape=[num_kept, max_target_length])
    lengths = np.maximum(source_lengths, target_lengths)[keep].astype("int32")

    dataset = tf.data.Dataset.from_tensor_slices((encoder, decoder, labels, lengths))
    if shuffle:
        dataset = dataset.shuffle(num_kept, seed=seed, reshuffle_each_iteration=True)
    if bucket_boundaries is None:
        dataset = dataset.map(lambda e, d, t, n: (e, d, t))
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    else:
        dataset = dataset.map(lambda e, d, t, n: (e[:n], d[:n], t[:n], n))
        dataset = _bucket_by_length(
            dataset, lengths, bucket_boundaries, batch_size, drop_remainder
        )

    def to_model_inputs(encoder_ids, decoder_ids, target_ids):
        inputs = {"encoder_token_ids": encoder_ids, "decoder_token_ids": decoder_ids}
        sample_weight = tf.cast(tf.not_equal(target_ids, PAD_ID), "float32")
        return inputs, target_ids, sample_weight

    dataset = dataset.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE), num_kept


def buckets_within(bucket_boundaries, width):
    """The boundaries of `bucket_boundaries` shorter than `width`, the length
    texts are padded to, or None when none is: a task's default buckets, fit
    to a model of any length (a model of 64 tokens batches without the
    buckets of 64 and 128)."""
    return tuple(b for b in bucket_boundaries if b < width) or None


def classification_dataset(
    token_ids,
    labels,
    batch_size,
    shuffle=False,
    seed=0,
    bucket_boundaries=None,
    drop_remainder=False,
):
    """Builds a batched `tf.data.Dataset` of `(token_ids, label)` for text
    classification: flat texts `(N, T)` or documents of sentences
    `(N, S, W)`.

    Without `bucket_boundaries`, batches keep the shape of `token_ids`. With
    them, texts are grouped by length (tokens of a flat text, sentences of a
    document) and a batch of texts no longer than boundary `b` is cut to
    length `b` (the longest texts keep the full length): batches come in a
    few static shapes, so XLA compiles a few programs, and short texts stop
    paying for the padding of long ones.

    Args:
        token_ids: int array `(N, T)` or `(N, S, W)`, right-padded with
            `PAD_ID` (padding sentences last).
        labels: int array `(N,)`.
        batch_size: examples per batch.
        shuffle: whether to shuffle the examples (reshuffled each epoch).
        seed: the shuffling seed.
        bucket_boundaries: optional strictly increasing ints, the lengths of
            the buckets (at most `T`, or `S`).
        drop_remainder: whether to drop the last, smaller batch (of each
            bucket).

    Returns:
        A prefetched `tf.data.Dataset`.
    """
    check_positive_int("batch_size", batch_size)
    token_ids = np.asarray(token_ids, "int32")
    labels = np.asarray(labels, "int32")
    if token_ids.ndim < 2 or labels.shape != token_ids.shape[:1]:
        raise ValueError(
            "`token_ids` must be (N, T) (or (N, S, W) documents) and `labels` "
            f"(N,); received shapes {token_ids.shape} and {labels.shape}."
        )
    width = token_ids.shape[1]
    # Real tokens of a text; real (not all-padding) sentences of a document.
    real = (token_ids != PAD_ID).reshape(*token_ids.shape[:2], -1).any(axis=-1)
    lengths = np.maximum(real.sum(axis=1), 1).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((token_ids, labels, lengths))
    if shuffle:
        dataset = dataset.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    if bucket_boundaries is None:
        dataset = dataset.map(lambda ids, label, n: (ids, label))
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    else:
        boundaries = _check_bucket_boundaries(bucket_boundaries, width)
        dataset = dataset.map(lambda ids, label, n: (ids[:n], label, n))
        dataset = _bucket_by_length(
            dataset, lengths, boundaries, batch_size, drop_remainder
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _bucket_by_length(dataset, lengths, boundaries, batch_size, drop_remainder):
    """Batches `(*tensors, length)` elements, each already cut to its length,
    with the elements of one bucket (lengths up to one of `boundaries`), every
    batch padded to its bucket's boundary, and drops the length."""
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda *element: element[-1],
        # Padded to the boundary minus one, hence the `+ 1`.
        bucket_boundaries=[b + 1 for b in boundaries],
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )
    dataset = dataset.map(lambda *element: element[:-1])
    # Bucketing hides the number of batches from tf.data; it is known, so
    # Keras can show the epoch's length and does not warn at its end.
    sizes = np.bincount(np.searchsorted(boundaries, lengths), minlength=len(boundaries))
    full, partial = sizes // batch_size, (sizes % batch_size) > 0
    num_batches = int(full.sum() + (0 if drop_remainder else partial.sum()))
    return dataset.apply(tf.data.experimental.assert_cardinality(num_batches))


def encode_captions(captions, tokenizer, max_length):
    """Tokenizes several captions per image into one array.

    Args:
        captions: for each image, a non-empty list of caption strings.
        tokenizer: a keras-hub tokenizer with the special tokens of
            `train_word_piece`.
        max_length: tokens per caption row, `[START]` and `[END]` included;
            longer captions are truncated (keeping `[END]`).

    Returns:
        int32 `(N, P, max_length)`, `P` the most captions of any image: each
        row is `[START] caption [END]` right-padded with `PAD_ID`; images with
        fewer captions have rows of padding.
    """
    captions = [list(c) for c in captions]
    empty = [i for i, c in enumerate(captions) if not c]
    if empty:
        raise ValueError(
            f"Every image needs at least one caption; image {empty[0]} has none."
        )
    flat = [text for image_captions in captions for text in image_captions]
    rows = encode_texts(flat, tokenizer, max_length, add_start=True, add_end=True)
    most = max((len(c) for c in captions), default=0)
    encoded = np.zeros((len(captions), most, max_length), "int32")
    start = 0
    for i, image_captions in enumerate(captions):
        encoded[i, : len(image_captions)] = rows[start : start + len(image_captions)]
        start += len(image_captions)
    return encoded


def caption_dataset(
    images, caption_ids, batch_size, shuffle=False, seed=0, drop_remainder=False
):
    """Builds a batched `tf.data.Dataset` for teacher-forced captioning.

    One epoch visits every image once, with one of its captions drawn at
    random each time (the captions of an image are phrasings of the same
    scene, so an epoch costs one encoder pass per image, not per caption).
    Each example is `(inputs, targets, sample_weight)`: `inputs["images"]`
    float32 in [0, 1], `inputs["decoder_token_ids"]` the caption row without
    its last token, `targets` the row without `[START]` (so step `t` learns
    token `t + 1`), and `sample_weight` 1.0 on real tokens, 0.0 on padding.

    Args:
        images: `(N, H, W, C)` floats in [0, 1] (stored as uint8 in the
            pipeline) or uint8.
        caption_ids: int32 `(N, P, T)` from `encode_captions`.
        batch_size: images per batch.
        shuffle: whether to shuffle the images (reshuffled each epoch).
        seed: the seed of the shuffling and of the caption draws.
        drop_remainder: whether to drop the last, smaller batch.

    Returns:
        A prefetched `tf.data.Dataset`.
    """
    check_positive_int("batch_size", batch_size)
    images = np.asarray(images)
    caption_ids = np.asarray(caption_ids, "int32")
    if images.ndim != 4:
        raise ValueError(
            f"`images` must have shape (N, height, width, channels); received "
            f"{images.shape}."
        )
    if caption_ids.ndim != 3 or len(caption_ids) != len(images):
        raise ValueError(
            "`caption_ids` must have shape (N, captions, length) with N = "
            f"{len(images)} images; received {caption_ids.shape}."
        )
    if images.dtype != np.uint8:
        images = np.round(np.clip(images, 0.0, 1.0) * 255).astype("uint8")
    counts = np.sum(caption_ids[:, :, 0] != PAD_ID, axis=1).astype("int32")
    if np.any(counts == 0):
        raise ValueError(
            f"Image {int(np.argmin(counts))} has no caption in `caption_ids`."
        )
    dataset = tf.data.Dataset.from_tensor_slices((images, caption_ids, counts))
    if shuffle:
        dataset = dataset.shuffle(len(images), seed=seed, reshuffle_each_iteration=True)
    draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=shuffle)

    def example(item, draw):
        image, rows, count = item
        row = rows[tf.cast(draw % tf.cast(count, tf.int64), tf.int32)]
        targets = row[1:]
        inputs = {
            "images": tf.cast(image, tf.float32) / 255.0,
            "decoder_token_ids": row[:-1],
        }
        return inputs, targets, tf.cast(tf.not_equal(targets, PAD_ID), tf.float32)

    dataset = tf.data.Dataset.zip((dataset, draws)).map(
        example, num_parallel_calls=tf.data.AUTOTUNE
    )
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(
        tf.data.AUTOTUNE
    )


def token_stream(texts, tokenizer):
    """The int32 token ids of `texts`, each followed by `END_ID`, one after
    the other: what a language model reads (as GPT-2 reads its corpus, the
    documents separated by `<|endoftext|>`)."""
    if not len(texts):
        return np.zeros((0,), "int32")
    token_ids = _tokenize(tokenizer, texts)
    token_ids = tf.concat([token_ids, _column(token_ids.nrows(), END_ID)], axis=1)
    return token_ids.flat_values.numpy()


def language_model_dataset(
    token_ids, sequence_length, batch_size, shuffle=False, seed=0, repeat=False
):
    """Windows of a token stream for next-token prediction.

    The stream is cut into consecutive windows of `sequence_length` inputs,
    each with the `sequence_length` tokens after them as targets (a window
    may span documents: the end-of-text token between them is read, as in
    GPT-2). The last window is padded with `PAD_ID`; padded targets get
    weight 0, every other target 1.

    Args:
        token_ids: int 1-D, e.g. from `token_stream`.
        sequence_length: tokens per window.
        batch_size: windows per batch.
        shuffle: shuffle the windows (again every epoch); training then
            takes full batches only, so that every step has one shape.
        seed: shuffling seed.
        repeat: repeat the windows without end (for `fit` with
            `steps_per_epoch`).

    Returns:
        `(dataset, num_windows)`: batches `(inputs, targets, weights)`,
        `(B, sequence_length)` each.
    """
    check_positive_int("sequence_length", sequence_length)
    check_positive_int("batch_size", batch_size)
    token_ids = np.asarray(token_ids, "int32").reshape(-1)
    if len(token_ids) < 2:
        raise ValueError(
            "`token_ids` must hold at least 2 tokens (an input and its target); "
            f"received {len(token_ids)}."
        )
    num_windows = -(-(len(token_ids) - 1) // sequence_length)
    padded = np.full(num_windows * sequence_length + 1, PAD_ID, "int32")
    padded[: len(token_ids)] = token_ids
    inputs = padded[:-1].reshape(num_windows, sequence_length)
    targets = padded[1:].reshape(num_windows, sequence_length)
    weights = (targets != PAD_ID).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((inputs, targets, weights))
    if shuffle:
        dataset = dataset.shuffle(num_windows, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=shuffle)
    return dataset.prefetch(tf.data.AUTOTUNE), num_windows
