import csv
import json

import keras
import numpy as np
import pytest

from keras_attention import cli
from keras_attention.data import DataFormatError
from keras_attention.tasks.classify import compare, run_classify
from keras_attention.tasks.classify_models import classify_texts
from tests.tasks.callbacks import Record, StopAt
from tests.tasks.outputs import assert_keras_archive, assert_picture

FILLER = (
    "the a this box bag arrived came today yesterday we my kids cat dog tried "
    "bought ordered price size color taste smell flavor coffee tea snack bar "
    "chips sauce it was is were and but with for from"
).split()
KEYWORDS = {
    "great": ["delicious", "wonderful", "perfect"],
    "other": ["awful", "stale", "broken"],
}


def keyword_reviews(num_texts, seed=0):
    """Texts of 1-3 filler sentences, one of which holds a keyword of the
    label: a task a classifier learns only by finding that word."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(num_texts):
        label = rng.choice(list(KEYWORDS))
        sentences = [
            list(rng.choice(FILLER, size=rng.integers(4, 9)))
            for _ in range(rng.integers(1, 4))
        ]
        sentence = sentences[rng.integers(len(sentences))]
        sentence.insert(rng.integers(len(sentence) + 1), rng.choice(KEYWORDS[label]))
        rows.append((". ".join(" ".join(s) for s in sentences) + ".", label))
    return rows


def write_csv(path, rows, header=("text", "label")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


@pytest.fixture(scope="session")
def reviews_csv(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    return write_csv(folder / "reviews.csv", keyword_reviews(600))


@pytest.fixture(scope="session")
def han_dir(reviews_csv, tmp_path_factory):
    out = tmp_path_factory.mktemp("han")
    cli.main(
        [
            "classify",
            "--data",
            reviews_csv,
            "--model",
            "han",
            "--epochs",
            "8",
            "--out",
            str(out),
        ]
    )
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("han_dir")
def test_han_learns_a_csv_and_writes_metrics_plots_and_explanations(han_dir):
    metrics = json.loads((han_dir / "metrics.json").read_text())
    assert metrics["accuracy"] > 0.9 and metrics["macro_f1"] > 0.9
    assert set(metrics["per_class"]) == {"great", "other"}
    assert sum(map(sum, metrics["confusion_matrix"])) == metrics["test_texts"] == 60
    # Deleting the attended words (the keyword) moves the prediction more than
    # deleting random ones.
    deletion = metrics["deletion"]
    assert deletion["top_attended"] > deletion["random"]
    assert_keras_archive(han_dir / "model.keras", "HierarchicalAttentionNetwork")
    assert_picture(han_dir / "confusion_matrix.png")
    assert_picture(han_dir / "explanation_0.png")
    page = (han_dir / "explanation_0.html").read_text()
    assert "sentence-bar" in page and "HierarchicalAttentionNetwork" in page


@pytest.mark.slow
@pytest.mark.xdist_group("han_dir")
def test_loaded_model_labels_text_and_names_the_attended_word(han_dir, capsys):
    texts = ["we tried the coffee. it was wonderful and the bag came today."]
    cli.main(["classify", "--load", str(han_dir / "model.keras"), *texts])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("great\t")
    model = keras.saving.load_model(han_dir / "model.keras")
    [result] = classify_texts(model, texts, num_top_words=1)
    assert result["label"] == "great" and result["probability"] > 0.5
    assert result["top_words"][0][0] == "wonderful"
    assert "wonderful" in line


@pytest.mark.slow
def test_interrupted_training_resumes_without_losing_finished_epochs(
    reviews_csv, tmp_path
):
    options = {"data": reviews_csv, "model": "bag", "epochs": 3, "verbose": 0}
    with pytest.raises(KeyboardInterrupt):
        run_classify(tmp_path, callbacks=[StopAt(2)], **options)
    record = Record()
    metrics = run_classify(tmp_path, callbacks=[record], **options)
    assert record.epochs == [2]  # epochs 0 and 1 were restored, not redone
    assert metrics["epochs"] == 3
    again = run_classify(tmp_path, **options)  # finished: evaluated, not retrained
    assert again["accuracy"] == metrics["accuracy"]


@pytest.mark.slow
def test_compare_reports_mean_and_spread_over_seeds(reviews_csv, tmp_path):
    summary = compare(
        tmp_path,
        ["bag", "transformer"],
        data=reviews_csv,
        seeds=[0, 1],
        epochs=1,
        num_train=200,
        # The comparison's bookkeeping; the XLA path of these models trains in
        # tests/models/test_text_classifiers.py.
        jit_compile=False,
        verbose=0,
    )
    for name in ("bag", "transformer"):
        accuracy = summary["models"][name]["accuracy"]
        assert len(accuracy["values"]) == 2
        assert accuracy["mean"] == pytest.approx(np.mean(accuracy["values"]))
        assert (tmp_path / name / "seed1" / "metrics.json").exists()
    assert "deletion_top_attended" in summary["models"]["transformer"]
    assert "deletion_top_attended" not in summary["models"]["bag"]
    saved = json.loads((tmp_path / "comparison.json").read_text())
    assert saved == summary
    assert_picture(tmp_path / "comparison.png")


def test_malformed_csv_is_reported_with_its_line(tmp_path):
    path = write_csv(tmp_path / "bad.csv", [("fine text", "great"), ("no label",)])
    with pytest.raises(DataFormatError, match="line 3"):
        run_classify(tmp_path / "out", data=path, verbose=0)


def test_unknown_model_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="transformer.*han.*bilstm.*bag"):
        run_classify(tmp_path, model="svm")


def _splits(train_labels, names=("a", "b", "c"), held_out=1):
    from keras_attention.data.classification import ClassificationSplits, LabelledTexts

    def texts(labels):
        return LabelledTexts([f"text {i}" for i in range(len(labels))], labels)

    some = np.zeros(held_out, "int32")
    return ClassificationSplits(
        texts(np.array(train_labels, "int32")), texts(some), texts(some), names
    )


@pytest.mark.parametrize(
    "labels, num_train, message",
    [
        (
            [0, 1],
            2,
            "2 training texts for 3 classes: every class needs at least one "
            "(--num-train 2 takes the first 2 texts of the shuffled training split)",
        ),
        (
            [1, 1, 1, 1],
            4,
            "every training text has the label 'b': a classifier needs examples of "
            "at least 2 labels (--num-train 4 takes the first 4 texts",
        ),
        ([0, 0, 2, 2], None, "no training text has the label 'b'"),
    ],
)
def test_a_training_split_missing_a_class_is_refused(labels, num_train, message):
    from keras_attention.tasks.classify import check_classes
    from keras_attention.tasks.common import ArgumentError

    with pytest.raises(ArgumentError) as error:
        check_classes(_splits(labels), np.array(labels), num_train)
    assert str(error.value).startswith(message)
    assert error.value.exit_status == 2


def test_empty_held_out_splits_are_refused():
    from keras_attention.tasks.classify import check_classes

    labels = [0, 1, 2, 0]
    check_classes(_splits(labels), np.array(labels))
    with pytest.raises(ValueError, match="the validation split is empty: a tenth"):
        check_classes(_splits(labels, held_out=0), np.array(labels))


def _record_split_seed(monkeypatch):
    """Makes the classification task stop once it asks for its splits, and
    returns the list the split seeds it asked for go to."""
    from keras_attention.tasks import classify

    seeds = []

    def load(data, seed=0):
        seeds.append(seed)
        raise RuntimeError("stop here")

    monkeypatch.setattr(classify, "load_classification_data", load)
    return seeds


@pytest.mark.parametrize("labelled, split_seed", [(None, 3), (20, 0)])
def test_a_labelling_budget_keeps_seed_zeros_splits(
    monkeypatch, tmp_path, labelled, split_seed
):
    # The encoder that `pretrain` trains on seed 0's training split must
    # never have read a validation text of a fine-tuning run.
    seeds = _record_split_seed(monkeypatch)
    with pytest.raises(RuntimeError, match="stop here"):
        run_classify(tmp_path, model="bag", labelled=labelled, seed=3, verbose=0)
    assert seeds == [split_seed]


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"labelled": 601}, "--labelled 601 asks for more texts than the 480 of"),
        ({"labelled": 1}, "--labelled 1 is fewer texts than the 2 classes"),
        ({"labelled": 20, "num_train": 20}, "--labelled and --num-train both"),
    ],
)
def test_a_labelling_budget_out_of_range_is_refused(
    reviews_csv, tmp_path, arguments, message
):
    from keras_attention.tasks.common import ArgumentError

    with pytest.raises(ArgumentError, match=message):
        run_classify(tmp_path, data=reviews_csv, model="bag", verbose=0, **arguments)


@pytest.mark.parametrize("labelled", [0, 2.5, True])
def test_a_labelling_budget_must_be_a_positive_integer(labelled):
    from keras_attention.tasks.classify import Classification

    with pytest.raises(ValueError, match="`labelled` must be a positive integer"):
        Classification(labelled=labelled)


def test_the_learning_rate_defaults_to_the_settings_and_must_be_positive():
    from keras_attention.tasks.classify import Classification
    from keras_attention.tasks.classify_models import SETTINGS

    assert Classification().learning_rate == SETTINGS["learning_rate"]
    assert Classification(learning_rate=0.01).learning_rate == 0.01
    with pytest.raises(ValueError, match="`learning_rate` must be a positive number"):
        Classification(learning_rate=-1e-3)


def test_the_monitor_must_be_the_validation_loss_or_macro_f1():
    from keras_attention.tasks.classify import Classification

    assert Classification().monitor == "val_loss"
    assert Classification(monitor="val_macro_f1").monitor == "val_macro_f1"
    with pytest.raises(ValueError, match="`monitor` must be one of"):
        Classification(monitor="val_accuracy")


def test_validation_macro_f1_is_added_to_the_epoch_logs():
    from keras_attention.tasks.classify import ValidationMacroF1

    # A model that always says class 1: on labels [0, 0, 1, 1] its F1 is 0
    # for class 0 and 2/3 for class 1.
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(2, kernel_initializer="zeros")]
    )
    model.layers[0].bias.assign([0.0, 1.0])
    callback = ValidationMacroF1(np.zeros((4, 2), "float32"), [0, 0, 1, 1], 2)
    callback.set_model(model)
    logs = {}
    callback.on_epoch_end(0, logs)
    assert logs["val_macro_f1"] == pytest.approx((0 + 2 / 3) / 2)


def test_a_saved_learning_curve_is_drawn_again(tmp_path):
    from keras_attention.tasks import classify

    def scores(mean):
        return {
            "values": [mean - 0.01, mean + 0.01],
            "interval": [mean - 0.1, mean + 0.1],
        }

    summary = {
        "data": "reviews",
        "seeds": [0, 1],
        "most_frequent_class": {"accuracy": 0.66, "macro_f1": 0.4},
        "arms": {
            arm: {
                size: {"accuracy": scores(0.7 + gain), "macro_f1": scores(0.6 + gain)}
                for size in ("100", "300")
            }
            for arm, gain in (("continued", 0.05), ("scratch", 0.0))
        },
    }
    fig = classify.plot_learning_curve(summary, tmp_path / "curve.png")
    assert_picture(tmp_path / "curve.png")
    assert "reviews" in fig.get_suptitle() and "2 seed(s)" in fig.get_suptitle()
    accuracy, macro_f1 = fig.axes
    assert (accuracy.get_ylabel(), macro_f1.get_ylabel()) == (
        "test accuracy",
        "test macro-F1",
    )
    continued, scratch, majority = macro_f1.get_lines()
    assert (continued.get_label(), scratch.get_label()) == ("continued", "scratch")
    np.testing.assert_allclose(continued.get_ydata(), [0.65, 0.65])
    np.testing.assert_allclose(majority.get_ydata(), [0.4, 0.4])


@pytest.mark.slow
def test_learning_curve_trains_every_arm_size_and_seed_once(
    reviews_csv, tmp_path, monkeypatch
):
    from keras_attention.tasks import classify

    # Two arms of the quickest model, apart in their learning rate and in
    # what early stopping follows.
    arms = {
        "bag": {"model": "bag"},
        "slow": {"model": "bag", "learning_rate": 1e-4, "monitor": "val_macro_f1"},
    }
    quick = {"epochs": 2, "jit_compile": False, "verbose": 0}
    summary = classify.learning_curve(
        tmp_path, arms, sizes=[12, 200], seeds=[0, 1], data=reviews_csv, **quick
    )
    for name in arms:
        for size in ("12", "200"):
            accuracy = summary["arms"][name][size]["accuracy"]
            low, high = accuracy["interval"]
            assert len(accuracy["values"]) == 2
            assert low <= accuracy["mean"] <= high
            run = json.loads(
                (tmp_path / name / f"n{size}" / "seed1" / "metrics.json").read_text()
            )
            assert run["labelled"] == run["train_texts"] == int(size)
            assert run["learning_rate"] == arms[name].get("learning_rate", 1e-3)
            assert run["monitor"] == arms[name].get("monitor", "val_loss")
            assert ("best_valid_macro_f1" in run) == (name == "slow")
    # The keyword task is learned from 200 labelled texts, not from 12.
    few, many = (summary["arms"]["bag"][n]["accuracy"]["mean"] for n in ("12", "200"))
    print(f"bag: 12 labelled {few:.3f}, 200 labelled {many:.3f}")
    assert many > 0.8 and many > few + 0.1
    majority = summary["most_frequent_class"]
    assert 0.4 < majority["accuracy"] < 0.6 and majority["macro_f1"] < 0.4
    assert json.loads((tmp_path / "learning_curve.json").read_text()) == summary
    assert_picture(tmp_path / "learning_curve.png")

    # A second call reads the finished runs instead of training them again.
    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(classify, "run_classify", no_training)
    assert (
        classify.learning_curve(
            tmp_path, arms, sizes=[12, 200], seeds=[0, 1], data=reviews_csv, **quick
        )
        == summary
    )
