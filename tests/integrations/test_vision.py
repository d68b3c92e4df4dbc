"""keras-hub's vision encoders (ViT, SigLIP, CLIP, DINOv2) with our
attention: our layer in every block, keras-hub's weights in keras-hub's
order, the same outputs (CLIP's causal text encoder and SigLIP's text
encoder and pooling head included), saving, LoRA and quantization."""

import re

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    family_of,
    swap_attention,
)
from keras_attention.layers import MultiHeadAttention  # noqa: E402
from tests.integrations.keras_hub_models import (  # noqa: E402
    VOCABULARY,
    numpy,
    randomize,
)

IMAGE = 16
PATCH = 4
WIDTH = {"hidden_dim": 16, "num_layers": 2, "num_heads": 4}
SIGLIP_VISION = {
    **WIDTH,
    "patch_size": PATCH,
    "intermediate_dim": 32,
    "image_shape": (IMAGE, IMAGE, 3),
}
SIGLIP_TEXT = {
    **WIDTH,
    "vocabulary_size": VOCABULARY,
    "embedding_dim": 16,
    "intermediate_dim": 32,
    "max_sequence_length": 8,
}
CLIP_VISION = {
    **WIDTH,
    "patch_size": PATCH,
    "intermediate_dim": 32,
    "image_shape": (IMAGE, IMAGE, 3),
}
CLIP_TEXT = {
    **WIDTH,
    "vocabulary_size": VOCABULARY,
    "embedding_dim": 16,
    "intermediate_dim": 32,
    "max_sequence_length": 8,
}


def tiny(name):
    """keras-hub's tiny model `name` (a backbone or one of its encoders),
    its weights drawn from N(0, 0.3) (the norms' scales about 1), built
    after `keras.utils.set_random_seed(0)`."""
    keras.utils.set_random_seed(0)
    models = keras_hub.models
    if name == "vit":
        model = models.ViTBackbone(
            image_shape=(IMAGE, IMAGE, 3),
            patch_size=PATCH,
            mlp_dim=32,
            **WIDTH,
        )
    elif name == "dinov2":
        model = models.DINOV2Backbone(
            patch_size=PATCH,
            intermediate_dim=32,
            image_shape=(IMAGE, IMAGE, 3),
            position_embedding_shape=(IMAGE, IMAGE, 3),
            num_register_tokens=2,
            **WIDTH,
        )
    elif name == "siglip_vision":
        model = models.SigLIPVisionEncoder(**SIGLIP_VISION)
    elif name == "siglip_text":
        model = models.SigLIPTextEncoder(**SIGLIP_TEXT)
    elif name == "siglip":
        model = models.SigLIPBackbone(
            models.SigLIPVisionEncoder(**SIGLIP_VISION),
            models.SigLIPTextEncoder(**SIGLIP_TEXT),
        )
    elif name == "clip_vision":
        model = models.CLIPVisionEncoder(**CLIP_VISION)
    elif name == "clip_text":
        model = models.CLIPTextEncoder(**CLIP_TEXT)
    elif name == "clip":
        model = models.CLIPBackbone(
            models.CLIPVisionEncoder(**CLIP_VISION),
            models.CLIPTextEncoder(**CLIP_TEXT),
            projection_dim=8,
        )
    else:
        raise ValueError(name)
    randomize(model, 0.3, scales_at=0.0)
    for weight in model.weights:
        if weight.path.endswith("gamma"):  # LayerNormalization's scales
            weight.assign(weight + 1.0)
    return model


BACKBONES = [
    "vit",
    "dinov2",
    "siglip_vision",
    "siglip_text",
    "siglip",
    "clip_vision",
    "clip_text",
    "clip",
]


def inputs(name, batch=2, seed=1):
    """Random images and token ids for model `name`."""
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(batch, IMAGE, IMAGE, 3)).astype("float32")
    token_ids = rng.integers(1, VOCABULARY, (batch, 8)).astype("int32")
    if name == "vit":
        return images
    if name == "dinov2" or name.endswith("vision"):
        return {"images": images}
    if name.endswith("text"):
        return {"token_ids": token_ids}
    return {"images": images, "token_ids": token_ids}


def flat_outputs(model, x):
    """`model(x)`'s outputs (one, or a dict's, in key order) as NumPy."""
    result = model(x)
    if isinstance(result, dict):
        return [numpy(result[key]) for key in sorted(result)]
    return [numpy(result)]


def attention_layers(model):
    """Every `keras.layers.MultiHeadAttention` (Keras' or ours) in a model,
    its nested encoders' included."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.MultiHeadAttention)
    ]


def expected_attention_count(name):
    """How many attention layers keras-hub's model `name` has: one per
    block, and SigLIP's vision pooling head."""
    per_encoder = {"siglip_vision": 3, "siglip": 5, "clip": 4}
    return per_encoder.get(name, WIDTH["num_layers"])


def weight_paths(model):
    """The paths of `model`'s weights, in order, with the counter of the
    unnamed weights (SigLIP's pooling probe, `variable_<n>`, numbered in the
    process) left out."""
    return [re.sub(r"variable(_\d+)?$", "variable", w.path) for w in model.weights]


def assert_weights_are_keras_hubs(swapped, original):
    """The swapped model's weights are in the original's order and shapes,
    with the paths of keras-hub's own model built from the original's config
    (as `swap_attention` builds it: DINOv2 and the encoders then prefix
    their layers' names with the model's)."""
    rebuilt = type(original).from_config(original.get_config())
    assert weight_paths(swapped) == weight_paths(rebuilt)
    assert [w.shape for w in swapped.weights] == [w.shape for w in original.weights]


def max_difference(swapped, original, x):
    return max(
        float(np.abs(a - b).max())
        for a, b in zip(
            flat_outputs(swapped, x), flat_outputs(original, x), strict=True
        )
    )


@pytest.mark.parametrize("name", BACKBONES)
def test_outputs_equal_keras_hubs(name):
    original = tiny(name)
    assert family_of(type(original)) is not None
    swapped = swap_attention(original)
    assert isinstance(swapped, type(original)) and type(swapped) is not type(original)
    ours = attention_layers(swapped)
    assert len(ours) == expected_attention_count(name)
    assert all(type(a) is MultiHeadAttention for a in ours)
    assert all(
        type(a) is keras.layers.MultiHeadAttention for a in attention_layers(original)
    )
    assert_weights_are_keras_hubs(swapped, original)
    x = inputs(name)
    difference = max_difference(swapped, original, x)
    print(f"{name}: largest difference {difference:.2e}")
    assert difference < 1e-5


@pytest.mark.parametrize("name", ["siglip", "clip"])
def test_a_swapped_backbones_encoders_are_swapped(name):
    swapped = swap_attention(tiny(name), chunk_size=4)
    for encoder in (swapped.vision_encoder, swapped.text_encoder):
        assert family_of(type(encoder)) is family_of(type(swapped))
        assert hasattr(type(encoder), "family")
        assert encoder.attention_options == {"chunk_size": 4}


def test_clips_text_encoder_is_causal():
    model = swap_attention(tiny("clip_text"))
    x = inputs("clip_text")
    changed = dict(x, token_ids=x["token_ids"].copy())
    changed["token_ids"][:, -1] = (changed["token_ids"][:, -1] % (VOCABULARY - 1)) + 1
    before = numpy(model(x))
    after = numpy(model(changed))
    # The last token changes no earlier position's output.
    np.testing.assert_allclose(after[:, :-1], before[:, :-1], atol=1e-6)
    assert np.abs(after[:, -1] - before[:, -1]).max() > 1e-3


@pytest.mark.parametrize("name", ["vit", "siglip_vision", "clip_text", "dinov2"])
def test_the_chunked_path_gives_the_same_outputs(name):
    original = tiny(name)
    swapped = swap_attention(original, chunk_size=4)
    assert all(a.chunk_size == 4 for a in attention_layers(swapped))
    x = inputs(name)
    assert max_difference(swapped, original, x) < 1e-5
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


@pytest.mark.parametrize("name", ["vit", "siglip", "clip", "dinov2"])
def test_saves_and_loads_in_safe_mode_with_our_attention(name, tmp_path):
    swapped = swap_attention(tiny(name), chunk_size=4)
    path = str(tmp_path / "swapped.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    assert loaded.attention_options == {"chunk_size": 4}
    ours = attention_layers(loaded)
    assert len(ours) == expected_attention_count(name)
    assert all(type(a) is MultiHeadAttention and a.chunk_size == 4 for a in ours)
    x = inputs(name)
    for got, expected in zip(
        flat_outputs(loaded, x), flat_outputs(swapped, x), strict=True
    ):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "name, attention",
    [
        ("vit", "mha"),
        ("siglip_vision", "self_attn"),
        ("clip_vision", "attention"),
        ("dinov2", "attention"),
    ],
)
def test_lora_applies_after_the_swap(name, attention):
    swapped = swap_attention(tiny(name))
    swapped.enable_lora(2)
    lora = [w.path for w in swapped.trainable_weights]
    assert any(f"{attention}/query/lora_kernel_a" in p for p in lora)
    assert any(f"{attention}/value/lora_kernel_b" in p for p in lora)
    flat_outputs(swapped, inputs(name))  # (and the model runs with them)


@pytest.mark.parametrize("name", ["vit", "siglip_vision", "clip_vision", "dinov2"])
def test_quantization_applies_after_the_swap(name):
    reference = tiny(name)
    try:
        reference.quantize("int8")
    except (TypeError, NotImplementedError, ValueError) as error:
        pytest.skip(f"keras-hub's own model does not quantize here: {error}")
    quantized = swap_attention(tiny(name))
    quantized.quantize("int8")
    assert all(
        keras.backend.standardize_dtype(a._query_dense.kernel.dtype) == "int8"
        for a in attention_layers(quantized)
    )
    x = inputs(name)
    assert max_difference(quantized, reference, x) < 1e-4


def test_vit_image_classifier_outputs_equal_keras_hubs():
    original = keras_hub.models.ViTImageClassifier(
        backbone=tiny("vit"), num_classes=3, preprocessor=None
    )
    swapped = swap_attention(original)
    assert type(swapped) is keras_hub.models.ViTImageClassifier
    x = inputs("vit")
    np.testing.assert_allclose(numpy(swapped(x)), numpy(original(x)), atol=1e-5)
