from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import (
    FeedForward,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from tests.layer_test import run_layer_test

rng = np.random.default_rng(0)
B, T, S, D = 2, 6, 5, 16
X = rng.normal(size=(B, T, D)).astype("float32")
ENC = rng.normal(size=(B, S, D)).astype("float32")
PAD = np.array([[True] * T, [True] * 4 + [False] * 2])
ENC_PAD = np.array([[True] * S, [True] * 3 + [False] * 2])


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def copy_hub_encoder_weights(hub, ours):
    renames = {
        "self_attention_layer/": "self_attention/",
        "feedforward_intermediate_dense": "feedforward/intermediate_dense",
        "feedforward_output_dense": "feedforward/output_dense",
    }
    by_path = {}
    for w in hub.weights:
        path = w.path.split("/", 1)[1]
        for old, new in renames.items():
            path = path.replace(old, new)
        by_path[path] = w
    for w in ours.weights:
        w.assign(by_path[w.path.split("/", 1)[1]])


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_matches_keras_hub_after_copying_weights(normalize_first):
    hub = keras_hub.layers.TransformerEncoder(32, 4, normalize_first=normalize_first)
    ours = TransformerEncoderBlock(32, 4, normalize_first=normalize_first)
    want = hub(X, padding_mask=PAD)
    ours(X, padding_mask=PAD)
    copy_hub_encoder_weights(hub, ours)
    got = ours(X, padding_mask=PAD)
    np.testing.assert_allclose(np_(got), np_(want), atol=1e-5)


def test_encoder_keras_mask_and_scores():
    block = TransformerEncoderBlock(32, 4)
    out, w = block(X, padding_mask=PAD, return_attention_scores=True)
    assert tuple(out.shape) == (B, T, D) and tuple(w.shape) == (B, 4, T, T)
    assert np.all(np_(w)[1, :, :, 4:] == 0.0)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_cached_decoding_matches_one_causal_pass(normalize_first):
    block = TransformerDecoderBlock(32, 4, normalize_first=normalize_first)
    full, cross = block(
        X, ENC, encoder_padding_mask=ENC_PAD, return_attention_scores=True
    )
    assert tuple(cross.shape) == (B, 4, T, S)
    assert np.all(np_(cross)[1, ..., 3:] == 0.0)
    self_cache = block.initial_self_attention_cache(B, T)
    cross_cache = block.compute_cross_attention_cache(ENC)
    steps = []
    for t in range(T):
        out, self_cache, cross_cache = block(
            X[:, t : t + 1],
            encoder_padding_mask=ENC_PAD,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=t,
            cross_attention_cache=cross_cache,
        )
        steps.append(np_(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), np_(full), atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        {"position_encoding": "rotary"},
        {"position_encoding": "alibi", "num_key_value_heads": 2},
    ],
    ids=["rotary", "alibi-grouped"],
)
def test_positions_and_grouped_heads_decode_like_one_causal_pass(options):
    block = TransformerDecoderBlock(32, 4, normalize_first=True, **options)
    full = block(X, ENC, encoder_padding_mask=ENC_PAD)
    self_cache = block.initial_self_attention_cache(B, T)
    cross_cache = block.compute_cross_attention_cache(ENC)
    heads = options.get("num_key_value_heads", 4)
    assert self_cache.shape[3] == heads and cross_cache.shape[3] == heads
    steps = []
    for t in range(T):
        out, self_cache, cross_cache = block(
            X[:, t : t + 1],
            encoder_padding_mask=ENC_PAD,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=t,
            cross_attention_cache=cross_cache,
        )
        steps.append(np_(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), np_(full), atol=1e-5)
    # Positions go into the self-attention only: the encoder's are its own.
    assert block.cross_attention.position_encoding is None
    restored = TransformerDecoderBlock.from_config(block.get_config())
    restored(X, ENC)
    assert restored.self_attention.position_encoding == options["position_encoding"]


def test_encoder_with_positions_keeps_the_layer_contract():
    run_layer_test(
        TransformerEncoderBlock,
        {"intermediate_dim": 32, "num_heads": 2, "position_encoding": "alibi"},
        X,
        expected_output_shape=(B, T, D),
    )


def test_decoder_only_block_is_causal():
    block = TransformerDecoderBlock(32, 4)
    out = np_(block(X))
    changed = X.copy()
    changed[:, 4:] = 3.0
    np.testing.assert_allclose(np_(block(changed))[:, :4], out[:, :4], atol=1e-5)
    with pytest.raises(ValueError, match="without cross-attention"):
        block(X, ENC)


def test_decoder_with_cross_attention_needs_encoder():
    block = TransformerDecoderBlock(32, 4)
    block(X, ENC)
    with pytest.raises(ValueError, match="encoder_sequence"):
        block(X)


def test_encoder_keeps_the_layer_contract():
    # The second example is all padding: its weights are zeros.
    padding = np.array([[True] * 4 + [False] * 2, [False] * T])
    run_layer_test(
        TransformerEncoderBlock,
        {"intermediate_dim": 32, "num_heads": 2, "dropout": 0.1, "key_dim": 8}
        | {"normalize_first": True},
        X,
        {"return_attention_scores": True},
        expected_output_shape=[(B, T, D), (B, 2, T, T)],
        masks={"padding_mask": padding},
        masked_zeros=lambda out: (out[1][0, ..., 4:], out[1][1]),
    )


@pytest.mark.parametrize("with_encoder", [True, False], ids=["cross", "only"])
def test_decoder_keeps_the_layer_contract(with_encoder):
    # With cross-attention, the encoder sequence of the second example is all
    # padding: its cross-attention weights (returned) are zeros.
    inputs = {"decoder_sequence": X}
    masks = {"decoder_padding_mask": PAD}
    call_kwargs, shapes, zeros = {}, (B, T, D), None
    if with_encoder:
        inputs["encoder_sequence"] = ENC
        masks["encoder_padding_mask"] = np.array([[True] * S, [False] * S])
        call_kwargs = {"return_attention_scores": True}
        shapes, zeros = [(B, T, D), (B, 2, T, S)], lambda out: out[1][1]
    run_layer_test(
        TransformerDecoderBlock,
        {"intermediate_dim": 32, "num_heads": 2, "dropout": 0.1}
        | {"activation": "gelu", "chunk_size": 4},
        inputs,
        call_kwargs,
        expected_output_shape=shapes,
        masks=masks,
        masked_zeros=zeros,
    )


def test_feed_forward_keeps_the_layer_contract():
    run_layer_test(
        FeedForward,
        {"intermediate_dim": 12, "output_dim": 4, "activation": "gelu"}
        | {"dropout": 0.1},
        X,
        expected_output_shape=(B, T, 4),
    )


def test_feed_forward_formula():
    layer = FeedForward(8)
    got = np_(layer(X))
    w1, b1 = (np_(v) for v in layer.intermediate_dense.weights)
    w2, b2 = (np_(v) for v in layer.output_dense.weights)
    np.testing.assert_allclose(got, np.maximum(X @ w1 + b1, 0) @ w2 + b2, atol=1e-5)


def test_bad_inputs_and_config():
    with pytest.raises(ValueError, match=r"width \(16\).*num_heads \(3\)"):
        TransformerEncoderBlock(32, 3)(X)
    with pytest.raises(ValueError, match=r"`inputs` must be \(batch, length"):
        TransformerEncoderBlock(32, 4)(X[:, 0])
    with pytest.raises(ValueError, match="`intermediate_dim` must be a positive"):
        TransformerDecoderBlock(0, 4)
    with pytest.raises(ValueError, match=r"`dropout` must be in \[0, 1\)"):
        FeedForward(8, dropout=-0.1)
    with pytest.raises(ValueError, match="`position_encoding` must be one of"):
        TransformerDecoderBlock(32, 4, position_encoding="sinusoidal")
    with pytest.raises(ValueError, match="num_heads=4, num_key_value_heads=3"):
        TransformerEncoderBlock(32, 4, num_key_value_heads=3)


@pytest.mark.parametrize(
    "block_class", [TransformerEncoderBlock, TransformerDecoderBlock]
)
def test_training_reaches_every_dropout(block_class):
    # With (nearly) all activations dropped, each residual sub-layer adds
    # nothing and a post-norm block reduces to its layer normalizations.
    block = block_class(intermediate_dim=4, num_heads=2, dropout=0.99999)
    x = rng.normal(size=(B, T, D)).astype("float32")
    out = block(x, training=True)
    want = block._feedforward_layer_norm(block._self_attention_layer_norm(x))
    np.testing.assert_allclose(np_(out), np_(want), atol=1e-5)
    # keras-hub's private names are views of the public sublayers.
    assert block._self_attention_layer is block.self_attention
    assert block._feedforward_output_dense is block.feedforward.output_dense


def test_norm_first_from_an_older_config_means_normalize_first():
    config = TransformerEncoderBlock(8, 2, normalize_first=True).get_config()
    assert config["normalize_first"] is True and "norm_first" not in config
    config["norm_first"] = config.pop("normalize_first")
    assert TransformerEncoderBlock.from_config(config).normalize_first is True


def test_blocks_pass_the_keras_mask_on():
    x = keras.layers.Embedding(10, D, mask_zero=True)(np.array([[3, 4, 0], [5, 0, 0]]))
    want = np.array([[True, True, False], [True, False, False]])
    for block in (TransformerEncoderBlock(8, 2), TransformerDecoderBlock(8, 2)):
        mask = keras.src.backend.get_keras_mask(block(x))
        np.testing.assert_array_equal(np_(mask) > 0, want)


def _build_from_shapes(layer, with_encoder):
    if isinstance(
        layer, (TransformerEncoderBlock, keras_hub.layers.TransformerEncoder)
    ):
        layer.build((B, T, D))
    elif with_encoder:
        layer.build(decoder_sequence_shape=(B, T, D), encoder_sequence_shape=(B, S, D))
    else:
        layer.build(decoder_sequence_shape=(B, T, D))
    return layer


@pytest.mark.parametrize(
    "ours, theirs, with_encoder",
    [
        (TransformerEncoderBlock, keras_hub.layers.TransformerEncoder, False),
        (TransformerDecoderBlock, keras_hub.layers.TransformerDecoder, False),
        (TransformerDecoderBlock, keras_hub.layers.TransformerDecoder, True),
    ],
    ids=["encoder", "decoder-only", "decoder-with-cross-attention"],
)
def test_built_blocks_hold_the_same_variables_as_keras_hub(ours, theirs, with_encoder):
    # The non-trainable variables are the dropout layers' seed states: a block
    # with an extra dropout or sublayer would not match keras-hub's counts.
    def counts(layer):
        layer = _build_from_shapes(layer, with_encoder)
        assert layer.built
        return (
            len(layer.trainable_weights),
            len(layer.non_trainable_weights),
            len(layer.non_trainable_variables),
        )

    kwargs = {"intermediate_dim": 8, "num_heads": 2, "dropout": 0.1}
    assert counts(ours(**kwargs)) == counts(theirs(**kwargs))


def test_unknown_initializer_is_refused_at_construction():
    for block_class in (TransformerEncoderBlock, TransformerDecoderBlock):
        with pytest.raises(ValueError, match="Invalid"):
            block_class(8, 2, kernel_initializer="Invalid")


def test_encoder_padding_mask_may_be_passed_positionally():
    block = TransformerEncoderBlock(8, 2)
    by_keyword = np_(block(X, padding_mask=PAD))
    np.testing.assert_array_equal(np_(block(X, PAD)), by_keyword)
    assert not np.allclose(np_(block(X)), by_keyword)


def test_symbolic_call_gives_the_eager_shapes_and_dtype():
    decoder_sequence = keras.KerasTensor((B, T, D))
    encoder_sequence = keras.KerasTensor((B, S, D))
    decoder = TransformerDecoderBlock(8, 2)
    out = decoder(decoder_sequence=decoder_sequence, encoder_sequence=encoder_sequence)
    assert tuple(out.shape) == (B, T, D) and out.dtype == "float32"
    assert decoder.cross_attention is not None
    encoded = TransformerEncoderBlock(8, 2)(keras.KerasTensor((None, None, D)))
    assert tuple(encoded.shape) == (None, None, D)


@pytest.mark.slow
def test_decoder_fits_from_a_dict_of_sequences():
    class Wrapper(keras.Model):
        def __init__(self):
            super().__init__()
            self.block = TransformerDecoderBlock(8, 2, dropout=0.1)

        def call(self, inputs):
            return self.block(**inputs)

    model = Wrapper()
    model.compile("sgd", "mse", jit_compile=keras.config.backend() != "torch")
    inputs = {"decoder_sequence": X, "encoder_sequence": ENC}
    model(inputs)
    before = [np_(w) for w in model.block.trainable_weights]
    history = model.fit(inputs, np.zeros_like(X), verbose=0)
    assert np.isfinite(history.history["loss"][0])
    after = [np_(w) for w in model.block.trainable_weights]
    assert len(after) == 26  # cross-attention included
    # Post-norm passes only tiny gradients to the early layer-norm gains (their
    # float32 step can round to nothing), so ask that training moved the block.
    assert any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16", "bfloat16"])
def test_every_sublayer_follows_the_dtype_policy(policy):
    policy = keras.DTypePolicy(policy)
    block = TransformerDecoderBlock(8, 2, dtype=policy)
    out = block(X, ENC)
    spec = block.compute_output_spec(
        keras.KerasTensor(X.shape), keras.KerasTensor(ENC.shape)
    )
    assert keras.backend.standardize_dtype(out.dtype) == policy.compute_dtype
    assert spec.dtype == policy.compute_dtype
    assert all(w.dtype == policy.variable_dtype for w in block.weights)
    for sublayer in block._flatten_layers():
        if isinstance(sublayer, keras.layers.Softmax):
            continue
        assert sublayer.compute_dtype == policy.compute_dtype, sublayer.name
        assert sublayer.variable_dtype == policy.variable_dtype, sublayer.name


def test_cached_decoding_in_a_traced_loop_rebuilds_the_cache():
    # The whole sequence in one call at index 0, and one token per step of an
    # ops.while_loop, fill the same cache and give the same outputs.
    heads, head_size = 2, D // 2
    empty = np.zeros((B, 2, T, heads, head_size), "float32")
    block = TransformerDecoderBlock(8, heads)
    full, full_self_cache, full_cross_cache = block(
        X,
        ENC,
        self_attention_cache=empty,
        self_attention_cache_update_index=0,
        cross_attention_cache=np.zeros((B, 2, S, heads, head_size), "float32"),
        cross_attention_cache_update_index=0,
    )
    np.testing.assert_allclose(
        np_(full_cross_cache), np_(block.compute_cross_attention_cache(ENC)), atol=1e-6
    )

    def step(i, outputs, self_cache):
        token = ops.slice(X, (0, i, 0), (B, 1, D))
        out, self_cache, _ = block(
            token,
            ENC,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=i,
            cross_attention_cache=full_cross_cache,
        )
        return i + 1, ops.slice_update(outputs, (0, i, 0), out), self_cache

    _, stepped, stepped_cache = ops.while_loop(
        lambda i, *_: i < T, step, (0, ops.zeros_like(X), empty)
    )
    np.testing.assert_allclose(np_(stepped), np_(full), atol=1e-5)
    np.testing.assert_allclose(np_(stepped_cache), np_(full_self_cache), atol=1e-5)


def test_decoder_only_cache_call_returns_output_and_cache():
    block = TransformerDecoderBlock(8, 2)
    empty = np.zeros((B, 2, T, 2, D // 2), "float32")
    out, cache = block(
        X, self_attention_cache=empty, self_attention_cache_update_index=0
    )
    np.testing.assert_allclose(np_(out), np_(block(X)), atol=1e-5)
    assert tuple(cache.shape) == empty.shape and np.any(np_(cache) != 0)


def test_loads_pre_norm_blocks_saved_by_0_1_0():
    # Saved by keras_attention 0.1.0 (cca2932) on TensorFlow, when pre-norm was
    # spelled `norm_first`: the saved configs still build pre-norm blocks.
    data = Path(__file__).parent.parent / "data"
    model = keras.saving.load_model(
        data / "blocks_saved_by_0_1_0.keras", safe_mode=True
    )
    assert all(model.get_layer(name).normalize_first for name in ("encoder", "decoder"))
    inputs = np.random.default_rng(0)
    source = inputs.normal(size=(2, 5, 8)).astype("float32")
    target = inputs.normal(size=(2, 4, 8)).astype("float32")
    want = np.load(data / "blocks_saved_by_0_1_0_output.npy")
    got = model.predict([source, target], verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_padding_mask_with_a_cache_masks_the_cache_slots():
    # A left-padded prompt: its padding must stay masked in the cached path,
    # both when the prompt fills the cache in one call and in later steps.
    left_pad = np.array([[True] * T, [False] * 2 + [True] * (T - 2)])
    block = TransformerDecoderBlock(8, 2)
    want = np_(block(X, decoder_padding_mask=left_pad))
    empty = np.zeros((B, 2, T, 2, D // 2), "float32")
    prefill, _ = block(
        X,
        decoder_padding_mask=left_pad,
        self_attention_cache=empty,
        self_attention_cache_update_index=0,
    )
    np.testing.assert_allclose(np_(prefill), want, atol=1e-5)
    cache, steps = empty, []
    for t in range(T):
        out, cache = block(
            X[:, t : t + 1],
            decoder_padding_mask=left_pad,
            self_attention_cache=cache,
            self_attention_cache_update_index=t,
        )
        steps.append(np_(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), want, atol=1e-5)
    assert not np.allclose(np_(block(X))[1], want[1])  # the mask matters
    with pytest.raises(ValueError, match=r"cover the cache's 6 slots.*\(2, 1\)"):
        block(
            X[:, :1],
            decoder_padding_mask=left_pad[:, :1],
            self_attention_cache=empty,
            self_attention_cache_update_index=0,
        )
