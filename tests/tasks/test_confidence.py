"""The mean token log-probability that translations and captions are printed
with: one teacher-forced pass must give what the decoder itself computes
step by step."""

import numpy as np
import pytest
from keras import ops
from PIL import Image

from keras_attention.data import train_word_piece
from keras_attention.data.pipeline import encode_texts
from keras_attention.data.tokenization import END_ID
from keras_attention.decoding import mean_log_probs
from keras_attention.models import RNNSeq2Seq, ShowAttendTell, Transformer
from keras_attention.tasks.caption import (
    caption_files,
    caption_files_with_confidence,
    caption_images,
    caption_with_confidence,
)
from keras_attention.tasks.translate import (
    EVAL_BATCH_SIZE,
    translate_texts,
    translate_with_confidence,
)

TEXTS = ["3 march 2021", "tue 04/05/99", "garbage text !!", "zzzz qqqq"]
LENGTHS = {"max_source_length": 8, "max_target_length": 6}


def stepwise_mean_log_probs(model, encoder_inputs, tokens):
    """For each row, the mean of log_softmax(logits)[token] over its `tokens`
    up to the first [END], fed one at a time through the decoder's own step
    (the path of `generate`). The rows go through together, as in
    `generate`; each is scored on its own tokens."""
    tokens = np.asarray(tokens, "int32")
    rows, length = tokens.shape
    inputs = model.generation_inputs(np.asarray(encoder_inputs))
    cache = model.initial_cache(inputs, length)
    previous = np.full((rows,), model.start_token_id, "int32")
    log_probs = np.zeros((rows, length), "float32")
    for index in range(length):
        logits, cache = model.decode_step(
            ops.convert_to_tensor(previous, "int32"), cache, index
        )
        step = np.asarray(ops.log_softmax(ops.cast(logits, "float32")))
        log_probs[:, index] = step[np.arange(rows), tokens[:, index]]
        previous = tokens[:, index]
    means = []
    for row, row_log_probs in zip(tokens, log_probs, strict=True):
        ends = np.flatnonzero(row == END_ID)
        scored = ends[0] + 1 if len(ends) else length
        means.append(float(np.mean(row_log_probs[:scored])))
    return means


def generated(model, source_ids, beam_width=1):
    """`model.generate` on the batch size the translate functions use, which
    they have compiled already."""
    padded = np.pad(source_ids, ((0, EVAL_BATCH_SIZE - len(source_ids)), (0, 0)))
    tokens = model.generate(padded, beam_width=beam_width)
    return np.asarray(tokens)[: len(source_ids)]


@pytest.fixture(scope="module")
def tokenizers():
    sources = ["3 march 2021", "tue 04/05/99", "may 2001, 10th", "1.2.2003"] * 10
    targets = ["2021-03-03", "1999-04-05", "2001-05-10", "2003-02-01"] * 10
    return train_word_piece(sources, 60, lowercase=True), train_word_piece(targets, 40)


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def translator(request, tokenizers):
    """A tiny untrained translator with tokenizers, shared by the tests so
    that each search and the scoring pass compile once per model."""
    return tiny_translator(request.param, tokenizers)


def tiny_translator(kind, tokenizers):
    source, target = tokenizers
    sizes = (source.vocabulary_size(), target.vocabulary_size())
    common = {"source_tokenizer": source, "target_tokenizer": target, **LENGTHS}
    if kind == "transformer":
        return Transformer(
            *sizes,
            hidden_dim=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            intermediate_dim=32,
            dropout=0.0,
            **common,
        )
    return RNNSeq2Seq(
        *sizes, embedding_dim=8, units=16, attention="bahdanau", dropout=0.0, **common
    )


@pytest.mark.parametrize("beam_width", [1, 2])
def test_translation_score_is_the_mean_log_prob_of_the_generated_tokens(
    translator, beam_width
):
    model = translator
    results = translate_with_confidence(model, TEXTS, beam_width=beam_width)
    assert [text for text, _ in results] == translate_texts(
        model, TEXTS, beam_width=beam_width
    )
    source_ids = encode_texts(TEXTS, model.source_tokenizer, model.max_source_length)
    tokens = generated(model, source_ids, beam_width)
    expected = stepwise_mean_log_probs(model, source_ids, tokens)
    for (_, score), want in zip(results, expected, strict=True):
        assert isinstance(score, float)
        assert score <= 0
        assert score == pytest.approx(want, abs=1e-4)


def test_only_the_tokens_up_to_end_are_scored(translator):
    model = translator
    source = encode_texts(TEXTS[:1], model.source_tokenizer, 8)
    sources = np.repeat(source, 4, axis=0)
    tokens = np.array(
        [
            [5, 6, END_ID, 0, 0, 0],  # as generate pads
            [5, 6, END_ID, 7, 8, 9],  # what follows [END] is not scored
            [5, 6, 7, 8, 9, 10],  # no [END]: every token counts
            [END_ID, 0, 0, 0, 0, 0],  # the empty translation
        ],
        "int32",
    )
    scores = mean_log_probs(model, {"encoder_token_ids": sources}, tokens)
    assert scores.shape == (4,) and np.all(scores <= 0)
    assert scores[0] == pytest.approx(scores[1], abs=1e-6)
    expected = stepwise_mean_log_probs(model, sources, tokens)
    np.testing.assert_allclose(scores, expected, atol=1e-4)


def test_scores_do_not_depend_on_the_batch_size(translator):
    model = translator
    sources = encode_texts(TEXTS, model.source_tokenizer, 8)
    tokens = generated(model, sources)
    inputs = {"encoder_token_ids": sources}
    whole = mean_log_probs(model, inputs, tokens, batch_size=100)
    pieces = mean_log_probs(model, inputs, tokens, batch_size=3)  # 3 + 1 padded
    np.testing.assert_allclose(pieces, whole, atol=1e-5)
    empty = {"encoder_token_ids": sources[:0]}
    assert mean_log_probs(model, empty, tokens[:0]).shape == (0,)
    with pytest.raises(ValueError, match="rows"):
        mean_log_probs(model, inputs, tokens[:2])


@pytest.fixture(scope="module")
def captioner():
    tokenizer = train_word_piece(["a bar on the left", "a block on the right"] * 20, 40)
    return ShowAttendTell(
        tokenizer.vocabulary_size(),
        image_shape=(16, 16, 1),
        encoder_filters=(4, 8),
        embedding_dim=8,
        units=16,
        attention_units=8,
        dropout=0.0,
        max_caption_length=6,
        tokenizer=tokenizer,
    )


def test_caption_score_is_the_mean_log_prob_of_the_generated_tokens(captioner):
    images = np.random.default_rng(0).random((3, 16, 16, 1)).astype("float32")
    for beam_width in (1, 2):
        results = caption_with_confidence(captioner, images, beam_width=beam_width)
        captions, tokens = caption_images(captioner, images, beam_width=beam_width)
        assert [caption for caption, _ in results] == captions
        expected = stepwise_mean_log_probs(captioner, images, tokens)
        for (_, score), want in zip(results, expected, strict=True):
            assert isinstance(score, float) and score <= 0
            assert score == pytest.approx(want, abs=1e-4)


def test_caption_files_with_confidence(captioner, tmp_path):
    rng = np.random.default_rng(1)
    paths = []
    for i in range(2):
        path = tmp_path / f"image{i}.png"
        Image.fromarray(rng.integers(0, 256, (16, 16), "uint8")).save(path)
        paths.append(str(path))
    results = caption_files_with_confidence(captioner, paths, out_dir=tmp_path)
    assert [caption for caption, _ in results] == caption_files(captioner, paths)
    assert all(isinstance(score, float) and score <= 0 for _, score in results)
    assert (tmp_path / "image0_attention.png").exists()
