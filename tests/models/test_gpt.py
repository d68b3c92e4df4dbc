import importlib.util

import keras
import numpy as np
import pytest

from keras_attention.models import GPT, LSTMLanguageModel
from tests.layer_test import assert_saved_model_matches, each_document_alone
from tests.models.model_cases import LM_VOCABULARY, tiny_gpt, tiny_lstm_lm

END = 3  # the models' end token in these tests


def token_ids(rows=3, length=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(4, LM_VOCABULARY, (rows, length)).astype("int32")


# Detached NumPy on every backend (torch tensors that need grad refuse
# np.asarray).
numpy = keras.ops.convert_to_numpy


def greedy_by_full_forward(model, prompts, max_length):
    """Greedy continuations of `prompts` (lists of token ids) with a full
    forward pass per token (no cache): what `generate` must reproduce. Each
    pass reads every row's tokens so far padded to `max_length`: the model is
    causal (tested below), so the padding after a row's last token does not
    change its logits, and every pass has one shape (on JAX each new shape
    compiles every op again). A row ends at `max_length` or at a generated
    end token; the rows share the passes, each read at its own last token."""
    rows = [list(prompt) for prompt in prompts]

    def running(tokens, prompt):
        ended = len(tokens) > len(prompt) and tokens[-1] == model.end_token_id
        return len(tokens) < max_length and not ended

    while any(running(t, p) for t, p in zip(rows, prompts, strict=True)):
        padded = np.zeros((len(rows), max_length), "int32")
        for i, tokens in enumerate(rows):
            padded[i, : len(tokens)] = tokens
        logits = numpy(model(padded))
        for i, (tokens, prompt) in enumerate(zip(rows, prompts, strict=True)):
            if running(tokens, prompt):
                tokens.append(int(np.argmax(logits[i, len(tokens) - 1])))
    return [tokens + [0] * (max_length - len(tokens)) for tokens in rows]


def test_logits_shape_and_causality():
    model = tiny_gpt()
    ids = token_ids()
    logits = numpy(model(ids))
    assert logits.shape == (3, 10, LM_VOCABULARY)
    changed = ids.copy()
    changed[:, 6:] = 5  # later tokens cannot change earlier positions
    np.testing.assert_allclose(numpy(model(changed))[:, :6], logits[:, :6])


def test_output_logits_use_the_input_embedding():
    model = tiny_gpt()
    embeddings = model.token_embedding.embeddings
    vocabulary_sized = [w for w in model.weights if LM_VOCABULARY in w.shape]
    assert vocabulary_sized == [embeddings]  # one (V, d) matrix, no output layer
    ids = token_ids()
    hidden = keras.Model(model.input, model.final_norm.output)(ids)
    np.testing.assert_allclose(
        numpy(model(ids)),
        numpy(hidden) @ numpy(embeddings).T,
        rtol=1e-5,
        atol=1e-5,
    )
    d, f, layers = model.hidden_dim, model.intermediate_dim, model.num_layers
    block = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    expected = LM_VOCABULARY * d + model.max_length * d + layers * block + 2 * d
    assert model.count_params() == expected


@pytest.mark.parametrize("build", [tiny_gpt, tiny_lstm_lm], ids=["gpt", "lstm"])
def test_cached_decode_steps_match_the_full_forward(build):
    model = build()
    ids = token_ids()
    logits = numpy(model(ids))
    cache = model.initial_cache(3, 16)
    for t in range(ids.shape[1]):
        step, cache = model.decode_step(ids[:, t], cache, t)
        np.testing.assert_allclose(numpy(step), logits[:, t], atol=1e-5)


def test_a_prefix_through_the_cache_matches_the_full_forward():
    model = tiny_gpt()
    ids = token_ids()
    logits = numpy(model(ids))
    first, cache = model.call_with_cache(ids[:, :6], model.initial_cache(3, 16), 0)
    rest, _ = model.call_with_cache(ids[:, 6:], cache, 6)
    np.testing.assert_allclose(numpy(first), logits[:, :6], atol=1e-5)
    np.testing.assert_allclose(numpy(rest), logits[:, 6:], atol=1e-5)


@pytest.mark.parametrize("build", [tiny_gpt, tiny_lstm_lm], ids=["gpt", "lstm"])
def test_greedy_generation_continues_prompts_of_any_length(build):
    model = build(end_token_id=END)
    prompts = token_ids(3, 5)
    prompts[1, 2:] = 0  # a shorter prompt, right-padded
    prompts[2, 1:] = 0
    tokens = numpy(model.generate(prompts, max_length=12))
    assert tokens.shape == (3, 12)
    given = [[int(t) for t in prompt if t] for prompt in prompts]
    assert tokens.tolist() == greedy_by_full_forward(model, given, 12)
    np.testing.assert_array_equal(
        numpy(model.generate(prompts, max_length=12, jit_compile=False)), tokens
    )


def test_an_end_token_in_the_prompt_does_not_end_generation():
    model = tiny_gpt(end_token_id=END)
    prompt = np.array([[END, 7, 8]], "int32")
    tokens = numpy(model.generate(prompt, max_length=10))[0]
    assert tokens[:3].tolist() == [END, 7, 8]
    generated = tokens[3:].tolist()
    if END in generated:  # padding after the first generated end token
        assert not any(generated[generated.index(END) + 1 :])
    assert [tokens.tolist()] == greedy_by_full_forward(model, [[END, 7, 8]], 10)


@pytest.mark.parametrize(
    "sampler",
    [*(pytest.param(s, marks=pytest.mark.slow) for s in ("top_k", "top_p")), "random"],
)
def test_keras_hub_samplers_draw_valid_tokens(sampler):
    keras_hub = pytest.importorskip("keras_hub")

    model = tiny_gpt()
    prompts = token_ids(4, 3)
    tokens = numpy(model.generate(prompts, max_length=12, sampler=sampler))
    assert tokens.shape == (4, 12) and tokens.min() >= 0
    assert tokens.max() < LM_VOCABULARY
    np.testing.assert_array_equal(tokens[:, :3], prompts)
    # A sampler object with its own temperature and seed.
    hot = keras_hub.samplers.TopKSampler(k=3, temperature=2.0, seed=1)
    tokens = numpy(model.generate(prompts, max_length=12, sampler=hot))
    assert tokens.shape == (4, 12)


def test_saved_and_loaded_in_safe_mode_with_the_same_outputs(tmp_path):
    for build in (tiny_gpt, tiny_lstm_lm):
        model = build(end_token_id=END)
        ids = token_ids()
        loaded = assert_saved_model_matches(model, ids, tmp_path, atol=1e-6)
        np.testing.assert_array_equal(
            numpy(loaded.generate(ids[:, :3], max_length=9)),
            numpy(model.generate(ids[:, :3], max_length=9)),
        )


@pytest.mark.slow
def test_trains_under_xla():
    model = tiny_gpt()
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    ids = token_ids(8, 12)
    first = model.train_on_batch(ids[:, :-1], ids[:, 1:])
    for _ in range(5):
        last = model.train_on_batch(ids[:, :-1], ids[:, 1:])
    assert np.isfinite(first) and last < first


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_generate(policy):
    keras.config.set_dtype_policy(policy)
    model = tiny_gpt()
    assert np.all(np.isfinite(numpy(model(token_ids())).astype("float32")))
    assert numpy(model.generate(token_ids(2, 3), max_length=8)).shape == (2, 8)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        tiny_gpt(hidden_dim=30, num_heads=4)
    with pytest.raises(ValueError, match="end_token_id"):
        tiny_gpt(end_token_id=LM_VOCABULARY)
    with pytest.raises(ValueError, match="num_layers"):
        LSTMLanguageModel(LM_VOCABULARY, num_layers=0)
    model = tiny_gpt()
    with pytest.raises(ValueError, match="at least one token"):
        model.generate(np.array([[0, 5]]), max_length=8)
    with pytest.raises(ValueError, match="max_length.*16.*received max_length=17"):
        model.generate(token_ids(1, 3), max_length=17)
    with pytest.raises(ValueError, match="from the prompt's length"):
        model.generate(token_ids(1, 6), max_length=4)
    if importlib.util.find_spec("keras_hub"):  # other samplers are keras-hub's
        with pytest.raises(ValueError, match="sampler"):
            model.generate(token_ids(1, 3), max_length=8, sampler="beam-ish")
    with pytest.raises(ValueError, match="input has 17 tokens|at most"):
        model(token_ids(1, 17))


def copy_task(num_examples, length=6, seed=0):
    """Sequences `x END x`: the second copy of `x` (random tokens) can only be
    predicted by attending back to the first. Returns inputs, targets and
    weights (1 on the copied tokens)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(4, LM_VOCABULARY, (num_examples, length))
    sequences = np.concatenate([x, np.full((num_examples, 1), END), x], 1)
    weights = np.zeros((num_examples, 2 * length), "float32")
    weights[:, length:] = 1.0
    return sequences[:, :-1].astype("int32"), sequences[:, 1:], weights, length


@pytest.mark.slow
def test_gpt_learns_to_copy_with_attention():
    # Measured with these 5 epochs (100 steps of 64): every held-out copy
    # right with seeds 1, 2 and 3.
    keras.utils.set_random_seed(0)
    inputs, targets, weights, length = copy_task(1280)
    model = GPT(
        LM_VOCABULARY,
        max_length=16,
        hidden_dim=64,
        num_heads=4,
        num_layers=2,
        intermediate_dim=128,
        dropout=0.0,
    )
    model.compile(
        keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(3e-3, 100)),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    model.fit(
        inputs, targets, sample_weight=weights, epochs=5, batch_size=64, verbose=0
    )
    test_inputs, test_targets, _, _ = copy_task(200, seed=1)
    prompts = test_inputs[:, : length + 1]
    tokens = numpy(model.generate(prompts, max_length=2 * length + 1))
    accuracy = np.mean(tokens[:, length + 1 :] == test_targets[:, length:])
    assert accuracy > 0.95, accuracy


# -- positions -------------------------------------------------------------


@pytest.mark.parametrize(
    "input_positions, attention_positions",
    [("sinusoidal", None), (None, "rotary"), (None, "alibi"), (None, "relative")],
)
def test_positions_decode_past_the_training_length(
    input_positions, attention_positions
):
    # Only learned positions end at max_length: the others read and decode
    # longer sequences, through the cache as in one forward pass.
    model = tiny_gpt(
        input_positions=input_positions,
        attention_positions=attention_positions,
        num_key_value_heads=1,
    )
    ids = token_ids(rows=2, length=24)
    full = numpy(model(ids))
    cache = model.initial_cache(2, 24)
    assert tuple(cache[0].shape) == (2, 2, 24, 1, 8)  # one key/value head
    steps = []
    for t in range(24):
        logits, cache = model.call_with_cache(ids[:, t : t + 1], cache, t)
        steps.append(numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


@pytest.mark.parametrize("attention_positions", ["rotary", "alibi"])
def test_positions_inside_attention_add_no_position_weights(
    attention_positions, tmp_path
):
    model = tiny_gpt(input_positions=None, attention_positions=attention_positions)
    learned = tiny_gpt()
    assert model.count_params() == learned.count_params() - 16 * 16
    assert model.blocks[0].self_attention.attention_positions == attention_positions
    assert_saved_model_matches(model, token_ids(), tmp_path)


def test_relative_positions_add_a_bias_table_per_block(tmp_path):
    # T5's buckets (32) times the heads (2), in each of the two blocks.
    model = tiny_gpt(input_positions=None, attention_positions="relative")
    assert model.count_params() == tiny_gpt().count_params() - 16 * 16 + 2 * 32 * 2
    assert_saved_model_matches(model, token_ids(), tmp_path)


def test_input_and_attention_positions_combine():
    model = tiny_gpt(input_positions="sinusoidal", attention_positions="rotary")
    config = model.get_config()
    assert config["input_positions"] == "sinusoidal"
    assert config["attention_positions"] == "rotary"
    assert model.blocks[0].self_attention.attention_positions == "rotary"
    assert model(token_ids()).shape[-1] == model.vocabulary_size


def test_generation_goes_past_max_length_with_positions_computed_at_any_index():
    # Twice the trained length, through the cache: the same tokens as the
    # argmax of a full forward pass over the tokens so far, re-fed. One row's
    # prompt is itself longer than max_length (fed through the cache past it).
    # Rotary positions here; that every other kind of position gives the
    # logits of the full forward pass step by step past max_length is
    # test_positions_decode_past_the_training_length's.
    model = tiny_gpt(input_positions=None, attention_positions="rotary")
    assert model.position_limit is None
    prompts = np.zeros((2, 20), "int32")
    prompts[0, :3] = token_ids(1, 3, seed=1)[0]
    prompts[1] = token_ids(1, 20, seed=2)[0]
    tokens = numpy(model.generate(prompts, max_length=32))
    assert tokens.shape == (2, 32)
    given = [[int(t) for t in prompt if t] for prompt in prompts]
    assert tokens.tolist() == greedy_by_full_forward(model, given, 32)
    assert model.initial_cache(2, 32)[0].shape[2] == 32  # sized for the request


def test_learned_positions_refuse_a_cache_past_max_length():
    model = tiny_gpt()
    assert model.position_limit == 16
    message = (
        r"at most the model's max_length=16: its input positions "
        r"\(input_positions='learned'\) are a learned table of 16 rows; "
        r"received max_length=32"
    )
    with pytest.raises(ValueError, match=message):
        model.generate(token_ids(1, 3), max_length=32)
    with pytest.raises(ValueError, match="at most the model's max_length=16"):
        model.initial_cache(1, 17)
    with pytest.raises(ValueError, match="Unknown `attention_positions`: 't5'"):
        tiny_gpt(attention_positions="t5")


# -- packed sequences ----------------------------------------------------------

PACKED_TOKENS = np.array([[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18, 0, 0]])
PACKED_IDS = np.array([[1, 1, 1, 2, 2, 2, 2, 2], [1, 1, 2, 2, 2, 2, 3, 3]])


def assert_each_document_alone(model, packed):
    alone = each_document_alone(model, PACKED_TOKENS, PACKED_IDS)
    np.testing.assert_allclose(numpy(packed), alone, atol=2e-5)


@pytest.mark.parametrize("path", ["standard", "chunked"])
@pytest.mark.parametrize(
    "positions",
    [
        {},
        {"input_positions": "sinusoidal"},
        {"input_positions": None, "attention_positions": "rotary"},
    ],
    ids=["learned", "sinusoidal", "rotary"],
)
def test_packed_rows_give_each_document_its_logits_alone(path, positions, monkeypatch):
    if path == "chunked":  # every attention layer built now takes the tiles
        monkeypatch.setattr(keras.config, "is_flash_attention_enabled", lambda: True)
    model = tiny_gpt(**positions)
    packed = model({"token_ids": PACKED_TOKENS, "segment_ids": PACKED_IDS})
    assert_each_document_alone(model, packed)
    # A dict of token ids alone is the unpacked model.
    np.testing.assert_array_equal(
        numpy(model({"token_ids": PACKED_TOKENS})),
        numpy(model(PACKED_TOKENS)),
    )


@pytest.mark.slow
def test_packed_rows_train_with_fit_and_keep_generation():
    model = tiny_gpt()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = {"token_ids": PACKED_TOKENS, "segment_ids": PACKED_IDS}
    history = model.fit(x, PACKED_TOKENS, epochs=2, batch_size=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    # Generation decodes unpacked prompts through the cache as before.
    prompt = PACKED_TOKENS[:1, :3]
    tokens = numpy(model.generate(prompt, max_length=4))
    logits = numpy(model(prompt))
    assert tokens[0, :3].tolist() == prompt[0].tolist()
    assert tokens[0, 3] == np.argmax(logits[0, -1])


def test_a_packed_row_in_a_functional_model_and_after_saving(tmp_path):
    model = tiny_gpt()
    inputs = {
        name: keras.Input((None,), dtype="int32", name=name)
        for name in ("token_ids", "segment_ids")
    }
    outer = keras.Model(inputs, model(inputs))
    x = {"token_ids": PACKED_TOKENS, "segment_ids": PACKED_IDS}
    np.testing.assert_allclose(
        numpy(outer(x)),
        numpy(model(x)),
        atol=1e-6,
    )
    loaded = assert_saved_model_matches(model, x, tmp_path)
    assert loaded.get_config() == model.get_config()


@pytest.mark.parametrize(
    "inputs, message",
    [
        (
            {"token_ids": PACKED_TOKENS, "segment_ids": PACKED_IDS.astype("float32")},
            r"`segment_ids` must be integer ids of the shape of `token_ids`, "
            r"\(2, 8\).*received dtype float32 and shape \(2, 8\)",
        ),
        (
            {"token_ids": PACKED_TOKENS, "segment_ids": PACKED_IDS[:, :5]},
            r"received dtype int\d+ and shape \(2, 5\)",
        ),
        (
            {"token_ids": PACKED_TOKENS, "segment_ids": PACKED_IDS[0]},
            r"received dtype int\d+ and shape \(8,\)",
        ),
        (
            {"token_ids": PACKED_TOKENS, "segments": PACKED_IDS},
            r"must hold `token_ids` .* received the keys \['segments', 'token_ids'\]",
        ),
    ],
)
def test_bad_packed_inputs_are_named(inputs, message):
    with pytest.raises(ValueError, match=message):
        tiny_gpt()(inputs)


# -- the int8 cache --------------------------------------------------------------

# Logits through the int8 cache stay within this of the float cache's (tiny
# GPTs of N(0, 0.02) weights, logits of magnitude about 0.5; the float cache
# matches the full forward pass within 1e-5).
INT8_LOGITS_TOLERANCE = 5e-3


def int8_and_float_gpts(**kwargs):
    """The same weights with a float and an int8 cache (head_dim 16)."""
    sizes = {"hidden_dim": 32, "input_positions": None, "attention_positions": "rotary"}
    float_cache = tiny_gpt(**{**sizes, **kwargs})
    int8_cache = tiny_gpt(cache_dtype="int8", **{**sizes, **kwargs})
    int8_cache.set_weights(float_cache.get_weights())
    return float_cache, int8_cache


def test_an_int8_cache_decodes_close_to_the_float_cache():
    float_model, int8_model = int8_and_float_gpts()
    ids = token_ids(rows=2, length=24)  # past max_length too (rotary)
    float_cache = float_model.initial_cache(2, 24)
    int8_cache = int8_model.initial_cache(2, 24)
    differences = []
    for t in range(24):
        expected, float_cache = float_model.decode_step(ids[:, t], float_cache, t)
        got, int8_cache = int8_model.decode_step(ids[:, t], int8_cache, t)
        expected = numpy(expected)
        differences.append(np.abs(numpy(got) - expected).max())
    assert max(differences) < INT8_LOGITS_TOLERANCE, differences

    # Memory per token, from the cache arrays: int8 values and a 2-byte
    # scale per row of 16, 2 * 2 heads * (16 + 2) bytes per block, against
    # 2 * 2 * 16 * 4 in float32.
    def bytes_per_token(cache):
        parts = keras.tree.flatten(cache)
        total = sum(numpy(part).nbytes for part in parts)
        return total / (2 * 24)

    assert bytes_per_token(int8_cache) == 2 * 2 * 2 * (16 + 2)
    assert bytes_per_token(float_cache) == 2 * 2 * 2 * 16 * 4
    assert bytes_per_token(int8_cache) <= 0.3 * bytes_per_token(float_cache)


@pytest.mark.parametrize(
    "jit_compile", [pytest.param(True, marks=pytest.mark.slow), False]
)
def test_int8_greedy_generation_picks_the_float_caches_tokens_where_margins_allow(
    jit_compile,
):
    float_model, int8_model = int8_and_float_gpts()
    prompts = token_ids(3, 3, seed=3)
    expected = numpy(
        float_model.generate(prompts, max_length=12, jit_compile=jit_compile)
    )
    got = numpy(int8_model.generate(prompts, max_length=12, jit_compile=jit_compile))
    for got_row, row in zip(got, expected, strict=True):
        differ = np.flatnonzero(got_row != row)
        if differ.size:  # only where the float logits nearly tie
            first = differ[0]
            logits = numpy(float_model(row[None, :first]))
            top_two = np.sort(logits[0, -1])[-2:]
            assert top_two[1] - top_two[0] < 2 * INT8_LOGITS_TOLERANCE, (row, got_row)


def test_the_cache_dtype_is_saved_and_checked(tmp_path):
    _, model = int8_and_float_gpts()
    assert model.get_config()["cache_dtype"] == "int8"
    assert model.blocks[0].get_config()["cache_dtype"] == "int8"
    prompts = token_ids(2, 3)
    tokens = numpy(model.generate(prompts, max_length=8))
    path = str(tmp_path / "gpt_int8.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.cache_dtype == "int8"
    assert loaded.blocks[0].self_attention.cache_dtype == "int8"
    values, scales = loaded.initial_cache(1, 4)[0]
    assert numpy(values).dtype == np.int8
    np.testing.assert_array_equal(numpy(loaded.generate(prompts, max_length=8)), tokens)
    with pytest.raises(ValueError, match="Unknown `cache_dtype`: 'int4'"):
        tiny_gpt(cache_dtype="int4")
