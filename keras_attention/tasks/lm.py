"""`keras-attention lm`: train a character-level language model (GPT or its
LSTM baseline), measure its held-out perplexity, and continue text with it."""

import math
import os

from keras_attention.data.language_modeling import (
    character_tokenizer,
    load_language_model_texts,
)
from keras_attention.data.packing import (
    pack_documents,
    packed_dataset,
    split_stream,
)
from keras_attention.data.pipeline import language_model_dataset, token_stream
from keras_attention.data.tokenization import END_ID, PAD_ID
from keras_attention.models import GPT, LSTMLanguageModel
from keras_attention.names import LM_GPT_SIZES, LM_MODELS
from keras_attention.tasks import runner
from keras_attention.tasks.common import (
    ArgumentError,
    check_packed_rows,
    check_training_size,
    phase,
)

# The names marked F401 were this module's before text generation moved to
# lm_generation: importable from here as before.
from keras_attention.tasks.lm_generation import (
    SAMPLERS,  # noqa: F401
    check_draft,
    check_sampler,
    continue_texts,
    make_sampler,
    measure_speculative,
    prompt_token_ids,  # noqa: F401
    speculative_length,
    speculative_texts,  # noqa: F401
    time_speculative,  # noqa: F401
)
from keras_attention.utils.files import write_text
from keras_attention.viz import plot_curves

MODELS = LM_MODELS
# Characters per window (GPT's positions), batches per epoch, and GPT's sizes
# (`LM_GPT_SIZES`).
SETTINGS = {
    "sequence_length": 256,
    "steps_per_epoch": 100,
    "epochs": 10,
    "gpt": {**LM_GPT_SIZES, "dropout": 0.0},
    "lstm_layers": 2,
}
# The prompts of the samples a run writes (each after the end-of-text token,
# so that the model starts a new fortune).
SAMPLE_PROMPTS = ("", "The ", "Q:", "A man ")
SAMPLE_LENGTH = 200
# The figures of each model in `comparison.json`.
SUMMARY_KEYS = (
    "perplexity",
    "parameters",
    "train_seconds",
    "epochs",
    "train_characters",
)


def build_model(name, vocabulary_size, sequence_length, tokenizer=None, **kwargs):
    """GPT (`name="gpt"`) at the task's sizes, or the LSTM (`"lstm"`) with as
    many parameters; `kwargs` override GPT's sizes (and so the LSTM's)."""
    gpt_sizes = {**SETTINGS["gpt"], **kwargs}
    common = {
        "max_length": sequence_length,
        "end_token_id": END_ID,
        "tokenizer": tokenizer,
    }
    gpt = GPT(vocabulary_size, **gpt_sizes, **common)
    if name == "gpt":
        return gpt
    num_layers = SETTINGS["lstm_layers"]
    units = matched_lstm_units(gpt.count_params(), vocabulary_size, num_layers)
    return LSTMLanguageModel(
        vocabulary_size,
        hidden_dim=units,
        num_layers=num_layers,
        dropout=gpt_sizes["dropout"],
        **common,
    )


def matched_lstm_units(parameters, vocabulary_size, num_layers):
    """The LSTM width whose `LSTMLanguageModel` has the number of parameters
    closest to `parameters`: with tied embeddings it has
    `V u + num_layers (8 u^2 + 4 u)` of them."""

    def count(units):
        return vocabulary_size * units + num_layers * (8 * units**2 + 4 * units)

    a, b = 8 * num_layers, vocabulary_size + 4 * num_layers
    estimate = (-b + math.sqrt(b * b + 4 * a * parameters)) / (2 * a)
    candidates = {max(1, math.floor(estimate)), max(1, math.ceil(estimate))}
    return min(candidates, key=lambda units: abs(count(units) - parameters))


def perplexity(model, token_ids, sequence_length, batch_size=32):
    """The model's perplexity per token on a token stream:
    `exp(mean cross-entropy)` over every token after the first, each
    predicted from at most `sequence_length - 1` before it in its window
    (keras-hub's `Perplexity`)."""
    import keras_hub

    dataset, _ = language_model_dataset(token_ids, sequence_length, batch_size)
    metric = keras_hub.metrics.Perplexity(from_logits=True, mask_token_id=PAD_ID)
    # NumPy batches: `predict_on_batch` of any backend takes them.
    for inputs, targets, _ in dataset.as_numpy_iterator():
        metric.update_state(targets, model.predict_on_batch(inputs))
    return float(metric.result())


def packed_inputs(token_ids, segment_ids):
    """GPT's inputs for packed rows: the token ids and each token's document
    (segment id; see `keras_attention.data.packing`)."""
    return {"token_ids": token_ids, "segment_ids": segment_ids}


def packed_perplexity(model, rows, batch_size=32):
    """The model's perplexity per token on packed rows
    (`data.packing.pack_documents`): `exp(mean cross-entropy)` over every
    real target, each predicted within its own document (piece), padding
    left out."""
    import keras_hub

    metric = keras_hub.metrics.Perplexity(from_logits=True, mask_token_id=PAD_ID)
    dataset = packed_dataset(rows, batch_size, packed_inputs)
    for inputs, targets, _ in dataset.as_numpy_iterator():
        metric.update_state(targets, model.predict_on_batch(inputs))
    return float(metric.result())


class LanguageModelling(runner.Task):
    """`keras-attention lm`: a character-level language model trained on
    `data`, its perplexity measured on the held-out test documents, with
    samples of its text; its arguments are `run_lm`'s own."""

    command = "lm"
    epochs = SETTINGS["epochs"]

    def __init__(
        self,
        data="fortunes",
        model="gpt",
        steps_per_epoch=None,
        sampler="top_p",
        temperature=0.8,
        top_k=10,
        top_p=0.9,
        pack=False,
        draft=None,
        draft_tokens=4,
        **model_kwargs,
    ):
        if model not in MODELS:
            raise ValueError(f"`model` must be one of {MODELS}; received {model!r}.")
        check_sampler(sampler)
        if pack and model != "gpt":
            raise ArgumentError(
                f"packing needs the model gpt: the {model} would carry its state "
                "from one document of a row into the next"
            )
        if draft is not None and model != "gpt":
            raise ArgumentError(
                f"a draft model proposes tokens for a GPT, not for the {model}"
            )
        self.data, self.model, self.pack = data, model, bool(pack)
        self.draft_path, self.draft_tokens = draft, draft_tokens
        self.steps_per_epoch = steps_per_epoch or SETTINGS["steps_per_epoch"]
        self.sampling = (sampler, temperature, top_k, top_p)
        self.sequence_length = model_kwargs.pop(
            "sequence_length", SETTINGS["sequence_length"]
        )
        self.model_kwargs = model_kwargs

    def load(self, context):
        options = context.options
        sampler, temperature, top_k, top_p = self.sampling
        self.samplers = {"greedy": make_sampler("greedy")}
        self.samplers[sampler] = make_sampler(
            sampler, temperature, top_k, top_p, options.seed
        )
        phase(f"loading {self.data}")
        splits = load_language_model_texts(self.data, seed=options.seed)
        available = len(splits["train"])
        check_training_size(1, available, "documents", options.num_train, available)
        self.train_texts = splits["train"][: options.num_train or None]
        self.test_documents = len(splits["test"])
        self.tokenizer = character_tokenizer()
        self.draft = None
        if self.draft_path is not None:
            self._load_draft()
        train, valid, self.test_stream = (
            token_stream(texts, self.tokenizer)
            for texts in (self.train_texts, splits["valid"], splits["test"])
        )
        if self.pack:
            self._load_packed(options, train, valid)
        else:
            self._load_windows(options, train, valid)
        phase(
            f"{len(self.train_texts):,} training documents ({len(train):,} "
            f"characters), {len(splits['valid']):,} validation and "
            f"{self.test_documents:,} test documents ({len(self.test_stream):,} "
            f"characters); {self.tokenizer.vocabulary_size()} character ids"
        )

    def _load_draft(self):
        """The draft model (safe mode), checked against the task's tokenizer
        and sample length before any training."""
        import keras

        from keras_attention.models import GPT

        phase(f"loading the draft model {self.draft_path}")
        draft = keras.saving.load_model(self.draft_path, safe_mode=True)
        if not isinstance(draft, GPT):
            raise ArgumentError(
                f"the draft {self.draft_path!r} is a {type(draft).__name__}, not a GPT"
            )
        # The model to come has this task's tokenizer and window.
        target = GPT(
            self.tokenizer.vocabulary_size(),
            max_length=self.sequence_length,
            hidden_dim=8,
            num_heads=1,
            num_layers=1,
            intermediate_dim=8,
            tokenizer=self.tokenizer,
        )
        check_draft(target, draft)
        length = min(SAMPLE_LENGTH, self.sequence_length)
        if speculative_length(target, draft, self.draft_tokens) < length:
            raise ArgumentError(
                f"the draft's positions ({draft.max_length}) do not reach the "
                f"{length} characters of the samples and the {self.draft_tokens} "
                "proposals read past them"
            )
        self.draft = draft

    def _load_windows(self, options, train, valid):
        """Windows of the token stream (documents read across)."""
        sequence_length = self.sequence_length
        self.train_data, num_windows = language_model_dataset(
            train,
            sequence_length,
            options.batch_size,
            shuffle=True,
            seed=options.seed,
            repeat=True,
        )
        check_training_size(
            options.batch_size, num_windows, f"windows of {sequence_length} characters"
        )
        self.valid_data, _ = language_model_dataset(
            valid, sequence_length, options.batch_size
        )
        # Only the last window ends in padding.
        self.padding_fraction = 1 - (len(train) - 1) / (num_windows * sequence_length)

    def _load_packed(self, options, train, valid):
        """Rows of whole documents, each token with its document's id
        (`data.packing`); the test documents too."""
        sequence_length = self.sequence_length
        rows = pack_documents(split_stream(train), sequence_length, seed=options.seed)
        self.padding_fraction = check_packed_rows(
            rows, options.batch_size, sequence_length, "characters"
        )
        self.train_data = packed_dataset(
            rows,
            options.batch_size,
            packed_inputs,
            shuffle=True,
            seed=options.seed,
            repeat=True,
        )
        self.valid_data = packed_dataset(
            pack_documents(split_stream(valid), sequence_length),
            options.batch_size,
            packed_inputs,
        )
        self.test_rows = pack_documents(split_stream(self.test_stream), sequence_length)

    def build(self, context, jit_compile):
        net = build_model(
            self.model,
            self.tokenizer.vocabulary_size(),
            self.sequence_length,
            tokenizer=self.tokenizer,
            **self.model_kwargs,
        )
        return runner.compile_with_adam(net, jit_compile)

    def fit_arguments(self, context, net):
        return {
            "train_data": self.train_data,
            "validation_data": self.valid_data,
            "steps_per_epoch": self.steps_per_epoch,
        }

    def announce(self, context, net):
        options = context.options
        return (
            f"training {net.count_params():,} parameters for up to "
            f"{options.epochs} epochs of {self.steps_per_epoch} batches of "
            f"{options.batch_size} x {self.sequence_length} characters"
        )

    def report(self, context, net, history):
        batch_size, test = context.options.batch_size, self.test_stream
        phase(f"measuring perplexity on {len(test):,} test characters")
        if self.pack:
            test_perplexity = packed_perplexity(net, self.test_rows, batch_size)
        else:
            test_perplexity = perplexity(net, test, self.sequence_length, batch_size)
        plot_curves(
            {"training": history["loss"], "validation": history["val_loss"]},
            path=os.path.join(context.out_dir, "loss.png"),
            xlabel=f"epoch ({self.steps_per_epoch} batches)",
            ylabel="cross-entropy (nats per character)",
            title=f"{self.model} on {self.data}",
        )
        samples_path = os.path.join(context.out_dir, "samples.txt")
        phase(f"writing samples to {samples_path}")
        samples = write_samples(
            net, samples_path, self.samplers, self.draft, self.draft_tokens
        )
        train_characters = (
            history["epochs"] * self.steps_per_epoch * batch_size * self.sequence_length
        )
        train_tokens = train_characters * (1 - self.padding_fraction)
        metrics = {
            "model": self.model,
            "data": self.data,
            "packed": self.pack,
            "perplexity": test_perplexity,
            "bits_per_character": math.log2(test_perplexity),
            "parameters": net.count_params(),
            "epochs": history["epochs"],
            "train_seconds": history["train_seconds"],
            "train_characters": train_characters,
            "padding_fraction": self.padding_fraction,
            "train_tokens": int(round(train_tokens)),
            "tokens_per_second": train_tokens / max(history["train_seconds"], 1e-9),
            "train_documents": len(self.train_texts),
            "test_documents": self.test_documents,
            "test_characters": len(test),
            "sequence_length": self.sequence_length,
            "final_train_loss": history["loss"][-1],
            "final_valid_loss": history["val_loss"][-1],
            "samples": samples,
        }
        if self.draft is not None:
            length = min(
                SAMPLE_LENGTH, speculative_length(net, self.draft, self.draft_tokens)
            )
            phase(
                f"timing speculative decoding (draft {self.draft_path}) against "
                "greedy search"
            )
            speculative = measure_speculative(
                net,
                self.draft,
                SAMPLE_PROMPTS,
                length,
                self.draft_tokens,
                temperature=self.sampling[1],
                separately=True,
            )
            metrics["speculative"] = {
                "draft": self.draft_path,
                "draft_parameters": self.draft.count_params(),
                **speculative,
            }
            for what, figures in (
                ("together", speculative),
                ("one at a time", speculative["one_at_a_time"]),
            ):
                phase(
                    f"speculative decoding, the prompts {what}: "
                    f"{figures['tokens_per_round']:.2f} characters per pass of "
                    f"the model ({figures['accepted']} of {figures['proposed']} "
                    f"proposals kept), {figures['speedup']:.2f}x greedy search's "
                    "speed"
                )
        return metrics, (
            f"{self.model} on {self.data}: held-out perplexity "
            f"{test_perplexity:.3f} ({metrics['bits_per_character']:.3f} bits per "
            f"character), {metrics['parameters']:,} parameters; trained "
            f"{history['train_seconds']:.0f} s"
        )


def run_lm(out_dir, data="fortunes", model="gpt", **kwargs):
    """Trains a character-level language model on `data`, measures its
    perplexity on the held-out test documents and writes `metrics.json`,
    `loss.png`, `samples.txt` and `model.keras` under `out_dir`
    (`runner.run`: an interrupted training resumes, a finished one is
    evaluated again).

    Args:
        out_dir: output folder.
        data: `"fortunes"` (Debian `fortunes`) or the path of a text file
            (see `keras_attention.data.language_modeling.read_documents`).
        model: `"gpt"` or `"lstm"` (its parameter count matched to GPT's).
        steps_per_epoch: batches per epoch (default 100).
        sampler: the sampler of `samples.txt` besides greedy search: one of
            `SAMPLERS` (default `"top_p"`), with `temperature` (0.8), `top_k`
            (10) and `top_p` (0.9) (see `make_sampler`; seeded with `seed`).
        pack: train on rows packed with whole documents
            (`data.packing.pack_documents`, best fit) fed to GPT with their
            `segment_ids`, each document attending only to itself and its
            positions restarting, instead of windows of the token stream
            read across documents; the perplexity is then measured on the
            test documents packed alike (each read alone). GPT only.
        draft: the path of a smaller GPT's `.keras` file over the same
            characters (another `lm` run's `model.keras`; loaded in safe
            mode): the greedy samples are then decoded speculatively
            (`speculative_generate`, `draft_tokens` proposals per round,
            default 4), and `metrics.json` gets `speculative`: the accepted
            proposals per round and their share, the rounds, and the wall
            time against greedy search on the same prompts (timed in turn;
            `measure_speculative`), all together and one at a time (a batch
            advances at its slowest row's pace). GPT only.
        **kwargs: the task's own arguments above (`LanguageModelling`'s);
            `options` (a `runner.TrainingOptions`) or its fields by name (`epochs`
            of `steps_per_epoch` batches, default 10; `batch_size`, windows
            of `sequence_length` characters, default 32; `seed`, ...); the
            rest are GPT's sizes (`hidden_dim`, `num_layers`, ...;
            `sequence_length` sets the window), which the LSTM matches.

    Returns:
        The metrics dict.
    """
    return runner.run_task(LanguageModelling, out_dir, data=data, model=model, **kwargs)


def write_samples(model, path, samplers, draft=None, num_draft_tokens=4):
    """Writes the continuations of `SAMPLE_PROMPTS` by each of `samplers`
    (`{name: sampler}`) to `path`; returns them as a list of dicts. With a
    `draft` model, the greedy ones by speculative decoding (the same
    texts)."""
    length = min(SAMPLE_LENGTH, model.max_length)
    if draft is not None:
        length = min(length, speculative_length(model, draft, num_draft_tokens))
    samples = []
    for name, sampler in samplers.items():
        speculative = draft is not None and name == "greedy"
        texts = continue_texts(
            model,
            SAMPLE_PROMPTS,
            length,
            sampler,
            draft=draft if speculative else None,
            num_draft_tokens=num_draft_tokens,
        )
        samples += [
            {"sampler": name, "prompt": prompt, "text": text}
            for prompt, text in zip(SAMPLE_PROMPTS, texts, strict=True)
        ]
    write_text(
        path,
        "".join(
            f"== {sample['sampler']}, prompt {sample['prompt']!r}\n{sample['text']}\n\n"
            for sample in samples
        ),
    )
    return samples


def compare(out_dir, models, data="fortunes", **kwargs):
    """Runs `run_lm` for each model in `out_dir/<model>`, draws their
    validation losses on one chart (`loss.png`) and writes
    `comparison.json`; returns `{model: metrics}`."""

    def plot(results, folder):
        plot_curves(
            {
                name: runner.read_history(os.path.join(out_dir, name))["val_loss"]
                for name in results
            },
            path=os.path.join(folder, "loss.png"),
            ylabel="validation cross-entropy (nats per character)",
            title=f"language models on {data}",
        )

    return runner.compare_models(
        out_dir, LanguageModelling, models, SUMMARY_KEYS, plot, data=data, **kwargs
    )
