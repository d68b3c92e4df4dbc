"""`keras-attention translate`: train, evaluate and use a translation model."""

import os

import numpy as np

from keras_attention.data.pipeline import encode_texts, translation_dataset
from keras_attention.data.tokenization import (
    END_ID,
    PLACEHOLDER_TOKENS,
    find_placeholders,
    join_punctuation,
    mask_placeholders,
    placeholder_accuracy,
    unmask_placeholders,
)
from keras_attention.data.translation import load_translation_pairs
from keras_attention.decoding import mean_log_probs
from keras_attention.models import RNNSeq2Seq, Transformer
from keras_attention.names import TRANSLATION_MODELS
from keras_attention.tasks import runner
from keras_attention.tasks.common import (
    cached_word_piece,
    check_training_size,
    phase,
)
from keras_attention.viz import plot_attention, plot_score_by_length

MODELS = TRANSLATION_MODELS
# Per-dataset defaults: vocabulary, lengths in tokens, training budget.
SETTINGS = {
    "dates": {
        "vocabulary_size": 400,
        "lowercase": True,
        "max_source_length": 16,
        "max_target_length": 8,
        "bucket_boundaries": None,
        "epochs": 8,
        "length_buckets": (2, 3, 4, 5, 6),
    },
    "text": {
        "vocabulary_size": 8000,
        "lowercase": False,
        "max_source_length": 40,
        "max_target_length": 40,
        "bucket_boundaries": (12, 20, 28),
        "epochs": 30,
        "length_buckets": (5, 8, 11, 14, 17, 20),
    },
    # Software messages: up to 30 words, 64 tokens on either side (the German
    # side runs longer); placeholders as slot tokens (`mask_placeholders`).
    "messages": {
        "vocabulary_size": 8000,
        "lowercase": False,
        "max_source_length": 64,
        "max_target_length": 64,
        "bucket_boundaries": (12, 20, 32, 48),
        "epochs": 30,
        "length_buckets": (5, 7, 9, 12, 16),
        "placeholders": True,
    },
}
EVAL_BATCH_SIZE = 100
# The figures of each model in `comparison.json`.
SUMMARY_KEYS = (
    "exact_match",
    "bleu",
    "chrf",
    "placeholder_accuracy",
    "placeholder_accuracy_when_present",
    "train_seconds",
    "epochs",
)


def build_model(name, source_vocabulary_size, target_vocabulary_size, settings, **kw):
    """The model called `name` (one of `MODELS`) sized for the data."""
    lengths = {
        "max_source_length": settings["max_source_length"],
        "max_target_length": settings["max_target_length"],
    }
    if name == "transformer":
        return Transformer(
            source_vocabulary_size, target_vocabulary_size, **lengths, **kw
        )
    if name == "transformer-base":
        return Transformer.from_preset(
            "transformer_base",
            source_vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
            **lengths,
            **kw,
        )
    attention = "none" if name == "rnn" else name[len("rnn-") :]
    return RNNSeq2Seq(
        source_vocabulary_size,
        target_vocabulary_size,
        attention=attention,
        **lengths,
        **kw,
    )


def settings_for(data):
    """The `SETTINGS` of a `--data` name (or a file's path)."""
    if data == "dates":
        return SETTINGS["dates"]
    if isinstance(data, str) and data.startswith("messages-"):
        return SETTINGS["messages"]
    return SETTINGS["text"]


def translate_texts(model, texts, beam_width=1, length_penalty=0.6):
    """Translates strings with a model that carries its tokenizers.

    A model trained on messages (whose vocabularies have the slots
    `PLACEHOLDER_TOKENS`) sees each source placeholder as a slot token, and
    its translation gets the source's placeholders back in place of the slots.
    """
    _, tokens = _translate_ids(model, texts, beam_width, length_penalty)
    return _decode(model, texts, tokens)


def _decode(model, texts, tokens):
    translations = [_detokenize(model.target_tokenizer, row) for row in tokens]
    if not _has_slots(model.source_tokenizer):
        return translations
    return [
        unmask_placeholders(translation, find_placeholders(text))
        for text, translation in zip(texts, translations, strict=True)
    ]


def _has_slots(tokenizer):
    return PLACEHOLDER_TOKENS[0] in tokenizer.get_vocabulary()


def _masked_sources(tokenizer, texts):
    """The texts with slot tokens for placeholders when the vocabulary has
    them, unchanged otherwise."""
    if not _has_slots(tokenizer):
        return list(texts)
    return [mask_placeholders(text)[0] for text in texts]


def translate_with_confidence(model, texts, beam_width=1, length_penalty=0.6):
    """Translates strings and scores each translation by the model's mean
    token log-probability (see `keras_attention.decoding.mean_log_probs`).

    Inputs unlike the training data (nonsense, another language) still get a
    translation, but a lower score: with the dates Transformer of the
    translation tutorial, real dates score about 0 and nonsense far below.

    Args:
        model: a trained translation model with its tokenizers.
        texts: source strings.
        beam_width: 1 for greedy search, more for beam search.
        length_penalty: alpha of the beam-search length penalty.

    Returns:
        A list of `(translation, mean_log_prob)`, one per text: the string
        `translate_texts` gives, and the mean over its tokens (its `[END]`
        included) of `log p(token | source, previous tokens)`, a float <= 0.
    """
    source_ids, tokens = _translate_ids(model, texts, beam_width, length_penalty)
    scores = mean_log_probs(
        model, {"encoder_token_ids": source_ids}, tokens, EVAL_BATCH_SIZE
    )
    return [
        (translation, float(score))
        for translation, score in zip(
            _decode(model, texts, tokens), scores, strict=True
        )
    ]


def _translate_ids(model, texts, beam_width, length_penalty):
    """The source token ids of `texts` and the generated target token ids."""
    if model.source_tokenizer is None or model.target_tokenizer is None:
        raise ValueError(
            "This model has no tokenizers; train it with `keras-attention "
            "translate`, or pass `source_tokenizer`/`target_tokenizer`."
        )
    source_ids = encode_texts(
        _masked_sources(model.source_tokenizer, texts),
        model.source_tokenizer,
        model.max_source_length,
    )
    return source_ids, _generate(model, source_ids, beam_width, length_penalty)


class Translation(runner.Task):
    """`keras-attention translate`: a translation model trained on `data`,
    evaluated on its test split (exact match, BLEU, chrF, by source length;
    for messages also the placeholders kept), with attention heatmaps and
    the score-by-length plot."""

    command = "translate"
    batch_size = 64

    def __init__(self, data="dates", model="transformer", beam_width=4, **model_kwargs):
        if model not in MODELS:
            raise ValueError(f"`model` must be one of {MODELS}; received {model!r}.")
        self.data, self.model, self.beam_width = data, model, beam_width
        self.model_kwargs = model_kwargs
        self.settings = settings_for(data)
        self.epochs = self.settings["epochs"]

    def load(self, context):
        options, settings = context.options, self.settings
        phase(f"loading {self.data}")
        splits = load_translation_pairs(self.data, seed=options.seed)
        train_pairs = splits["train"][: options.num_train or None]
        valid_pairs = splits["valid"]
        if settings.get("placeholders"):
            train_pairs, valid_pairs = (
                _mask_pairs(train_pairs),
                _mask_pairs(valid_pairs),
            )
        check_training_size(
            options.batch_size,
            len(train_pairs),
            "pairs",
            num_train=options.num_train,
            available=len(splits["train"]),
        )
        self.test_pairs = splits["test"]
        self.tokenizers = _tokenizers(context.out_dir, train_pairs, settings)
        source, target = self.tokenizers
        phase(
            f"{len(train_pairs)} training pairs, {len(self.test_pairs)} test pairs; "
            f"vocabularies {source.vocabulary_size()} (source), "
            f"{target.vocabulary_size()} (target)"
        )
        dataset_args = {
            "source_tokenizer": source,
            "target_tokenizer": target,
            "batch_size": options.batch_size,
            "max_source_length": settings["max_source_length"],
            "max_target_length": settings["max_target_length"],
            "bucket_boundaries": settings["bucket_boundaries"],
        }
        # Full batches only: every training batch then has one of a few static
        # shapes, and XLA compiles each once instead of again for every new
        # remainder size that reshuffling produces.
        self.train_data, self.num_kept = translation_dataset(
            train_pairs,
            shuffle=True,
            seed=options.seed,
            drop_remainder=True,
            **dataset_args,
        )
        check_training_size(
            options.batch_size, self.num_kept, "pairs within the length limits"
        )
        self.valid_data, _ = translation_dataset(valid_pairs, **dataset_args)

    def build(self, context, jit_compile):
        source, target = self.tokenizers
        net = build_model(
            self.model,
            source.vocabulary_size(),
            target.vocabulary_size(),
            self.settings,
            source_tokenizer=source,
            target_tokenizer=target,
            **self.model_kwargs,
        )
        return runner.compile_with_adam(net, jit_compile)

    def fit_arguments(self, context, model):
        return {
            "train_data": self.train_data,
            "validation_data": self.valid_data,
            # Real corpora are small enough to overfit: keep the best epoch.
            "patience": None if self.data == "dates" else 3,
        }

    def report(self, context, net, history):
        test_pairs, beam_width = self.test_pairs, self.beam_width
        placeholders = self.settings.get("placeholders", False)
        phase(f"translating {len(test_pairs)} test sentences (greedy)")
        metrics = evaluate(net, test_pairs, self.settings["length_buckets"])
        if beam_width > 1:
            phase(f"translating again with beam search (width {beam_width})")
            beam = evaluate(
                net, test_pairs, self.settings["length_buckets"], beam_width=beam_width
            )
            metrics.update(
                {f"beam{beam_width}_{k}": v for k, v in beam.items() if k != "samples"}
            )
        samples = metrics.pop("samples")
        _plot_alignments(
            net,
            _long_messages(test_pairs) if placeholders else test_pairs[:3],
            context.out_dir,
            self.model,
        )
        plot_score_by_length(
            {self.model: metrics["by_length"]},
            path=os.path.join(context.out_dir, "score_by_length.png"),
            metric="bleu",
        )
        metrics.update(
            {
                "model": self.model,
                "data": self.data,
                "train_pairs": self.num_kept,
                "test_pairs": len(test_pairs),
                "parameters": net.count_params(),
                "epochs": history["epochs"],
                "train_seconds": history["train_seconds"],
                "final_train_token_accuracy": history["accuracy"][-1],
                "final_valid_token_accuracy": history["val_accuracy"][-1],
                "samples": samples[:5],
            }
        )
        summary = (
            f"{self.model} on {self.data}: exact match "
            f"{metrics['exact_match']:.3f}, BLEU {metrics['bleu']:.1f}, "
            f"chrF {metrics['chrf']:.1f}"
        )
        if placeholders:
            summary += f", placeholders kept {metrics['placeholder_accuracy']:.3f}"
        if beam_width > 1:
            summary += (
                f"; beam {beam_width}: BLEU {metrics[f'beam{beam_width}_bleu']:.1f}"
            )
        return metrics, summary + f"; trained {history['train_seconds']:.0f} s"


def run_translate(out_dir, data="dates", model="transformer", beam_width=4, **kwargs):
    """Trains `model` on `data`, evaluates it on the test split and writes
    `metrics.json`, `model.keras`, attention heatmaps and the score-by-length
    plot under `out_dir` (`runner.run`: an interrupted training resumes, a
    finished one is evaluated again).

    Args:
        out_dir: output folder.
        data: `"dates"`, `"de-en"`, `"messages-de"` or the path of a
            `source<TAB>target` file.
        model: one of `MODELS`.
        beam_width: beam width of the beam-search evaluation (1 skips it).
        **kwargs: `options` (a `runner.TrainingOptions`) or its fields by name
            (`epochs`, `batch_size`, `seed`, ...; default batch 64, epochs
            per dataset); the rest go to the model's constructor.

    Returns:
        The metrics dict.
    """
    return runner.run_task(
        Translation, out_dir, data=data, model=model, beam_width=beam_width, **kwargs
    )


def compare(out_dir, models, data="dates", beam_width=4, **kwargs):
    """Runs `run_translate` for each model in `out_dir/<model>` and plots the
    score of every model by source length on one chart."""
    metric = "exact_match" if data == "dates" else "bleu"

    def plot(results, folder):
        plot_score_by_length(
            {name: runs[0]["by_length"] for name, runs in results.items()},
            path=os.path.join(folder, "score_by_length.png"),
            metric=metric,
        )

    return runner.compare_models(
        out_dir,
        Translation,
        models,
        SUMMARY_KEYS,
        plot,
        data=data,
        beam_width=beam_width,
        **kwargs,
    )


def evaluate(model, pairs, length_buckets, beam_width=1, length_penalty=0.6):
    """Exact match, BLEU and chrF (sacrebleu) of the model's translations of
    `pairs`, overall and by source length in words; for a model trained on
    messages also the placeholder accuracy (`placeholder_accuracy`), over all
    messages and over those whose source has placeholders."""
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    hypotheses = translate_texts(model, sources, beam_width, length_penalty)
    if not _has_slots(model.source_tokenizer):
        sources_if_messages = None
    else:
        sources_if_messages = sources
    scores = _scores(hypotheses, references, sources_if_messages)
    lengths = np.array([len(source.split()) for source in sources])
    by_length = {}
    edges = [0, *length_buckets, max(int(lengths.max()), *length_buckets, 1)]
    for low, high in zip(edges[:-1], edges[1:], strict=True) if length_buckets else ():
        chosen = np.flatnonzero((lengths > low) & (lengths <= high))
        if len(chosen):
            bucket = _scores(
                [hypotheses[i] for i in chosen],
                [references[i] for i in chosen],
                sources_if_messages and [sources[i] for i in chosen],
            )
            by_length[f"{low + 1}-{high}"] = {**bucket, "count": int(len(chosen))}
    return {
        **scores,
        "by_length": by_length,
        "samples": [
            {"source": s, "reference": r, "translation": h}
            for s, r, h in zip(sources, references, hypotheses, strict=True)
        ],
    }


def _scores(hypotheses, references, sources=None):
    import sacrebleu

    placeholders = {}
    if sources:
        placeholders["placeholder_accuracy"] = placeholder_accuracy(sources, hypotheses)
        # Over the messages that have any: the others keep theirs by writing
        # none, which even an untrained model does.
        with_some = [i for i, s in enumerate(sources) if find_placeholders(s)]
        placeholders["placeholder_accuracy_when_present"] = (
            placeholder_accuracy(
                [sources[i] for i in with_some], [hypotheses[i] for i in with_some]
            )
            if with_some
            else None
        )
    return {
        **placeholders,
        "exact_match": float(
            np.mean([h == r for h, r in zip(hypotheses, references, strict=True)])
        ),
        "bleu": float(sacrebleu.corpus_bleu(hypotheses, [references]).score),
        "chrf": float(sacrebleu.corpus_chrf(hypotheses, [references]).score),
    }


def _mask_pairs(pairs):
    """Pairs with slot tokens for the placeholders (`mask_placeholders`)."""
    masked = []
    for source, target in pairs:
        source, placeholders = mask_placeholders(source)
        masked.append((source, mask_placeholders(target, placeholders)[0]))
    return masked


def _long_messages(pairs, count=3, max_words=20):
    """The longest messages of at most `max_words` words that have two or
    more placeholders (for readable attention heatmaps)."""
    chosen = [
        pair
        for pair in pairs
        if len(find_placeholders(pair[0])) >= 2 and len(pair[0].split()) <= max_words
    ]
    chosen.sort(key=lambda pair: -len(pair[0].split()))
    return chosen[:count] or pairs[:count]


def _tokenizers(out_dir, train_pairs, settings):
    """WordPiece tokenizers learned from the training split, cached in
    `out_dir` so that a resumed runner.run has the very same vocabularies; with the
    placeholder slots appended for messages."""
    return [
        cached_word_piece(
            os.path.join(out_dir, f"{side}_vocabulary.txt"),
            texts,
            settings["vocabulary_size"],
            lowercase=settings["lowercase"],
            extra_tokens=PLACEHOLDER_TOKENS if settings.get("placeholders") else (),
        )
        for side, texts in (
            ("source", [s for s, _ in train_pairs]),
            ("target", [t for _, t in train_pairs]),
        )
    ]


def _generate(model, source_ids, beam_width, length_penalty):
    """Generates in batches padded to one size, so that XLA compiles the
    search once per model, whether for the test set or a single sentence."""
    outputs = []
    for start in range(0, len(source_ids), EVAL_BATCH_SIZE):
        batch = source_ids[start : start + EVAL_BATCH_SIZE]
        rows = len(batch)
        batch = np.pad(batch, ((0, EVAL_BATCH_SIZE - rows), (0, 0)))
        tokens = model.generate(
            batch, beam_width=beam_width, length_penalty=length_penalty
        )
        outputs.append(np.asarray(tokens)[:rows])
    return np.concatenate(outputs)


def _detokenize(tokenizer, token_ids):
    token_ids = [int(t) for t in token_ids]
    if END_ID in token_ids:
        token_ids = token_ids[: token_ids.index(END_ID)]
    token_ids = [t for t in token_ids if t > END_ID]
    if not token_ids:
        return ""
    text = tokenizer.detokenize(np.array([token_ids], "int32"))
    text = np.asarray(text).reshape(-1)[0]
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return join_punctuation(str(text))


def _plot_alignments(model, pairs, out_dir, title):
    if getattr(model, "attention", None) == "none":
        return
    alignments = _alignments(model, [source for source, _ in pairs])
    for i, alignment in enumerate(alignments):
        path = os.path.join(out_dir, f"attention_{i}.png")
        _plot_alignment(model, alignment, path, title)


def plot_translation_attention(model, source, path=None, title=None):
    """Translates `source` greedily and draws the cross-attention of each
    output token over the source tokens (the alignment figures of Bahdanau et
    al., 2015). Returns the matplotlib figure."""
    return _plot_alignment(model, _alignments(model, [source])[0], path, title)


def _alignments(model, sources):
    """For each source: its token ids, the ids of its greedy translation and
    the cross-attention `(target, source)` of the one over the other. All
    sources go in one batch, their padding masked: one call per sentence
    compiled anew for each pair of lengths."""
    source_ids = encode_texts(
        _masked_sources(model.source_tokenizer, sources),
        model.source_tokenizer,
        model.max_source_length,
    )
    generated = [
        [int(t) for t in row if t] for row in _generate(model, source_ids, 1, 0.6)
    ]
    # Teacher forcing on each translation: the start token, then all of it
    # but its last token (the start token alone for an empty translation).
    rows = [max(1, len(tokens)) for tokens in generated]
    decoder_ids = np.zeros((len(sources), max(rows)), "int32")
    for row, tokens in zip(decoder_ids, generated, strict=True):
        row[: max(1, len(tokens))] = [model.start_token_id, *tokens[:-1]]
    weights = np.asarray(model.attention_weights(source_ids, decoder_ids))
    alignments = []
    for i, tokens in enumerate(generated):
        source_tokens = [int(t) for t in source_ids[i] if t]
        alignment = weights[i, : rows[i], : len(source_tokens)]
        alignments.append((source_tokens, tokens, alignment))
    return alignments


def _plot_alignment(model, alignment, path, title):
    source_tokens, generated, weights = alignment
    return plot_attention(
        weights,
        source_tokens=[model.source_tokenizer.id_to_token(t) for t in source_tokens],
        target_tokens=[model.target_tokenizer.id_to_token(t) for t in generated],
        path=path,
        title=f"{title or model.name}: cross-attention",
    )
