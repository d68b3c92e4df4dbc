from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import (
    FeedForward,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from tests.keras_versions import requires_keras_3_15_files
from tests.layer_test import each_document_alone, run_layer_test

rng = np.random.default_rng(0)
B, T, S, D = 2, 6, 5, 16
X = rng.normal(size=(B, T, D)).astype("float32")
ENC = rng.normal(size=(B, S, D)).astype("float32")
PAD = np.array([[True] * T, [True] * 4 + [False] * 2])
ENC_PAD = np.array([[True] * S, [True] * 3 + [False] * 2])


def np_(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def keras_hub_layers():
    """keras-hub's layers, or a clean skip on the core install."""
    return pytest.importorskip("keras_hub").layers


def copy_hub_encoder_weights(hub, ours):
    """keras-hub's block weights into ours (encoder or decoder), by path."""
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
        w.assign(np_(by_path[w.path.split("/", 1)[1]]))


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_matches_keras_hub_after_copying_weights(normalize_first):
    hub = keras_hub_layers().TransformerEncoder(32, 4, normalize_first=normalize_first)
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
        {"attention_positions": "rotary"},
        {"attention_positions": "alibi", "num_key_value_heads": 2},
        {"attention_positions": "relative"},
    ],
    ids=["rotary", "alibi-grouped", "relative"],
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
    assert block.cross_attention.attention_positions is None
    restored = TransformerDecoderBlock.from_config(block.get_config())
    restored(X, ENC)
    assert restored.self_attention.attention_positions == options["attention_positions"]


def test_encoder_with_positions_keeps_the_layer_contract():
    run_layer_test(
        TransformerEncoderBlock,
        {"intermediate_dim": 32, "num_heads": 2, "attention_positions": "alibi"},
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
    with pytest.raises(ValueError, match=r"width \(16\).*num_heads \(17\)"):
        TransformerEncoderBlock(32, 17)(X)
    with pytest.raises(ValueError, match=r"`inputs` must be \(batch, length"):
        TransformerEncoderBlock(32, 4)(X[:, 0])
    with pytest.raises(ValueError, match="`intermediate_dim` must be a positive"):
        TransformerDecoderBlock(0, 4)
    with pytest.raises(ValueError, match=r"`dropout` must be in \[0, 1\)"):
        FeedForward(8, dropout=-0.1)
    with pytest.raises(ValueError, match="Unknown `attention_positions`: 'sinusoidal'"):
        TransformerDecoderBlock(32, 4, attention_positions="sinusoidal")
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
    if "Encoder" in type(layer).__name__:
        layer.build((B, T, D))
    elif with_encoder:
        layer.build(decoder_sequence_shape=(B, T, D), encoder_sequence_shape=(B, S, D))
    else:
        layer.build(decoder_sequence_shape=(B, T, D))
    return layer


@pytest.mark.parametrize(
    "ours, theirs, with_encoder",
    [
        (TransformerEncoderBlock, "TransformerEncoder", False),
        (TransformerDecoderBlock, "TransformerDecoder", False),
        (TransformerDecoderBlock, "TransformerDecoder", True),
    ],
    ids=["encoder", "decoder-only", "decoder-with-cross-attention"],
)
def test_built_blocks_hold_the_same_variables_as_keras_hub(ours, theirs, with_encoder):
    theirs = getattr(keras_hub_layers(), theirs)

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


@requires_keras_3_15_files
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
    got = np_(model([source, target]))
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


# keras.io's "GPT text generation with KerasHub": token ids padded with 0,
# TokenAndPositionEmbedding(mask_zero=True) of width 256, decoder-only blocks
# with num_heads=3 (so a head size of 256 // 3 = 85), logits over the
# vocabulary and an unmasked sparse cross-entropy. Here the same shape of use
# at a small vocabulary and length, with keras-hub's classes and with ours.
GPT_VOCABULARY, GPT_LENGTH, GPT_WIDTH = 40, 10, 256
GPT_IDS = np.array(
    [[5, 9, 3, 8, 2, 0, 0, 0, 0, 0], [7, 1, 2, 3, 4, 5, 6, 11, 0, 0]], "int32"
)


def gpt_shaped_model(embedding_cls, decoder_cls):
    tokens = keras.Input((None,), dtype="int32")
    x = embedding_cls(
        vocabulary_size=GPT_VOCABULARY,
        sequence_length=GPT_LENGTH,
        embedding_dim=GPT_WIDTH,
        mask_zero=True,
    )(tokens)
    for _ in range(2):
        x = decoder_cls(num_heads=3, intermediate_dim=64)(x)
    return keras.Model(tokens, keras.layers.Dense(GPT_VOCABULARY)(x))


def copy_gpt_weights(hub_model, our_model):
    hub_layers, our_layers = hub_model.layers[1:], our_model.layers[1:]
    hub_embedding, our_embedding = hub_layers[0], our_layers[0]
    # NumPy copies: on JAX, predict() may donate the buffers of the model it
    # runs, which a variable assigned from the other model's would share.
    our_embedding.token_embedding.embeddings.assign(
        np_(hub_embedding.token_embedding.embeddings)
    )
    our_embedding.position_embedding.position_embeddings.assign(
        np_(hub_embedding.position_embedding.position_embeddings)
    )
    for hub, ours in zip(hub_layers[1:-1], our_layers[1:-1], strict=True):
        copy_hub_encoder_weights(hub, ours)
    for hub_weight, our_weight in zip(
        hub_layers[-1].weights, our_layers[-1].weights, strict=True
    ):
        our_weight.assign(np_(hub_weight))


def test_gpt_example_with_three_heads_on_width_256_matches_keras_hub():
    hub_layers = keras_hub_layers()
    from keras_attention.layers import TokenAndPositionEmbedding

    hub_model = gpt_shaped_model(
        hub_layers.TokenAndPositionEmbedding, hub_layers.TransformerDecoder
    )
    our_model = gpt_shaped_model(TokenAndPositionEmbedding, TransformerDecoderBlock)
    # keras-hub's head size: the width floored by the heads.
    assert our_model.layers[2].self_attention.key_dim == GPT_WIDTH // 3 == 85
    copy_gpt_weights(hub_model, our_model)
    want, got = (np_(model(GPT_IDS)) for model in (hub_model, our_model))
    # Every position, the padded ones included (the loss reads them all).
    np.testing.assert_allclose(got, want, atol=2e-4)
    labels = np.roll(GPT_IDS, -1, axis=1)
    losses = []
    for model in (hub_model, our_model):
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        losses.append(model.evaluate(GPT_IDS, labels, verbose=0))
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)


def test_head_size_is_the_width_floored_by_the_heads():
    block = TransformerEncoderBlock(32, 3)
    assert tuple(block(X).shape) == (B, T, D)
    assert block.self_attention.key_dim == D // 3 == 5
    # The output projection still returns the model width.
    decoder = TransformerDecoderBlock(32, 3)
    assert tuple(decoder(X, ENC).shape) == (B, T, D)
    assert decoder.cross_attention.key_dim == 5
    with pytest.raises(ValueError, match=r"width \(16\) must be at least num_heads"):
        TransformerDecoderBlock(32, 17)(X)
    # key_dim given explicitly still wins.
    assert TransformerEncoderBlock(8, 3, key_dim=4).build((B, T, D)) is None


# keras.io's examples feed the blocks the output of an embedding with
# mask_zero=True. Their Keras masks reach keras-hub's blocks as keras-hub reads
# them: the decoder turns them into key-side masks only (its attention layer
# takes no query mask), so a padded position of a decoder computes like any
# other; the encoder's keras.layers.MultiHeadAttention also takes the Keras
# mask as its query mask, which gives a padded position no attention (zeros,
# with a dropout rate; see test_keras_hub_encoder_padded_rows_without_dropout).
SOURCE_IDS = np.array([[4, 4, 0, 0, 0], [1, 2, 3, 4, 5]], "int32")
TARGET_IDS = np.array([[5, 9, 3, 0, 0, 0], [7, 1, 2, 3, 4, 0]], "int32")


def masked_sequences(width=D):
    """Fresh embeddings of SOURCE_IDS and TARGET_IDS carrying their Keras
    masks, for each call (keras' MultiHeadAttention removes the masks of
    the tensors it is given)."""
    embedding = keras.layers.Embedding(12, width, mask_zero=True)
    embedding.build((None, None))
    return lambda ids: embedding(ids)


def assert_matches_keras_hub_everywhere(hub, ours, *ids, atol=1e-5, **kwargs):
    embed = masked_sequences()
    hub(*map(embed, ids), **kwargs)
    ours(*map(embed, ids), **kwargs)
    copy_hub_encoder_weights(hub, ours)
    want = hub(*map(embed, ids), **kwargs)
    inputs = list(map(embed, ids))
    got = ours(*inputs, **kwargs)
    np.testing.assert_allclose(np_(got), np_(want), atol=atol)
    # The output carries the Keras mask of the first input, as keras-hub's
    # does, and ours leaves the masks of its inputs in place.
    get_mask = keras.src.backend.get_keras_mask
    np.testing.assert_array_equal(np_(get_mask(got)), np_(get_mask(want)))
    np.testing.assert_array_equal(np_(get_mask(got)) > 0, ids[0] != 0)
    assert all(get_mask(x) is not None for x in inputs)
    return np_(got)


@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("with_encoder", [False, True], ids=["only", "cross"])
def test_decoder_on_mask_zero_embeddings_matches_keras_hub_everywhere(
    normalize_first, with_encoder
):
    hub = keras_hub_layers().TransformerDecoder(32, 4, normalize_first=normalize_first)
    ours = TransformerDecoderBlock(32, 4, normalize_first=normalize_first)
    ids = (TARGET_IDS, SOURCE_IDS) if with_encoder else (TARGET_IDS,)
    got = assert_matches_keras_hub_everywhere(hub, ours, *ids)
    # The padded positions are computed, not zeroed or left alone.
    assert np.all(np.abs(got[TARGET_IDS == 0]).max(-1) > 0.1)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_on_mask_zero_embeddings_matches_keras_hub_everywhere(
    normalize_first,
):
    kwargs = {"normalize_first": normalize_first, "dropout": 0.1}
    hub = keras_hub_layers().TransformerEncoder(32, 4, **kwargs)
    ours = TransformerEncoderBlock(32, 4, **kwargs)
    assert_matches_keras_hub_everywhere(hub, ours, TARGET_IDS)


def test_keras_hub_encoder_padded_rows_without_dropout():
    # A documented difference, of keras.layers.MultiHeadAttention rather than
    # of keras-hub's block: with dropout=0 it runs the fused attention op,
    # which gives a query that may attend to nothing the plain average of all
    # the values, padded ones included; with a dropout rate, or when the
    # weights are returned, it gives it zeros, as ours always does.
    hub_layers = keras_hub_layers()
    embed = masked_sequences()
    ours = TransformerEncoderBlock(32, 4)
    without_dropout = hub_layers.TransformerEncoder(32, 4)
    with_dropout = hub_layers.TransformerEncoder(32, 4, dropout=0.1)
    for layer in (ours, without_dropout, with_dropout):
        layer(embed(TARGET_IDS))
    copy_hub_encoder_weights(without_dropout, ours)
    for source, target in zip(
        without_dropout.weights, with_dropout.weights, strict=True
    ):
        target.assign(np_(source))
    got = np_(ours(embed(TARGET_IDS)))
    real = TARGET_IDS != 0
    np.testing.assert_allclose(
        got[real], np_(without_dropout(embed(TARGET_IDS)))[real], atol=1e-5
    )
    np.testing.assert_allclose(got, np_(with_dropout(embed(TARGET_IDS))), atol=1e-5)


@pytest.mark.parametrize("with_encoder", [False, True], ids=["only", "cross"])
def test_decoder_with_explicit_padding_masks_matches_keras_hub_everywhere(
    with_encoder,
):
    hub = keras_hub_layers().TransformerDecoder(32, 4)
    ours = TransformerDecoderBlock(32, 4)
    inputs = (X, ENC) if with_encoder else (X,)
    masks = {"decoder_padding_mask": PAD}
    if with_encoder:
        masks["encoder_padding_mask"] = ENC_PAD
    hub(*inputs, **masks)
    ours(*inputs, **masks)
    copy_hub_encoder_weights(hub, ours)
    want = np_(hub(*inputs, **masks))
    np.testing.assert_allclose(np_(ours(*inputs, **masks)), want, atol=1e-5)


def test_explicit_padding_mask_replaces_the_keras_mask_as_in_keras_hub():
    # keras-hub reads the explicit padding mask instead of the Keras mask of
    # the sequence (and warns); so does ours, in the decoder's self- and
    # cross-attention alike.
    hub = keras_hub_layers().TransformerDecoder(32, 4)
    ours = TransformerDecoderBlock(32, 4)
    embed = masked_sequences()
    masks = {
        "decoder_padding_mask": np.ones(TARGET_IDS.shape, bool),
        "encoder_padding_mask": np.array([[True] * 5, [True] * 2 + [False] * 3]),
    }
    hub(embed(TARGET_IDS), embed(SOURCE_IDS), **masks)
    ours(embed(TARGET_IDS), embed(SOURCE_IDS), **masks)
    copy_hub_encoder_weights(hub, ours)
    want = np_(hub(embed(TARGET_IDS), embed(SOURCE_IDS), **masks))
    got = np_(ours(embed(TARGET_IDS), embed(SOURCE_IDS), **masks))
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_decoder_query_with_no_key_gets_zeros_as_keras_hub_with_dropout():
    # The documented difference at a query left with no key (here the first
    # two positions of a left-padded sequence, under the causal mask):
    # keras-hub's block gives it zero attention with a dropout rate (as ours
    # always does), and the unweighted mean of all values with dropout=0.
    hub_layers = keras_hub_layers()
    left_pad = {
        "decoder_padding_mask": np.array([[True] * T, [False] * 2 + [True] * 4])
    }
    ours = TransformerDecoderBlock(32, 4)
    without_dropout = hub_layers.TransformerDecoder(32, 4)
    with_dropout = hub_layers.TransformerDecoder(32, 4, dropout=0.1)
    for layer in (ours, without_dropout, with_dropout):
        layer(X, **left_pad)
    copy_hub_encoder_weights(without_dropout, ours)
    for source, target in zip(
        without_dropout.weights, with_dropout.weights, strict=True
    ):
        target.assign(np_(source))
    got = np_(ours(X, **left_pad))
    np.testing.assert_allclose(got, np_(with_dropout(X, **left_pad)), atol=1e-5)
    differs = np.abs(got - np_(without_dropout(X, **left_pad))).max(-1) > 1e-4
    np.testing.assert_array_equal(differs, [[False] * T, [True] * 2 + [False] * 4])


# -- packed sequences ----------------------------------------------------------

PACKED_IDS = np.array([[1, 1, 1, 2, 2, 2], [5, 5, 5, 5, 6, 6]])


def assert_each_document_alone(call, packed):
    alone = each_document_alone(call, X, PACKED_IDS)
    np.testing.assert_allclose(np_(packed), alone, atol=2e-5)


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("positions", [None, "rotary"])
def test_encoder_packed_rows_match_each_document_alone(chunk_size, positions):
    block = TransformerEncoderBlock(
        32, num_heads=2, chunk_size=chunk_size, attention_positions=positions
    )
    packed = block(X, segment_ids=PACKED_IDS)
    assert_each_document_alone(block, packed)


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_decoder_packed_rows_match_each_document_alone(chunk_size, causal):
    block = TransformerDecoderBlock(
        32, num_heads=2, chunk_size=chunk_size, attention_positions="alibi"
    )
    packed = block(X, segment_ids=PACKED_IDS, use_causal_mask=causal)
    assert_each_document_alone(lambda x: block(x, use_causal_mask=causal), packed)


def test_decoder_packed_rows_decode_with_the_pair_of_ids():
    block = TransformerDecoderBlock(32, num_heads=2, normalize_first=True)
    full = np_(block(X, segment_ids=PACKED_IDS))
    cache = block.initial_self_attention_cache(B, T)
    for t in range(T):
        output, cache = block(
            X[:, t : t + 1],
            self_attention_cache=cache,
            self_attention_cache_update_index=t,
            segment_ids=(PACKED_IDS[:, t : t + 1], PACKED_IDS),
        )
        np.testing.assert_allclose(np_(output)[:, 0], full[:, t], atol=2e-5)
    with pytest.raises(ValueError, match="pass `segment_ids` as a pair"):
        block(
            X[:, :1],
            self_attention_cache=cache,
            self_attention_cache_update_index=0,
            segment_ids=PACKED_IDS[:, :1],
        )


def test_blocks_name_bad_segment_ids():
    block = TransformerEncoderBlock(32, num_heads=2)
    with pytest.raises(ValueError, match=r"received dtype float32 and shape"):
        block(X, segment_ids=PACKED_IDS.astype("float32"))
    with pytest.raises(ValueError, match=r"\(batch, 6\); received shape \(2, 4\)"):
        block(X, segment_ids=PACKED_IDS[:, :4])


def test_decoder_int8_self_attention_cache_decodes_close_to_one_pass():
    block = TransformerDecoderBlock(32, 2, cache_dtype="int8")
    full = np_(block(X, ENC))
    assert block.get_config()["cache_dtype"] == "int8"
    assert TransformerDecoderBlock.from_config(block.get_config()).cache_dtype == "int8"
    assert block.self_attention.cache_dtype == "int8"
    assert block.cross_attention.cache_dtype is None  # computed once per source
    self_cache = block.initial_self_attention_cache(B, T)
    assert [ops.convert_to_numpy(p).dtype for p in self_cache] == [np.int8, np.int16]
    cross_cache = block.compute_cross_attention_cache(ENC)
    steps = []
    for t in range(T):
        out, self_cache, cross_cache = block(
            X[:, t : t + 1],
            self_attention_cache=self_cache,
            self_attention_cache_update_index=t,
            cross_attention_cache=cross_cache,
        )
        steps.append(np_(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=3e-2)
    with pytest.raises(ValueError, match="Unknown `cache_dtype`: 'uint8'"):
        TransformerDecoderBlock(32, 2, cache_dtype="uint8")
