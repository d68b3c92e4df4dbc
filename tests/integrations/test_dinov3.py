"""keras-hub's DINOv3 with our attention: the same outputs as keras-hub's own
model (the 2-D rotary encoding on the patch tokens only, the class and
register tokens left unrotated, keras-hub's bias flags), its weight paths
and order, the chunked path, saving, LoRA and quantization."""

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")
if not hasattr(keras_hub.models, "DINOV3Backbone"):
    pytest.skip(
        f"keras-hub {keras_hub.__version__} has no DINOv3", allow_module_level=True
    )

import keras  # noqa: E402

from keras_attention.integrations.keras_hub import (  # noqa: E402
    family_of,
    swap_attention,
)
from keras_attention.integrations.keras_hub.dinov3 import (  # noqa: E402
    DINOV3Attention,
    PatchRotary,
)
from tests.integrations.keras_hub_models import numpy, randomize  # noqa: E402

IMAGE, PATCH, REGISTERS = 16, 4, 2
TOKENS = (IMAGE // PATCH) ** 2 + 1 + REGISTERS


def backbone(**overrides):
    """keras-hub's tiny DINOv3 (16 patches, a class token, 2 registers), its
    weights drawn from N(0, 0.3), the norms' scales about 1."""
    keras.utils.set_random_seed(0)
    model = keras_hub.models.DINOV3Backbone(
        **{
            "patch_size": PATCH,
            "num_layers": 2,
            "hidden_dim": 16,
            "num_heads": 4,
            "intermediate_dim": 32,
            "num_register_tokens": REGISTERS,
            "image_shape": (IMAGE, IMAGE, 3),
            **overrides,
        }
    )
    randomize(model, 0.3)
    for weight in model.weights:
        if weight.path.endswith("gamma"):  # LayerNormalization's scales
            weight.assign(weight + 1.0)
    return model


def images(batch=2, seed=1):
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.normal(size=(batch, IMAGE, IMAGE, 3)).astype("float32")}


def attention_layers(model):
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.MultiHeadAttention)
    ]


def assert_outputs_equal(swapped, original, atol=1e-5):
    x = images()
    got, want = numpy(swapped(x)), numpy(original(x))
    assert got.shape == (2, TOKENS, 16)
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"use_key_bias": False, "use_proj_bias": False, "use_gated_mlp": True}],
    ids=["biases", "no_key_or_output_bias"],
)
def test_outputs_equal_keras_hubs(overrides):
    original = backbone(**overrides)
    assert family_of(type(original)) is not None
    swapped = swap_attention(original)
    assert isinstance(swapped, keras_hub.models.DINOV3Backbone)
    layers = attention_layers(swapped)
    assert len(layers) == 2 and all(isinstance(a, DINOV3Attention) for a in layers)
    assert isinstance(layers[0].rotary_embedding, PatchRotary)
    assert_outputs_equal(swapped, original)


def test_the_rotary_encoding_leaves_the_prefix_tokens_and_changes_the_patches():
    rotary = PatchRotary()
    x = np.random.default_rng(0).normal(size=(1, 5, 2, 4)).astype("float32")
    angles = np.linspace(0.3, 1.2, 3 * 2).reshape(3, 2)
    angles = np.concatenate([angles, angles], axis=-1)
    rotated = numpy(rotary(x, positions=(np.cos(angles), np.sin(angles))))
    np.testing.assert_array_equal(rotated[:, :2], x[:, :2])
    # A rotation of each pair (i, i + 2): the patches' norms are kept.
    np.testing.assert_allclose(
        np.linalg.norm(rotated[:, 2:], axis=-1),
        np.linalg.norm(x[:, 2:], axis=-1),
        rtol=1e-5,
    )
    assert np.abs(rotated[:, 2:] - x[:, 2:]).max() > 1e-2


def test_weight_paths_and_order_are_keras_hubs():
    original = backbone(use_key_bias=False)
    swapped = swap_attention(original)
    rebuilt = type(original).from_config(original.get_config())
    assert [w.path for w in swapped.weights] == [w.path for w in rebuilt.weights]
    assert [w.shape for w in swapped.weights] == [w.shape for w in original.weights]
    assert any(w.path.endswith("q_proj/kernel") for w in swapped.weights)


def test_the_chunked_path_gives_keras_hubs_outputs():
    original = backbone()
    swapped = swap_attention(original, chunk_size=8)
    assert_outputs_equal(swapped, original)
    assert {a.attention_path for a in attention_layers(swapped)} == {"chunked"}


def test_saves_and_loads_in_safe_mode_with_our_attention(tmp_path):
    swapped = swap_attention(backbone(), chunk_size=8)
    path = str(tmp_path / "dinov3.keras")
    swapped.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(swapped)
    layers = attention_layers(loaded)
    assert all(isinstance(a, DINOV3Attention) and a.chunk_size == 8 for a in layers)
    x = images()
    np.testing.assert_array_equal(numpy(loaded(x)), numpy(swapped(x)))


def test_lora_and_quantization_apply_after_the_swap():
    swapped = swap_attention(backbone())
    swapped.enable_lora(2, target_layer_names=["q_proj", "v_proj"])
    lora = [w.path for w in swapped.trainable_weights]
    assert any("attention/q_proj/lora_kernel_a" in p for p in lora)
    assert any("attention/v_proj/lora_kernel_b" in p for p in lora)
    reference = backbone()
    reference.quantize("int8")
    quantized = swap_attention(backbone())
    quantized.quantize("int8")
    kernels = [a._query_dense._kernel for a in attention_layers(quantized)]
    assert all(keras.backend.standardize_dtype(k.dtype) == "int8" for k in kernels)
    x = images()
    np.testing.assert_allclose(
        numpy(quantized(x)), numpy(reference(x)), atol=1e-4, rtol=0
    )
