"""The two position arguments (`input_positions`, `attention_positions`),
their registries, the deprecated `position_encoding` alias, and the `.keras`
files saved while that alias was the argument's name."""

import warnings
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import (
    GroupedQueryAttention,
    MultiHeadAttention,
    PositionEmbedding,
    RelativePositionBias,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    _attention_paths,
)
from keras_attention.layers.positions import (
    ATTENTION_POSITIONS,
    INPUT_POSITIONS,
    AttentionPositionParts,
)
from keras_attention.models import GPT, Transformer, TransformerClassifier
from keras_attention.models.transformer_classifier import TransformerTextEncoder
from tests.conftest import trainable_gradients
from tests.keras_versions import requires_keras_3_15_files

DATA = Path(__file__).parent.parent / "data"


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


# -- the registries ------------------------------------------------------------


def test_registries_hold_the_names_of_each_kind():
    assert INPUT_POSITIONS.argument == "input_positions"
    assert INPUT_POSITIONS.names == ("learned", "sinusoidal", None)
    assert ATTENTION_POSITIONS.argument == "attention_positions"
    assert ATTENTION_POSITIONS.names == (None, "rotary", "alibi", "relative")


def test_only_learned_positions_end_at_the_length_they_are_built_for():
    # What lets GPT generate past its max_length: every other name is
    # computed at any position.
    assert INPUT_POSITIONS.bounded == ("learned",)
    assert ATTENTION_POSITIONS.bounded == ()
    assert INPUT_POSITIONS.is_bounded("learned")
    assert not INPUT_POSITIONS.is_bounded("sinusoidal")
    assert not INPUT_POSITIONS.is_bounded(None)
    assert not any(map(ATTENTION_POSITIONS.is_bounded, ATTENTION_POSITIONS.names))
    with pytest.raises(ValueError, match="Unknown `input_positions`: 'table'"):
        INPUT_POSITIONS.is_bounded("table")
    # Far past any length a model is built for, the computed positions are
    # those of one long pass.
    x = keras.random.normal((1, 4100, 8), seed=0)
    sinusoidal = SinusoidalPositionEncoding()
    np.testing.assert_allclose(
        np_(sinusoidal(x[:, -3:], start_index=4097)),
        np_(sinusoidal(x))[:, -3:],
        atol=1e-4,
    )


def test_input_positions_build_the_layer_added_to_the_embeddings():
    def build(name):
        return INPUT_POSITIONS.build(
            name, sequence_length=7, initializer="zeros", dtype=None, name="p"
        )

    learned = build("learned")
    assert isinstance(learned, PositionEmbedding) and learned.sequence_length == 7
    assert isinstance(build("sinusoidal"), SinusoidalPositionEncoding)
    assert build(None) is None


def test_attention_positions_build_the_parts_attention_applies():
    def build(name):
        return ATTENTION_POSITIONS.build(
            name, num_heads=4, max_wavelength=100, alibi_bias_max=8, dtype=None
        )

    assert build(None) == AttentionPositionParts()
    assert build("rotary").rotary.max_wavelength == 100
    np.testing.assert_allclose(
        np_(build("alibi").alibi_slopes), 2.0 ** -np.arange(2, 10, 2), rtol=1e-6
    )
    bias = build("relative").relative_bias
    assert isinstance(bias, RelativePositionBias) and bias.num_heads == 4


@pytest.mark.parametrize(
    "registry, name, message",
    [
        (
            INPUT_POSITIONS,
            "rotary",
            r"Unknown `input_positions`: 'rotary'\. Expected one of 'learned', "
            r"'sinusoidal', None \(positions added to the token embeddings\)\. "
            r"'rotary' is one of the `attention_positions` \(positions inside "
            r"attention\)\.",
        ),
        (
            ATTENTION_POSITIONS,
            "learned",
            r"Unknown `attention_positions`: 'learned'\. Expected one of None, "
            r"'rotary', 'alibi', 'relative' \(positions inside attention\)\. "
            r"'learned' is one of the `input_positions`",
        ),
        (
            ATTENTION_POSITIONS,
            "t5",
            r"Unknown `attention_positions`: 't5'\. Expected one of None, "
            r"'rotary', 'alibi', 'relative' \(positions inside attention\)\.$",
        ),
        (INPUT_POSITIONS, ["learned"], r"Unknown `input_positions`: \['learned'\]"),
    ],
)
def test_a_bad_name_is_refused_with_the_argument_and_the_choices(
    registry, name, message
):
    with pytest.raises(ValueError, match=message):
        registry.check(name)
    with pytest.raises(ValueError, match=message):
        registry.build(name)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: MultiHeadAttention(2, 4, attention_positions="learned"), "attention"),
        (lambda: GroupedQueryAttention(4, 2, 1, attention_positions="x"), "attention"),
        (lambda: TransformerEncoderBlock(8, 2, attention_positions="x"), "attention"),
        (lambda: TransformerDecoderBlock(8, 2, attention_positions="x"), "attention"),
        (lambda: TokenAndPositionEmbedding(5, 4, 2, input_positions="x"), "input"),
        (lambda: GPT(9, attention_positions="x"), "attention"),
        (lambda: GPT(9, input_positions="x"), "input"),
        (lambda: Transformer(9, 9, attention_positions="x"), "attention"),
        (lambda: Transformer(9, 9, input_positions="x"), "input"),
        (lambda: TransformerClassifier(9, 2, attention_positions="x"), "attention"),
        (lambda: TransformerClassifier(9, 2, input_positions="x"), "input"),
        (lambda: TransformerTextEncoder(9, input_positions="x"), "input"),
    ],
)
def test_every_layer_and_model_checks_its_names_with_the_registry(make, message):
    with pytest.raises(ValueError, match=f"Unknown `{message}_positions`"):
        make()


# -- the deprecated alias ------------------------------------------------------


@pytest.mark.parametrize(
    "make, attributes",
    [
        (
            lambda **a: MultiHeadAttention(2, 4, **a),
            {"position_encoding": "rotary", "attention_positions": "rotary"},
        ),
        (
            lambda **a: GroupedQueryAttention(4, 2, 1, **a),
            {"position_encoding": "alibi", "attention_positions": "alibi"},
        ),
        (
            lambda **a: TransformerEncoderBlock(8, 2, **a),
            {"position_encoding": "alibi", "attention_positions": "alibi"},
        ),
        (
            lambda **a: TransformerDecoderBlock(8, 2, **a),
            {"position_encoding": None, "attention_positions": None},
        ),
        (
            lambda **a: TokenAndPositionEmbedding(5, 4, 2, **a),
            {"position_encoding": "sinusoidal", "input_positions": "sinusoidal"},
        ),
        (
            lambda **a: GPT(9, max_length=8, hidden_dim=8, num_heads=2, **a),
            {
                "position_encoding": "rotary",
                "input_positions": None,
                "attention_positions": "rotary",
            },
        ),
        (
            lambda **a: GPT(9, max_length=8, hidden_dim=8, num_heads=2, **a),
            {
                "position_encoding": "sinusoidal",
                "input_positions": "sinusoidal",
                "attention_positions": None,
            },
        ),
        (
            lambda **a: Transformer(9, 9, hidden_dim=8, num_heads=2, **a),
            {
                "position_encoding": "learned",
                "input_positions": "learned",
                "attention_positions": None,
            },
        ),
        (
            lambda **a: TransformerClassifier(9, 2, **a),
            {
                "position_encoding": "sinusoidal",
                "input_positions": "sinusoidal",
                "attention_positions": None,
            },
        ),
        (
            lambda **a: TransformerTextEncoder(9, **a),
            {
                "position_encoding": "sinusoidal",
                "input_positions": "sinusoidal",
                "attention_positions": None,
            },
        ),
    ],
)
def test_position_encoding_is_a_deprecated_alias_mapped_by_its_value(make, attributes):
    attributes = dict(attributes)
    value = attributes.pop("position_encoding")
    with pytest.warns(DeprecationWarning, match="`position_encoding` is deprecated"):
        made = make(position_encoding=value)
    config = made.get_config()
    assert "position_encoding" not in config
    for name, want in attributes.items():
        assert config[name] == want
        assert getattr(made, name) == want


def test_the_warning_gives_the_new_arguments():
    match = r"GPT: `position_encoding` is deprecated; use `input_positions=None, "
    match += r"attention_positions='rotary'`"
    with pytest.warns(DeprecationWarning, match=match):
        GPT(9, max_length=8, hidden_dim=8, num_heads=2, position_encoding="rotary")
    match = r"use `input_positions='learned'` \("
    with pytest.warns(DeprecationWarning, match=match):
        Transformer(9, 9, hidden_dim=8, num_heads=2, position_encoding="learned")


def test_the_alias_with_a_different_new_argument_is_refused():
    with pytest.raises(ValueError, match="both `position_encoding='rotary'`"):
        MultiHeadAttention(
            2, 4, position_encoding="rotary", attention_positions="alibi"
        )
    with pytest.raises(ValueError, match="`input_positions='sinusoidal'`"):
        GPT(9, position_encoding="rotary", input_positions="sinusoidal")
    # The alias's value is checked by the registry of the argument it names.
    with pytest.raises(ValueError, match="Unknown `input_positions`: 'rotary'"):
        TokenAndPositionEmbedding(5, 4, 2, position_encoding="rotary")
    with pytest.raises(ValueError, match="Unknown `attention_positions`: 'learned'"):
        MultiHeadAttention(2, 4, position_encoding="learned")


def test_the_new_names_warn_of_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        MultiHeadAttention(2, 4, attention_positions="rotary")
        TokenAndPositionEmbedding(5, 4, 2, input_positions=None)


# -- "relative": T5's bias through the argument ------------------------------


def test_relative_positions_add_the_layers_t5_bias_to_the_scores():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = MultiHeadAttention(2, 4, attention_positions="relative")
    layer(x, x)
    table = layer._relative_bias
    assert table.bidirectional and table.num_buckets == 32
    table.embeddings.assign(rng.normal(size=(32, 2)).astype("float32"))
    plain = MultiHeadAttention(2, 4)
    plain(x, x)
    plain.set_weights(_projections(layer))
    bias = table(x)
    got = layer(x, x, use_causal_mask=True)
    want = plain(x, x, use_causal_mask=True, attention_bias=bias)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)
    assert not np.allclose(np_(got), np_(plain(x, x, use_causal_mask=True)))


def _projections(layer):
    """The weights of `layer` but its relative position table."""
    table = layer._relative_bias.embeddings
    return [np_(w) for w in layer.weights if w is not table]


@pytest.mark.parametrize("options", [{"chunk_size": 2}, {"flash_attention": True}])
def test_relative_positions_take_the_chunked_path_as_a_score_mod(options, monkeypatch):
    # T5's bias reaches the op as a score mod over the layer's table, tile by
    # tile: no dense (T, S) bias, and the table's gradient is exact.
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 7, 8)).astype("float32")
    layer = MultiHeadAttention(2, 4, attention_positions="relative")
    layer(x, x)
    layer._relative_bias.embeddings.assign(rng.normal(size=(32, 2)))
    chunked = MultiHeadAttention(2, 4, attention_positions="relative", **options)
    chunked(x, x)
    chunked.set_weights(layer.get_weights())

    def loss(model):
        return lambda: ops.sum(ops.square(model(x, x, use_causal_mask=True)))

    want = trainable_gradients(layer.trainable_weights, loss(layer))
    want_outputs = np_(layer(x, x, use_causal_mask=True))
    calls = []
    original = _attention_paths.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(_attention_paths, "dot_product_attention", spy)
    got = trainable_gradients(chunked.trainable_weights, loss(chunked))
    np.testing.assert_allclose(
        np_(chunked(x, x, use_causal_mask=True)), want_outputs, atol=1e-5
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
    memory_efficient = [c["chunk_size"] or c["flash_attention"] for c in calls]
    assert calls and all(memory_efficient)
    assert all(c["score_mod"] and c["bias"] is None for c in calls)


def test_relative_positions_decode_step_by_step_with_a_cache():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = MultiHeadAttention(2, 4, attention_positions="relative")
    layer(x, x)
    layer._relative_bias.embeddings.assign(rng.normal(size=(32, 2)))
    full = np_(layer(x, x, use_causal_mask=True))
    cache = layer.initial_cache(2, 5)
    for t in range(5):
        step = x[:, t : t + 1]
        out, cache = layer(
            step, step, use_causal_mask=True, cache=cache, cache_update_index=t
        )
        np.testing.assert_allclose(np_(out)[:, 0], full[:, t], atol=1e-5)


# -- files saved by 0.1.0 under `position_encoding` ----------------------------

# Saved by keras_attention 0.1.0 at dafdfaa (Keras 3.15.1, TensorFlow), when
# both kinds of positions were `position_encoding`, with the inputs and
# outputs in the .npz beside each; the archives were then re-zipped with
# deflate, their members byte for byte as Keras wrote them. `renamed` lists
# where the old argument lives in the config and its new name(s) and values.
SAVED = {
    # MultiHeadAttention(2, 4, position_encoding="rotary") then
    # GroupedQueryAttention(4, 2, 1, position_encoding="alibi"), causal.
    "attention_positions": {
        "mha": {"attention_positions": "rotary"},
        "gqa": {"attention_positions": "alibi"},
    },
    # TransformerEncoderBlock / TransformerDecoderBlock(16, 2,
    # position_encoding="alibi"), the decoder over the encoder's output.
    "alibi_blocks": {
        "encoder": {"attention_positions": "alibi"},
        "decoder": {"attention_positions": "alibi"},
    },
    # TokenAndPositionEmbedding(11, 8, 4, position_encoding="sinusoidal",
    # mask_zero=True).
    "sinusoidal_embedding": {"embedding": {"input_positions": "sinusoidal"}},
    # Transformer(13, 11, hidden_dim=8, num_heads=2, one block each,
    # position_encoding="learned").
    "transformer": {None: {"input_positions": "learned", "attention_positions": None}},
    # GPT(17, max_length=8, hidden_dim=8, num_heads=2, num_layers=1,
    # position_encoding="rotary").
    "gpt_rotary": {None: {"input_positions": None, "attention_positions": "rotary"}},
    # TransformerClassifier(19, 3, max_length=6, hidden_dim=8, num_heads=2,
    # pooling="cls", position_encoding="sinusoidal") and the
    # TransformerTextEncoder of the same sizes.
    "transformer_classifier": {
        None: {"input_positions": "sinusoidal", "attention_positions": None}
    },
    "text_encoder": {
        None: {"input_positions": "sinusoidal", "attention_positions": None}
    },
}


def _inputs(arrays):
    if "input" in arrays:
        return arrays["input"]
    names = [name[len("input_") :] for name in arrays if name.startswith("input_")]
    if all(name.isdigit() for name in names):
        return [arrays[f"input_{i}"] for i in range(len(names))]
    return {name: arrays[f"input_{name}"] for name in names}


def _saved_config(path):
    with zipfile.ZipFile(path) as archive:
        return archive.read("config.json").decode()


@requires_keras_3_15_files
@pytest.mark.parametrize("name", sorted(SAVED))
def test_files_saved_with_position_encoding_load_with_the_new_names(name, tmp_path):
    path = DATA / f"{name}_saved_by_0_1_0.keras"
    assert '"position_encoding"' in _saved_config(path)  # the old name
    arrays = np.load(DATA / f"{name}_saved_by_0_1_0.npz")
    inputs = _inputs(arrays)
    model = keras.saving.load_model(path, safe_mode=True)
    got = ops.convert_to_numpy(model(inputs))
    np.testing.assert_allclose(got, arrays["output"], rtol=1e-5, atol=1e-6)
    for layer_name, renamed in SAVED[name].items():
        owner = model if layer_name is None else model.get_layer(layer_name)
        config = owner.get_config()
        assert "position_encoding" not in config
        for argument, value in renamed.items():
            assert config[argument] == value
    # Saved again, the file has only the new names and gives the same outputs.
    model.save(tmp_path / "again.keras")
    assert '"position_encoding"' not in _saved_config(tmp_path / "again.keras")
    again = keras.saving.load_model(tmp_path / "again.keras", safe_mode=True)
    got = ops.convert_to_numpy(again(inputs))
    np.testing.assert_allclose(got, arrays["output"], rtol=1e-5, atol=1e-6)
