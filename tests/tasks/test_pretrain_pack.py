"""`keras-attention pretrain --pack`: the masked language model trained on
rows packed with whole texts (`keras_attention.data.packing.pack_texts`)."""

import json

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.data.packing import pack_texts
from keras_attention.tasks.pretrain import (
    MaskedLanguageModel,
    bucketed_padding_fraction,
    fixed_masked_dataset,
    mask_generator,
    packed_masked_dataset,
)
from tests.tasks.test_classify import keyword_reviews, write_csv
from tests.tasks.test_pretrain import LENGTH, MASK_ID, VOCABULARY_SIZE, tiny_mlm


def short_texts(num_texts, seed):
    """Runs of consecutive ids, 2 to 6 long, right-padded to `LENGTH`."""
    rng = np.random.default_rng(seed)
    texts = np.zeros((num_texts, LENGTH), "int32")
    for row, length in enumerate(rng.integers(2, 7, num_texts)):
        start = rng.integers(4, MASK_ID - length)
        texts[row, :length] = np.arange(start, start + length)
    return texts


def test_packed_batches_hold_the_segment_ids_and_mask_real_tokens():
    generator = mask_generator(VOCABULARY_SIZE, MASK_ID, LENGTH)
    texts = short_texts(64, 0)
    rows = pack_texts(texts, LENGTH, seed=0)
    assert len(rows["token_ids"]) < len(texts) / 2
    dataset = packed_masked_dataset(rows, generator, 4, seed=0)
    for inputs, mask_ids, weights in dataset.as_numpy_iterator():
        assert set(inputs) == {"token_ids", "mask_positions", "segment_ids"}
        assert inputs["segment_ids"].shape == (4, LENGTH)
        chosen = np.take_along_axis(
            inputs["segment_ids"], inputs["mask_positions"], axis=1
        )
        assert np.all(chosen[weights > 0] > 0)  # never padding
        assert np.all(mask_ids[weights > 0] > 3)
    # Texts of 2 to 6 tokens padded to the bucket boundaries (8 and 12 here).
    fraction = bucketed_padding_fraction(texts, [8])
    lengths = (texts > 0).sum(axis=1)
    assert fraction == pytest.approx(1 - lengths.sum() / (8 * len(texts)))


def test_a_packed_model_reads_a_lone_text_as_the_unpacked_one(tmp_path):
    keras.utils.set_random_seed(0)
    unpacked = tiny_mlm()
    packed = MaskedLanguageModel(unpacked.encoder, packed=True)
    packed.set_weights(unpacked.get_weights())  # the head's too
    generator = mask_generator(VOCABULARY_SIZE, MASK_ID, LENGTH)
    texts = short_texts(8, 1)
    [(inputs, _, _)] = list(fixed_masked_dataset(texts, generator, 8, 3, packed=True))
    assert np.array_equal(np.asarray(inputs["segment_ids"]), (texts > 0) * 1)
    expected = unpacked({key: inputs[key] for key in ("token_ids", "mask_positions")})
    np.testing.assert_allclose(packed(inputs), expected, atol=1e-5)
    path = tmp_path / "packed.keras"
    packed.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.packed
    np.testing.assert_allclose(loaded(inputs), expected, atol=1e-5)


@pytest.mark.slow
def test_pretrain_pack_reports_packing(tmp_path):
    data = write_csv(tmp_path / "reviews.csv", keyword_reviews(300))
    out = tmp_path / "pretrain"
    cli.main(
        ["pretrain", "--data", data, "--pack", "--epochs", "1", "--batch-size", "8"]
        + ["--no-xla", "--out", str(out)]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["packed"] is True
    assert 0 <= metrics["padding_fraction"] < 0.2
    assert metrics["tokens_per_second"] > 0
    assert 0 <= metrics["mlm_accuracy"] <= 1 and np.isfinite(metrics["mlm_loss"])
