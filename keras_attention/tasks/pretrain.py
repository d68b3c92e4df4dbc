"""`keras-attention pretrain`: masked-language-model pretraining (as BERT is
pretrained) of the `TransformerClassifier`'s embedding and encoder blocks on
unlabelled text, whose `encoder.keras` then starts a classifier
(`keras-attention classify --encoder DIR/encoder.keras`).

keras-hub masks the tokens (`MaskedLMMaskGenerator`: 15 % of the tokens
selected; of those, 80 % replaced by `[MASK]`, 10 % by a random token, 10 %
left) and predicts them (`MaskedLMHead`, its output projection tied to the
token embedding); the encoder is the library's `TransformerTextEncoder`.
"""

import math
import os

import keras
import numpy as np

from keras_attention.data.bible import load_bible_texts
from keras_attention.data.classification import load_classification_data
from keras_attention.data.language_modeling import load_fortune_texts, read_documents
from keras_attention.data.messages import messages_by_package
from keras_attention.data.packing import PAD_SEGMENT, pack_texts
from keras_attention.data.pipeline import (
    buckets_within,
    classification_dataset,
    encode_texts,
)
from keras_attention.data.tokenization import PAD_ID, UNK_ID
from keras_attention.models import TransformerTextEncoder
from keras_attention.names import PRETRAIN_EXTRA_TEXTS
from keras_attention.tasks import runner
from keras_attention.tasks.classify import SETTINGS as CLASSIFY_SETTINGS
from keras_attention.tasks.common import (
    ArgumentError,
    cached_word_piece,
    check_packed_rows,
    check_training_size,
    phase,
)
from keras_attention.utils.files import write_text
from keras_attention.utils.keras_internals import BuildsTrainingStateFirst
from keras_attention.viz import plot_curves

MASK_TOKEN = "[MASK]"
EXTRA_TEXTS = PRETRAIN_EXTRA_TEXTS
# The classifier's vocabulary and lengths (`tasks.classify.SETTINGS`), the
# masking of BERT, and the pretraining budget.
SETTINGS = {
    "vocabulary_size": CLASSIFY_SETTINGS["vocabulary_size"],
    "lowercase": CLASSIFY_SETTINGS["lowercase"],
    "max_length": CLASSIFY_SETTINGS["max_length"],
    "token_buckets": CLASSIFY_SETTINGS["token_buckets"],
    "mask_selection_rate": 0.15,
    "mask_token_rate": 0.8,
    "random_token_rate": 0.1,
    "epochs": 30,
}


@keras.saving.register_keras_serializable(package="keras_attention")
class ReversibleTokenEmbedding(keras.layers.Layer):
    """A view of a `keras.layers.Embedding` that `MaskedLMHead` can tie its
    output projection to: `call(x)` embeds token ids, `call(x,
    reverse=True)` scores vectors against every token's embedding,
    `x @ embeddings^T`. It owns no weights."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    @property
    def input_dim(self):
        return self.embedding.input_dim

    @property
    def output_dim(self):
        return self.embedding.output_dim

    def call(self, inputs, reverse=False):
        if not reverse:
            return self.embedding(inputs)
        kernel = keras.ops.cast(self.embedding.embeddings, inputs.dtype)
        return keras.ops.matmul(inputs, keras.ops.transpose(kernel))

    def get_config(self):
        return {
            **super().get_config(),
            "embedding": keras.layers.serialize(self.embedding),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["embedding"] = keras.layers.deserialize(config["embedding"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedLanguageModel(BuildsTrainingStateFirst, keras.Model):
    """A `TransformerTextEncoder` with keras-hub's `MaskedLMHead` on top, its
    output projection tied to the encoder's token embedding.

    Args:
        encoder: the `TransformerTextEncoder` to pretrain.
        packed: whether the inputs are packed rows, several texts in one
            (then they also hold `segment_ids`, passed to the encoder).
        **kwargs: `name` and other model arguments.

    Call arguments:
        inputs: a dict of `token_ids` `(B, T)` (some replaced by the mask
            token) and `mask_positions` `(B, P)`, as
            `keras_hub.layers.MaskedLMMaskGenerator` makes them; with
            `packed`, also `segment_ids` `(B, T)`, the text of each token
            (see `TransformerTextEncoder`).

    Returns:
        Logits `(B, P, vocabulary_size)` of the tokens at `mask_positions`.
    """

    def __init__(self, encoder, packed=False, **kwargs):
        import keras_hub

        head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=encoder.vocabulary_size,
            token_embedding=ReversibleTokenEmbedding(encoder.token_embedding),
            intermediate_activation="gelu",
            name="mlm_head",
        )
        inputs = {
            "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
            "mask_positions": keras.Input(
                (None,), dtype="int32", name="mask_positions"
            ),
        }
        encoder_inputs = inputs["token_ids"]
        if packed:
            inputs["segment_ids"] = keras.Input(
                (None,), dtype="int32", name="segment_ids"
            )
            encoder_inputs = {
                "token_ids": inputs["token_ids"],
                "segment_ids": inputs["segment_ids"],
            }
        outputs = head(encoder(encoder_inputs), mask_positions=inputs["mask_positions"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder, self.packed = encoder, bool(packed)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.layers.serialize(self.encoder),
            "packed": self.packed,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def mask_generator(vocabulary_size, mask_token_id, max_length):
    """keras-hub's `MaskedLMMaskGenerator` with BERT's rates (`SETTINGS`):
    at most 15 % of `max_length` (rounded up) positions per text, never
    padding or `[UNK]`."""
    import keras_hub

    return keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=vocabulary_size,
        mask_selection_rate=SETTINGS["mask_selection_rate"],
        mask_token_id=mask_token_id,
        mask_selection_length=math.ceil(SETTINGS["mask_selection_rate"] * max_length),
        unselectable_token_ids=[PAD_ID, UNK_ID],
        mask_token_rate=SETTINGS["mask_token_rate"],
        random_token_rate=SETTINGS["random_token_rate"],
    )


def masked_dataset(
    token_ids,
    generator,
    batch_size,
    shuffle=False,
    seed=0,
    bucket_boundaries=None,
):
    """Batches of `(inputs, mask_ids, mask_weights)` for a
    `MaskedLanguageModel`: texts batched by length as
    `data.pipeline.classification_dataset` batches them (full batches only
    when shuffled), then masked by `generator` anew every epoch (dynamic
    masking, as RoBERTa does)."""
    import tensorflow as tf

    labels = np.zeros(len(token_ids), "int32")
    dataset = classification_dataset(
        token_ids,
        labels,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        bucket_boundaries=bucket_boundaries,
        drop_remainder=shuffle,
    )
    dataset = dataset.map(
        lambda ids, _: _model_data(generator(ids)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def packed_masked_dataset(rows, generator, batch_size, seed=0):
    """Batches of `(inputs, mask_ids, mask_weights)` for a packed
    `MaskedLanguageModel`: the rows of `data.packing.pack_texts` (several
    texts each) shuffled every epoch, full batches only, masked by
    `generator` anew every epoch, with their `segment_ids`."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(
        (rows["token_ids"], rows["segment_ids"])
    )
    dataset = dataset.shuffle(
        len(rows["token_ids"]), seed=seed, reshuffle_each_iteration=True
    )
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(
        lambda ids, segments: _model_data(generator(ids), segments),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def fixed_masked_dataset(token_ids, generator, batch_size, seed=0, packed=False):
    """Like `masked_dataset`, with masks drawn once, from `seed`: held-out
    text, which every evaluation (and a re-runner.run) sees masked alike.
    With `packed`, the inputs also hold `segment_ids` (one text a row:
    1 on its tokens, `PAD_SEGMENT` on padding), for a packed model."""
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    token_ids = np.asarray(token_ids, "int32")
    masked = generator(tf.constant(token_ids))
    segments = None
    if packed:
        segments = np.where(token_ids != PAD_ID, 1, PAD_SEGMENT).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices(_model_data(masked, segments))
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _model_data(masked, segment_ids=None):
    """`(inputs, targets, weights)` from `MaskedLMMaskGenerator`'s dict (and
    the rows' `segment_ids`, for a packed model)."""
    import tensorflow as tf

    # tf.cast: this runs inside tf.data, on any Keras backend.
    inputs = {
        "token_ids": masked["token_ids"],
        "mask_positions": tf.cast(masked["mask_positions"], "int32"),
    }
    if segment_ids is not None:
        inputs["segment_ids"] = segment_ids
    return inputs, masked["mask_ids"], masked["mask_weights"]


def bucketed_padding_fraction(token_ids, boundaries):
    """The fraction of padding in batches of `token_ids` bucketed by length
    (`data.pipeline.classification_dataset`: a text padded to the first of
    `boundaries` that holds it, the longest to the row's length)."""
    lengths = np.sum(np.asarray(token_ids) != PAD_ID, axis=1)
    width = np.asarray(token_ids).shape[1]
    edges = np.array([b for b in boundaries if b < width] + [width])
    padded = edges[np.searchsorted(edges, np.maximum(lengths, 1))]
    return float(1 - lengths.sum() / max(padded.sum(), 1))


def load_extra_texts(name):
    """Unlabelled documents to pretrain on besides the classification
    data's: `"fortunes"` (all Debian fortune files), `"bible"` (the King
    James Bible in passages, `data.bible.load_bible_texts`), `"messages"`
    (the English side of the software messages, `english_message_texts`)
    or a text file (see `data.language_modeling.read_documents`)."""
    if name == "fortunes":
        return load_fortune_texts()
    if name == "bible":
        return load_bible_texts()
    if name == "messages":
        return english_message_texts()
    if isinstance(name, (str, os.PathLike)) and os.path.isfile(name):
        return read_documents(name)
    raise ValueError(
        f"Unknown extra text {name!r}: expected one of {list(EXTRA_TEXTS)} or the "
        "path of an existing text file."
    )


def english_message_texts(max_words=120):
    """The English side of the software messages (`data.messages`), each
    package's messages joined in order into documents of at most
    `max_words` words: help texts rather than single lines."""
    documents = []
    for pairs in messages_by_package().values():
        words = []
        for english, _, _ in pairs:
            message = english.split()
            if words and len(words) + len(message) > max_words:
                documents.append(" ".join(words))
                words = []
            words += message
        if words:
            documents.append(" ".join(words))
    return documents


def most_frequent_token_accuracy(train_ids, dataset):
    """The masked-token accuracy of always guessing the training text's most
    frequent token: the floor a pretrained model must beat."""
    counts = np.bincount(train_ids[train_ids > UNK_ID].reshape(-1))
    guess = int(np.argmax(counts))
    hits = total = 0.0
    for _, mask_ids, weights in dataset:
        weights = np.asarray(weights)
        hits += float(np.sum((np.asarray(mask_ids) == guess) * weights))
        total += float(np.sum(weights))
    return hits / max(total, 1.0)


class Pretraining(runner.Task):
    """`keras-attention pretrain`: a `MaskedLanguageModel` pretrained on the
    training texts of `data` (their labels unused) and `extra_texts`,
    evaluated by its masked-token loss and accuracy on the held-out
    validation texts of `data`; besides `model.keras` it writes
    `encoder.keras` (the encoder, with the tokenizer) and `loss.png`. Each
    epoch is one pass over the pretraining texts; the weights of the epoch
    with the best held-out loss are kept, and training never stops early.

    The vocabulary is learned from the training texts of `data`, as
    `keras-attention classify` learns it, plus a `[MASK]` token. A run that
    continues another (`continue_from`, the `model.keras` of a finished
    pretraining) starts from that model's weights, head included, and keeps
    its sizes, length and vocabulary: a general pretraining continued on a
    task's own text, as Gururangan et al. (2020) continue RoBERTa."""

    command = "pretrain"
    model = "mlm"
    title = "masked language model"
    exports = {"encoder.keras": "encoder"}
    epochs = SETTINGS["epochs"]

    def __init__(
        self,
        data="reviews",
        extra_texts=(),
        learning_rate=1e-3,
        pack=False,
        continue_from=None,
        **kwargs,
    ):
        self.data, self.extra_texts, self.pack = data, list(extra_texts), bool(pack)
        if data == "fortunes" and "fortunes" in self.extra_texts:
            raise ArgumentError(
                "extra text 'fortunes' holds the held-out fortunes of --data fortunes"
            )
        if continue_from is not None and kwargs:
            raise ArgumentError(
                "continue_from brings its own sizes and length; received "
                + ", ".join(f"{name}={value!r}" for name, value in kwargs.items())
            )
        self.learning_rate, self.continue_from = learning_rate, continue_from
        self.max_length = kwargs.pop("max_length", SETTINGS["max_length"])
        self.encoder_kwargs = kwargs

    def _load_continued(self, out_dir):
        """The tokenizer of the model to continue (`continue_from`), whose
        weights and encoder config `build` starts from; writes its
        vocabulary to `out_dir` as a new run writes its own."""
        path = os.fspath(self.continue_from)
        phase(f"loading the masked language model to continue, {path}")
        start = keras.saving.load_model(path, compile=False)
        if not isinstance(start, MaskedLanguageModel):
            raise ArgumentError(
                f"continue_from {path!r} holds a {type(start).__name__}; expected "
                "the MaskedLanguageModel a pretraining saves as OUT/model.keras"
            )
        tokenizer = start.encoder.tokenizer
        if tokenizer is None or MASK_TOKEN not in tokenizer.get_vocabulary():
            raise ArgumentError(
                f"continue_from {path!r}: its encoder has no tokenizer with a "
                f"{MASK_TOKEN} token; expected a model `pretrain` saved"
            )
        self.start_encoder_config = start.encoder.get_config()
        self.start_weights = start.get_weights()
        self.max_length = self.start_encoder_config["max_length"]
        vocabulary_path = os.path.join(out_dir, "vocabulary.txt")
        if not os.path.exists(vocabulary_path):
            write_text(vocabulary_path, "\n".join(tokenizer.get_vocabulary()) + "\n")
        return tokenizer

    def load(self, context):
        options = context.options
        tokenizer = None
        if self.continue_from is not None:
            tokenizer = self._load_continued(context.out_dir)
        max_length = self.max_length
        phase(f"loading {self.data}")
        splits = load_classification_data(self.data, seed=options.seed)
        self.train_texts = splits.train.texts[: options.num_train or None]
        check_training_size(
            1,
            len(self.train_texts),
            "texts",
            num_train=options.num_train,
            available=len(splits.train),
        )
        self.extra = []
        for name in self.extra_texts:
            phase(f"loading {name}")
            self.extra += load_extra_texts(name)
        self.tokenizer = tokenizer = tokenizer or cached_word_piece(
            os.path.join(context.out_dir, "vocabulary.txt"),
            self.train_texts,
            SETTINGS["vocabulary_size"],
            lowercase=SETTINGS["lowercase"],
            extra_tokens=(MASK_TOKEN,),
        )
        vocabulary_size = tokenizer.vocabulary_size()
        phase(f"encoding {len(self.train_texts) + len(self.extra):,} texts")
        self.train_ids = encode_texts(
            self.train_texts + self.extra, tokenizer, max_length
        )
        self.valid_ids = encode_texts(splits.valid.texts, tokenizer, max_length)
        check_training_size(options.batch_size, len(self.train_ids), "texts")
        phase(
            f"{len(self.train_texts):,} training texts of {self.data} and "
            f"{len(self.extra):,} extra texts "
            f"({int(np.sum(self.train_ids != PAD_ID)):,} tokens); "
            f"{len(self.valid_ids):,} held-out texts; vocabulary {vocabulary_size}"
        )
        generator = mask_generator(
            vocabulary_size, tokenizer.token_to_id(MASK_TOKEN), max_length
        )
        self.valid_data = fixed_masked_dataset(
            self.valid_ids, generator, options.batch_size, options.seed, self.pack
        )
        if self.pack:
            rows = pack_texts(self.train_ids, max_length, seed=options.seed)
            self.padding_fraction = check_packed_rows(
                rows, options.batch_size, max_length, "tokens"
            )
            self.train_data = packed_masked_dataset(
                rows, generator, options.batch_size, seed=options.seed
            )
        else:
            self.padding_fraction = bucketed_padding_fraction(
                self.train_ids, SETTINGS["token_buckets"]
            )
            self.train_data = masked_dataset(
                self.train_ids,
                generator,
                options.batch_size,
                shuffle=True,
                seed=options.seed,
                bucket_boundaries=buckets_within(SETTINGS["token_buckets"], max_length),
            )

    def build(self, context, jit_compile):
        if self.continue_from is None:
            encoder = TransformerTextEncoder(
                self.tokenizer.vocabulary_size(),
                max_length=self.max_length,
                tokenizer=self.tokenizer,
                **self.encoder_kwargs,
            )
        else:
            # Built anew here (in the strategy's scope, if any) from the
            # loaded model's config; the tokenizer is the loaded one, as a
            # config alone holds no vocabulary.
            encoder = TransformerTextEncoder.from_config(
                {**self.start_encoder_config, "tokenizer": None}
            )
            encoder.tokenizer = self.tokenizer
        net = MaskedLanguageModel(encoder, packed=self.pack)
        if self.continue_from is not None:
            # The loaded weights, head included, whether or not either run
            # packs its rows.
            net.set_weights(self.start_weights)
        # The loss is the mean over the masked tokens, not over the
        # `mask_positions` slots, some of which are empty.
        return runner.compile_with_adam(
            net,
            jit_compile,
            reduction="mean_with_sample_weight",
            learning_rate=self.learning_rate,
        )

    def fit_arguments(self, context, net):
        return {
            "train_data": self.train_data,
            "validation_data": self.valid_data,
            # Keeps the best epoch, never stops early.
            "patience": context.options.epochs,
        }

    def announce(self, context, net):
        return (
            f"pretraining {net.count_params():,} parameters ("
            f"{net.encoder.count_params():,} in the encoder) for up to "
            f"{context.options.epochs} epochs, "
            f"{SETTINGS['mask_selection_rate']:.0%} of the tokens masked"
        )

    def report(self, context, net, history):
        data, extra_texts, out_dir = self.data, self.extra_texts, context.out_dir
        phase(f"masked-token accuracy on {len(self.valid_ids):,} held-out texts")
        held_out = net.evaluate(self.valid_data, return_dict=True, verbose=0)
        plot_curves(
            {"training": history["loss"], "held-out": history["val_loss"]},
            path=os.path.join(out_dir, "loss.png"),
            ylabel="masked-token cross-entropy (nats)",
            title=f"masked language model on {data}"
            + (
                f" + {', '.join(map(os.path.basename, extra_texts))}"
                if self.extra
                else ""
            )
            + (", continued" if self.continue_from is not None else ""),
        )
        # Every text once an epoch (but a shuffled epoch's last partial batch).
        train_tokens = history["epochs"] * int(np.sum(self.train_ids != PAD_ID))
        metrics = {
            "model": "transformer-encoder",
            "data": data,
            "packed": self.pack,
            "extra_texts": [os.path.basename(name) for name in extra_texts],
            "mlm_loss": float(held_out["loss"]),
            "mlm_accuracy": float(held_out["accuracy"]),
            "mlm_accuracy_most_frequent_token": most_frequent_token_accuracy(
                self.train_ids, self.valid_data
            ),
            "train_texts": len(self.train_texts),
            "extra_train_texts": len(self.extra),
            "train_tokens": int(np.sum(self.train_ids != PAD_ID)),
            "held_out_texts": len(self.valid_ids),
            "vocabulary_size": self.tokenizer.vocabulary_size(),
            "parameters": net.count_params(),
            "encoder_parameters": net.encoder.count_params(),
            "seed": context.options.seed,
            "epochs": history["epochs"],
            "best_epoch": history["best_epoch"],
            "train_seconds": history["train_seconds"],
            "padding_fraction": self.padding_fraction,
            "tokens_per_second": train_tokens / max(history["train_seconds"], 1e-9),
            "mask_selection_rate": SETTINGS["mask_selection_rate"],
            "learning_rate": self.learning_rate,
            "continued_from": None
            if self.continue_from is None
            else os.fspath(self.continue_from),
        }
        return metrics, (
            f"masked language model on {data}: held-out masked-token accuracy "
            f"{metrics['mlm_accuracy']:.3f} (most frequent token "
            f"{metrics['mlm_accuracy_most_frequent_token']:.3f}), loss "
            f"{metrics['mlm_loss']:.3f}; trained {history['train_seconds']:.0f} s; "
            f"encoder in {os.path.join(out_dir, 'encoder.keras')}"
        )


def run_pretrain(
    out_dir,
    data="reviews",
    extra_texts=(),
    learning_rate=1e-3,
    pack=False,
    continue_from=None,
    **kwargs,
):
    """Pretrains a `TransformerTextEncoder` with masked language modelling
    (`Pretraining`) and writes `metrics.json`, `loss.png`, `vocabulary.txt`,
    `model.keras` (the `MaskedLanguageModel`) and `encoder.keras` under
    `out_dir` (`runner.run`: an interrupted training resumes, a finished one
    is evaluated again).

    Args:
        out_dir: output folder.
        data: `"reviews"`, `"fortunes"` or a `text,label` CSV (see
            `data.classification.load_classification_data`); its test split
            is never read.
        extra_texts: more unlabelled text: names of `EXTRA_TEXTS` or text
            files (see `load_extra_texts`).
        learning_rate: Adam's learning rate.
        pack: train on rows packed with whole texts (`data.packing.pack_texts`,
            best fit), each attending only to itself, its positions
            restarting, instead of one text a row batched by length; the
            held-out texts stay one a row.
        continue_from: the `model.keras` of a finished pretraining (a
            `MaskedLanguageModel`) to continue training, on this run's
            texts and with its learning rate, from its weights, sizes,
            length and vocabulary (then give no encoder sizes). The run
            writes its own `model.keras` and `encoder.keras`.
        **kwargs: `options` (a `runner.TrainingOptions`) or its fields by name
            (`epochs`, `batch_size`, `seed`, ...; default batch 32, at most
            `SETTINGS["epochs"]` epochs; `seed` also draws the held-out
            masks); the rest are `TransformerTextEncoder` sizes (default:
            those of `TransformerClassifier`).

    Returns:
        The metrics dict.
    """
    return runner.run_task(
        Pretraining,
        out_dir,
        data=data,
        extra_texts=extra_texts,
        learning_rate=learning_rate,
        pack=pack,
        continue_from=continue_from,
        **kwargs,
    )
