"""Test support (never imported by the library): which kernel serves the
attention of real workloads, the GPU faked.

Each workload of `WORKLOADS` builds a tiny model (our layers as users call
them, the reference models, keras-hub's families after `swap_attention`),
then runs one training-mode forward and, for a decoder, one cached decode
step. On JAX both are traced only (`jax.jit(fn).trace`) with an H100 faked
(`tests/ops/fake_gpu.py`), so nothing heavy runs. On PyTorch they run
eagerly: the torch plan does not look at the device.

While a workload traces, every attention call is recorded with the facts
that decide its path (`Recorder`): the op's plan and its arguments, the
weights asked for (dropout, returned scores), Keras' multi-axis einsum, and
the score layers that never call the op (additive attention, pooling). A
call off the fused kernels gets a reason from `REASONS`, derived from those
facts (`reason_of`).

`python -m tests.path_table --write` writes `docs/data/attention-paths.json`
and the table of `docs/attention_paths.md` (PyTorch's rows from a child
process on the torch backend); `tests/test_attention_paths.py` checks that
the table is the plan's.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import traceback

import keras
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
JSON_PATH = ROOT / "docs" / "data" / "attention-paths.json"
MARKDOWN_PATH = ROOT / "docs" / "attention_paths.md"
BACKENDS = ("jax", "torch")
DTYPES = ("bfloat16", "float32")
POLICY = {"bfloat16": "mixed_bfloat16", "float32": "float32"}
FUSED = ("jax_cudnn", "jax_pallas", "torch_sdpa")
# The pseudo-path of the layers that score keys with their own function and
# never call `dot_product_attention`.
SCORE_LAYER = "score_layer"

VOCABULARY = 50
BATCH, LENGTH, REAL = 2, 16, 12
WIDTH, HEADS, HEAD_DIM = 32, 2, 16

# Why a call is off the fused kernels, by the facts recorded.
REASONS = {
    "dropout": "Dropout on the attention weights in training needs the weights "
    "(until the kernels take dropout).",
    "scores": "The caller asks for the attention scores, which only the "
    "standard path gives.",
    "weights_returned": "The layer asks the op for its weights "
    "(`return_weights=True`): SAGAN's `SelfAttention2D` always does.",
    "multi_axis": "Multi-axis attention uses Keras' einsum formulation over "
    "several axes.",
    "dense_mask": "A dense (B, T, S) mask: only the keras.ops paths read it.",
    "dense_bias": "A dense bias added to the scores: only the keras.ops paths read it.",
    "custom_part": "A custom score or mask function, or T5's table: Triton "
    "has no gather.",
    "head_dim": "Heads larger than the Pallas kernel's 256.",
    "flash_off": "`flash_attention=False` asks for the standard path.",
    "chunked": "The layer's plan chose the chunked path by length.",
    "score_layer": "Additive attention and attention pooling score keys with "
    "their own function, outside `dot_product_attention`.",
    "sdpa_soft_cap": "PyTorch's SDPA has no soft cap (Gemma 2 and 3).",
    "sdpa_lse": (
        "SDPA returns no log-sum-exp, which sinks need (GPT-OSS); "
        "FlexAttention gives it on CUDA."
    ),
    "cpu_plan": "No fused kernel serves this call on this backend.",
    "unexplained": "No recorded fact explains it: look at the plan.",
}


# -- recording ---------------------------------------------------------------


class Recorder:
    """Records each attention call while installed: `calls` is a list of
    `(path, reason or None)`."""

    def __init__(self):
        self.calls = []

    @contextlib.contextmanager
    def installed(self, monkeypatch):
        from keras_attention.layers import _attention_paths
        from keras_attention.ops import attention

        plan_kernel = attention.plan_kernel
        with_weights = _attention_paths.attend_with_weights
        over_axes = _attention_paths.attend_over_axes

        def recorded_plan(spec, query, value, **arguments):
            path = plan_kernel(spec, query, value, **arguments)
            # `attention_path` asks the plan too: record the op's own call.
            if sys._getframe(1).f_code.co_name == "dot_product_attention":
                self.calls.append((path, reason_of(path, spec, query, arguments)))
            return path

        def recorded_weights(*args, **kwargs):
            dropout = args[4]  # (query, key, value, scale, dropout)
            rate = dropout.func.rate  # partial(the Dropout layer, training=)
            dropped = bool(dropout.keywords.get("training")) and rate > 0
            self.calls.append(("standard", "dropout" if dropped else "scores"))
            return with_weights(*args, **kwargs)

        def recorded_axes(*args):
            self.calls.append(("multi_axis", "multi_axis"))
            return over_axes(*args)

        monkeypatch.setattr(attention, "plan_kernel", recorded_plan)
        monkeypatch.setattr(_attention_paths, "attend_with_weights", recorded_weights)
        monkeypatch.setattr(_attention_paths, "attend_over_axes", recorded_axes)
        yield self


def reason_of(path, spec, query, arguments):
    """The key of `REASONS` for a call of `dot_product_attention` that the
    plan sent to `path`, None for a fused kernel."""
    from keras_attention.ops.plan import PALLAS_MASKS, PALLAS_SCORES, is_key_padding

    if path in FUSED:
        return None
    if arguments.get("return_weights"):
        return "weights_returned"
    if arguments.get("flash_attention") is False:
        return "flash_off"
    if spec.bias is not None:
        return "dense_bias"
    if spec.mask is not None and not is_key_padding(spec.mask):
        return "dense_mask"
    kinds = (*spec.mask_kinds(), *spec.score_kinds())
    if any(kind not in PALLAS_MASKS + PALLAS_SCORES for kind in kinds):
        return "custom_part"
    if (query.shape[-1] or 0) > 256:
        return "head_dim"
    if keras.backend.backend() == "torch" and "soft_cap" in kinds:
        return "sdpa_soft_cap"
    if keras.backend.backend() == "torch" and arguments.get("return_lse"):
        return "sdpa_lse"
    if keras.backend.backend() != "jax":
        return "cpu_plan"
    if path == "chunked":
        return "chunked"
    return "unexplained"


def our_attention_layers(model):
    """Our attention layers in `model`: `MultiHeadAttention` and its
    subclasses, and the score layers (additive attention, pooling)."""
    from keras_attention.layers import MultiHeadAttention
    from keras_attention.layers.attention_pooling import AttentionPooling
    from keras_attention.layers.base_attention import ScoreAttention

    kinds = (MultiHeadAttention, ScoreAttention, AttentionPooling)
    models = model if isinstance(model, list | tuple) else [model]
    found = []
    for m in models:
        for layer in m._flatten_layers(include_self=True, recursive=True):
            if isinstance(layer, kinds) and layer not in found:
                found.append(layer)
    return found


def entries(recorder, model):
    """The sorted `[path, reason]` pairs of the recorded calls and of the
    score layers of `model`; checks that each `MultiHeadAttention`'s
    `attention_path` is among the recorded paths."""
    from keras_attention.layers import MultiHeadAttention

    found = set(recorder.calls)
    for layer in our_attention_layers(model):
        if not isinstance(layer, MultiHeadAttention):
            found.add((SCORE_LAYER, "score_layer"))
        elif layer.attention_path is not None:
            paths = {path for path, _ in found}
            if layer.attention_path not in paths:
                raise AssertionError(
                    f"{layer.name}.attention_path is {layer.attention_path!r}, "
                    f"not among the recorded paths {sorted(paths)}."
                )
    return sorted([path, reason] for path, reason in found)


# -- workloads ---------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """A built workload: `model` (or a list of models) whose layers are
    walked, `train` and `decode` functions of NumPy/tensor `*_args`
    (`decode` None for an encoder), traced on JAX, run on PyTorch."""

    model: object
    train: object
    train_args: tuple
    decode: object = None
    decode_args: tuple = ()


def token_ids(batch=BATCH, length=LENGTH, real=REAL, seed=0, vocabulary=VOCABULARY):
    """Random ids of which the first `real` of each row are real, 0 after."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocabulary, (batch, length)).astype("int32")
    ids[:, real:] = 0
    return ids


def _layer_run(call, mask_zero=False, dropout=0.0, layer="mha"):
    """A functional model: token ids, an `Embedding`, our attention called
    as `call(attention, x, ids)`."""
    from keras_attention.layers import GroupedQueryAttention, MultiHeadAttention

    tokens = keras.Input((LENGTH,), dtype="int32")
    x = keras.layers.Embedding(VOCABULARY, WIDTH, mask_zero=mask_zero)(tokens)
    if layer == "gqa":
        attention = GroupedQueryAttention(HEAD_DIM, HEADS * 2, HEADS, dropout=dropout)
    else:
        attention = MultiHeadAttention(HEADS, HEAD_DIM, dropout=dropout)
    model = keras.Model(tokens, call(attention, x, tokens))
    ids = token_ids()
    return Run(model, lambda ids: model(ids, training=True), (ids,))


def _padding(tokens):
    return keras.ops.not_equal(tokens, 0)


def layer_workloads():
    """Our layers as users call them."""
    return {
        "MultiHeadAttention, Embedding(mask_zero=True)": lambda: _layer_run(
            lambda a, x, t: a(x, x), mask_zero=True
        ),
        "MultiHeadAttention, causal": lambda: _layer_run(
            lambda a, x, t: a(x, x, use_causal_mask=True)
        ),
        "MultiHeadAttention, attention_mask (B, 1, S)": lambda: _layer_run(
            lambda a, x, t: a(x, x, attention_mask=_padding(t)[:, None, :])
        ),
        "MultiHeadAttention, attention_mask (B, T, S)": lambda: _layer_run(
            lambda a, x, t: a(
                x,
                x,
                attention_mask=_padding(t)[:, None, :] & _padding(t)[:, :, None],
            )
        ),
        "MultiHeadAttention, dropout=0.1": lambda: _layer_run(
            lambda a, x, t: a(x, x, use_causal_mask=True), dropout=0.1
        ),
        "MultiHeadAttention, attention_axes=(1, 2)": _multi_axis_run,
        "GroupedQueryAttention, causal, Keras masks": lambda: _layer_run(
            lambda a, x, t: a(x, x, use_causal_mask=True), mask_zero=True, layer="gqa"
        ),
    }


def _multi_axis_run():
    from keras_attention.layers import MultiHeadAttention

    images = keras.Input((4, 4, WIDTH))
    attention = MultiHeadAttention(HEADS, HEAD_DIM, attention_axes=(1, 2))
    model = keras.Model(images, attention(images, images))
    x = np.random.default_rng(0).normal(size=(BATCH, 4, 4, WIDTH)).astype("float32")
    return Run(model, lambda x: model(x, training=True), (x,))


def _seq2seq_run(model, decode_cache):
    source, target = token_ids(seed=1), token_ids(seed=2)
    x = {"encoder_token_ids": source, "decoder_token_ids": target}
    cache = decode_cache(model, source)
    step = np.int32(3)
    return Run(
        model,
        lambda x: model(x, training=True),
        (x,),
        model.decode_step,
        (target[:, 0], cache, step),
    )


def transformer_run(dropout):
    from keras_attention.models import Transformer

    model = Transformer(
        VOCABULARY,
        VOCABULARY,
        hidden_dim=WIDTH,
        num_heads=HEADS,
        num_encoder_layers=1,
        num_decoder_layers=1,
        intermediate_dim=2 * WIDTH,
        dropout=dropout,
        max_source_length=LENGTH,
        max_target_length=LENGTH,
    )
    return _seq2seq_run(model, lambda m, s: m.initial_cache(s, LENGTH))


def rnn_seq2seq_run():
    from keras_attention.models import RNNSeq2Seq

    model = RNNSeq2Seq(
        VOCABULARY,
        VOCABULARY,
        embedding_dim=WIDTH,
        units=WIDTH,
        attention="bahdanau",
        max_source_length=LENGTH,
        max_target_length=LENGTH,
    )
    return _seq2seq_run(model, lambda m, s: m.initial_cache(s, LENGTH))


def gpt_run(dropout):
    from keras_attention.models import GPT

    model = GPT(
        VOCABULARY,
        max_length=2 * LENGTH,
        hidden_dim=WIDTH,
        num_heads=HEADS,
        num_layers=1,
        intermediate_dim=2 * WIDTH,
        dropout=dropout,
    )
    ids = token_ids()
    cache = model.initial_cache(BATCH, LENGTH)
    return Run(
        model,
        lambda ids: model(ids, training=True),
        (ids,),
        model.decode_step,
        (ids[:, 0], cache, np.int32(3)),
    )


def transformer_classifier_run(dropout):
    from keras_attention.models import TransformerClassifier

    model = TransformerClassifier(
        VOCABULARY,
        3,
        max_length=LENGTH,
        hidden_dim=WIDTH,
        num_heads=HEADS,
        num_layers=1,
        intermediate_dim=2 * WIDTH,
        dropout=dropout,
    )
    return Run(model, lambda ids: model(ids, training=True), (token_ids(),))


def han_run():
    from keras_attention.models import HierarchicalAttentionNetwork

    model = HierarchicalAttentionNetwork(
        VOCABULARY, 3, max_sentences=3, max_words=LENGTH, embedding_dim=WIDTH
    )
    ids = np.stack([token_ids(seed=s) for s in range(3)], axis=1)
    return Run(model, lambda ids: model(ids, training=True), (ids,))


def show_attend_tell_run():
    from keras_attention.models import ShowAttendTell

    model = ShowAttendTell(
        VOCABULARY,
        image_shape=(16, 16, 1),
        encoder_filters=(8, 16),
        embedding_dim=WIDTH,
        units=WIDTH,
        attention_units=WIDTH,
        max_caption_length=LENGTH,
    )
    images = np.random.default_rng(0).normal(size=(BATCH, 16, 16, 1))
    images = images.astype("float32")
    ids = token_ids()
    cache = model.initial_cache(images)
    return Run(
        model,
        lambda x: model(x, training=True),
        ({"images": images, "decoder_token_ids": ids},),
        model.decode_step,
        (ids[:, 0], cache, np.int32(3)),
    )


def sagan_run():
    from keras_attention.models import SAGAN

    gan = SAGAN(
        image_shape=(16, 16, 1),
        latent_dim=WIDTH,
        generator_width=16,
        discriminator_width=16,
        attention_resolution=8,
    )
    z = np.random.default_rng(0).normal(size=(BATCH, WIDTH)).astype("float32")

    def train(z):
        images = gan.generator(z, training=True)
        return gan.discriminator(images, training=True)

    return Run([gan.generator, gan.discriminator], train, (z,))


def model_workloads():
    """The reference tasks."""
    return {
        "Transformer (translate)": lambda: transformer_run(0.1),
        "Transformer (translate), dropout=0": lambda: transformer_run(0.0),
        "RNNSeq2Seq, Bahdanau (translate)": rnn_seq2seq_run,
        "TransformerClassifier (classify)": lambda: transformer_classifier_run(0.1),
        "TransformerClassifier (classify), dropout=0": lambda: (
            transformer_classifier_run(0.0)
        ),
        "HierarchicalAttentionNetwork (classify)": han_run,
        "GPT (LM)": lambda: gpt_run(0.1),
        "GPT (LM), dropout=0": lambda: gpt_run(0.0),
        "ShowAttendTell (captioning)": show_attend_tell_run,
        "SAGAN (generator and discriminator)": sagan_run,
    }


# keras-hub's families: the tiny sizes of tests/integrations with heads of
# 16 (2 query heads, 1 key/value head), one block (Gemma 3: its six, five
# windowed and one global; Qwen 3.5: a DeltaNet block and an attention one;
# Gemma 4: its six, windows, global layers and two sharing keys and values).
HUB_DECODER_SIZES = {
    "hidden_dim": WIDTH,
    "num_query_heads": HEADS,
    "num_key_value_heads": 1,
    "num_layers": 1,
}
HUB_DECODERS = (
    "llama",
    "llama3",
    "mistral",
    "mixtral",
    "phi3",
    "qwen",
    "qwen3",
    "qwen_moe",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma4",
    "gpt_oss",
    "qwen3_5",
)
HUB_GENERIC = {
    "gpt2": "GPT2CausalLM",
    "opt": "OPTCausalLM",
    "bert": None,
    "roberta": None,
    "xlm_roberta": None,
    "distil_bert": None,
    "electra": None,
    "albert": None,
}


def _hub_ids(with_segments=False, with_positions=False):
    x = {"token_ids": token_ids(), "padding_mask": token_ids() != 0}
    if with_segments:
        x["segment_ids"] = np.zeros((BATCH, LENGTH), "int32")
    if with_positions:  # Gemma 4's backbone takes them
        x["position_ids"] = np.tile(np.arange(LENGTH, dtype="int32"), (BATCH, 1))
    return x


def _hub_causal_lm_run(causal_lm, extra_build=(), with_positions=False):
    from keras_attention.integrations.keras_hub import swap_attention

    causal_lm = swap_attention(causal_lm)
    x = _hub_ids(with_positions=with_positions)
    ids = x["token_ids"]
    _, cache = causal_lm._build_cache(ids, *extra_build)[:2]

    def decode(token, cache, index):
        return causal_lm.call_with_cache(token[:, None], cache, index)[0]

    return Run(
        causal_lm.backbone,
        lambda x: causal_lm(x, training=True),
        (x,),
        decode,
        (ids[:, 0], cache, np.int32(3)),
    )


def hub_decoder_run(name):
    from tests.integrations import keras_hub_models

    overrides = dict(HUB_DECODER_SIZES)
    if name.startswith("gemma") or name.startswith("qwen3"):
        overrides["head_dim"] = HEAD_DIM
    if name in ("gemma3", "gemma4"):
        overrides["num_layers"] = 6
    if name == "qwen3_5":
        # A DeltaNet block (keras-hub's), then a full-attention one (ours).
        overrides["num_layers"] = 2
        overrides["layer_types"] = ["linear_attention", "full_attention"]
    if name == "gemma4":
        # Gemma 4 normalizes queries and keys instead of soft-capping
        # (keras-hub's default, None); the tiny model's cap is for the tests.
        overrides["attention_logit_soft_cap"] = None
    causal_lm = keras_hub_models.tiny_causal_lm(name, **overrides)
    extra = ()
    if name in ("gemma3", "gemma4"):
        extra = (None, None, _hub_ids()["padding_mask"], None)
    if name == "qwen3_5":
        extra = (_hub_ids()["padding_mask"],)
    return _hub_causal_lm_run(causal_lm, extra, with_positions=name == "gemma4")


def hub_generic_run(name):
    import keras_hub

    from keras_attention.integrations.keras_hub import swap_attention
    from tests.integrations import test_transformer

    sizes = {"num_layers": 1, "num_heads": HEADS, "hidden_dim": WIDTH}
    backbone = test_transformer.backbone(name, **sizes, intermediate_dim=2 * WIDTH)
    task = HUB_GENERIC.get(name)
    if task is not None:
        causal_lm = getattr(keras_hub.models, task)(backbone, preprocessor=None)
        return _hub_causal_lm_run(causal_lm)
    backbone = swap_attention(backbone)
    x = _hub_ids(name in test_transformer.WITH_SEGMENTS)
    return Run(backbone, lambda x: backbone(x, training=True), (x,))


def hub_bart_run():
    import keras_hub

    from keras_attention.integrations.keras_hub import swap_attention
    from tests.integrations import test_transformer

    sizes = {"num_layers": 1, "num_heads": HEADS, "hidden_dim": WIDTH}
    backbone = test_transformer.backbone("bart", **sizes, intermediate_dim=2 * WIDTH)
    lm = keras_hub.models.BartSeq2SeqLM(backbone, preprocessor=None)
    lm = swap_attention(lm)
    source, target = token_ids(seed=1), token_ids(seed=2)
    x = {
        "encoder_token_ids": source,
        "encoder_padding_mask": source != 0,
        "decoder_token_ids": target,
        "decoder_padding_mask": target != 0,
    }
    _, encoded, self_cache, cross_cache = lm._build_cache(source, source != 0, target)

    def decode(token, self_cache, index):
        return lm.call_decoder_with_cache(
            encoded, source != 0, token[:, None], self_cache, index, cross_cache, None
        )[0]

    return Run(
        lm.backbone,
        lambda x: lm.backbone(x, training=True),
        (x,),
        decode,
        (target[:, 0], self_cache, np.int32(3)),
    )


def hub_t5gemma_run(name):
    """keras-hub's T5Gemma or T5Gemma 2 (`name`): an encoder and a decoder
    of a windowed and a global layer each, heads of 16."""
    from keras_attention.integrations.keras_hub import swap_attention
    from tests.integrations import keras_hub_models

    sizes = {"hidden_dim": WIDTH, "num_attention_heads": HEADS, "head_dim": HEAD_DIM}
    sizes["num_key_value_heads"] = 1
    overrides = {
        f"{part}_{k}": v for part in ("encoder", "decoder") for k, v in sizes.items()
    }
    lm = swap_attention(keras_hub_models.tiny_causal_lm(name, **overrides))
    source, target = token_ids(seed=1), token_ids(seed=2)
    x = {
        "encoder_token_ids": source,
        "encoder_padding_mask": source != 0,
        "decoder_token_ids": target,
        "decoder_padding_mask": target != 0,
    }
    _, cache, (encoded, padding) = lm._build_cache(**x)

    def decode(token, cache, index):
        return lm.call_decoder_with_cache(
            token[:, None], None, cache, index, encoded, padding
        )[0]

    return Run(
        lm.backbone,
        lambda x: lm.backbone(x, training=True),
        (x,),
        decode,
        (target[:, 0], cache, np.int32(3)),
    )


def hub_workloads():
    """keras-hub's families after `swap_attention`."""
    workloads = {
        f"keras-hub {n}": (lambda n=n: hub_decoder_run(n)) for n in HUB_DECODERS
    }
    for name in HUB_GENERIC:
        workloads[f"keras-hub {name}"] = lambda n=name: hub_generic_run(n)
    workloads["keras-hub bart"] = hub_bart_run
    for name in ("t5gemma", "t5gemma2"):
        workloads[f"keras-hub {name}"] = lambda n=name: hub_t5gemma_run(n)
    return workloads


def workloads():
    """`{group: {workload: build}}`: each `build()` returns a `Run`."""
    groups = {"layers": layer_workloads(), "models": model_workloads()}
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        return groups
    groups["keras-hub"] = hub_workloads()
    return groups


# -- running -----------------------------------------------------------------


@contextlib.contextmanager
def dtype_policy(dtype):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(POLICY[dtype])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _apply(fn, args):
    """Traces `fn(*args)` on JAX (nothing runs), runs it on PyTorch."""
    if keras.backend.backend() == "jax":
        import jax

        jax.jit(fn).trace(*args)
    else:
        import torch

        with torch.no_grad():
            fn(*args)


def _error(error):
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}"[:300]


def run_workload(build, dtype):
    """`{"train": entries, "decode": entries or None}` of one workload under
    the policy of `dtype`, or `{"error": ...}` where it fails to build or
    trace."""
    import pytest

    with dtype_policy(dtype):
        try:
            keras.utils.set_random_seed(0)
            run = build()
            # Eagerly once, unfaked: subclassed models build their weights.
            run.train(*run.train_args)
        except Exception as error:  # recorded in the table, not hidden
            traceback.print_exc()
            return {"error": "build: " + _error(error)}
        result = {}
        with pytest.MonkeyPatch.context() as monkeypatch:
            if keras.backend.backend() == "jax":
                from tests.ops.fake_gpu import fake_hopper_gpu

                fake_hopper_gpu(monkeypatch)
            recorder = Recorder()
            with recorder.installed(monkeypatch):
                for mode, fn, args in (
                    ("train", run.train, run.train_args),
                    ("decode", run.decode, run.decode_args),
                ):
                    if fn is None:
                        result[mode] = None
                        continue
                    recorder.calls.clear()
                    for layer in our_attention_layers(run.model):
                        layer.__dict__.pop("_attention_path", None)
                    try:
                        _apply(fn, args)
                        result[mode] = entries(recorder, run.model)
                    except Exception as error:  # recorded, not hidden
                        traceback.print_exc()
                        result[mode] = {"error": _error(error)}
        return result


def rows(backend=None, names=None):
    """The table's rows for the current backend: one per workload and
    dtype, in `workloads()`'s order; `names` keeps those workloads only."""
    backend = backend or keras.backend.backend()
    table = []
    for group, builds in workloads().items():
        for name, build in builds.items():
            if names is not None and name not in names:
                continue
            for dtype in DTYPES:
                result = run_workload(build, dtype)
                row = {"workload": name, "group": group, "backend": backend}
                table.append({**row, "dtype": dtype, **result})
    return table


# -- writing -----------------------------------------------------------------


def _cell(result):
    if result is None:
        return "—"
    if isinstance(result, dict):
        return f"fails: `{result['error']}`"
    return ", ".join(sorted({f"`{path}`" for path, _ in result})) or "none"


def _reasons(row):
    keys = []
    for mode in ("train", "decode"):
        result = row.get(mode)
        if isinstance(result, list):
            keys += [reason for _, reason in result if reason and reason not in keys]
    return keys


def markdown(table):
    """The Markdown table of `table`'s rows."""
    lines = [
        "| Workload | Backend | Dtype | Training | Decode step | Why not fused |",
        "|---|---|---|---|---|---|",
    ]
    for row in table:
        if "error" in row:
            train, decode, why = f"fails: `{row['error']}`", "", ""
        else:
            train, decode = _cell(row["train"]), _cell(row["decode"])
            why = " ".join(REASONS[key] for key in _reasons(row))
        lines.append(
            f"| {row['workload']} | {row['backend']} | {row['dtype']} "
            f"| {train} | {decode} | {why} |"
        )
    return "\n".join(lines) + "\n"


TABLE_START = "<!-- attention-paths table: python -m tests.path_table --write -->"
TABLE_END = "<!-- end of the attention-paths table -->"


def write(table):
    """Writes the JSON and the table between the page's markers."""
    JSON_PATH.parent.mkdir(parents=True, exist_ok=True)
    JSON_PATH.write_text(json.dumps({"rows": table}, indent=1) + "\n")
    page = MARKDOWN_PATH.read_text()
    head, rest = page.split(TABLE_START)
    _, tail = rest.split(TABLE_END)
    MARKDOWN_PATH.write_text(
        f"{head}{TABLE_START}\n\n{markdown(table)}\n{TABLE_END}{tail}"
    )


def committed_rows(backend):
    """The committed JSON's rows of `backend`."""
    rows_ = json.loads(JSON_PATH.read_text())["rows"]
    return [row for row in rows_ if row["backend"] == backend]


def _other_backend_rows(backend, names=None):
    environment = {**os.environ, "KERAS_BACKEND": backend}
    command = [sys.executable, "-m", "tests.path_table", "--json"]
    for name in names or ():
        command += ["--workload", name]
    output = subprocess.run(
        command,
        cwd=ROOT,
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the docs")
    parser.add_argument("--json", action="store_true", help="print this backend's")
    parser.add_argument("--workload", action="append", help="only these")
    arguments = parser.parse_args(argv)
    if arguments.json:
        print(json.dumps(rows(names=arguments.workload)))
        return
    table = []
    for backend in BACKENDS:
        if backend == keras.backend.backend():
            table += rows(names=arguments.workload)
        else:
            table += _other_backend_rows(backend, arguments.workload)
    if arguments.write:
        write(table)
    else:
        print(markdown(table))


if __name__ == "__main__":
    main()
