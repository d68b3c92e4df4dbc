"""What `keras_attention.decoding` exports, and the module name speculative
decoding had before it moved into the package."""

import ast
import pathlib

import keras_attention.decoding
import keras_attention.speculative
from keras_attention.decoding import speculative

PACKAGE = pathlib.Path(keras_attention.decoding.__file__).parent


def test_the_package_exports_the_names_of_the_former_module():
    assert sorted(keras_attention.decoding.__all__) == [
        "GenerationMixin",
        "LanguageModelGenerationMixin",
        "NEG_INF",
        "PAD_ID",
        "ancestry_attention_mask",
        "ancestry_beam_search",
        "beam_search",
        "check_prompt_ids",
        "get_sampler",
        "greedy_fill",
        "greedy_search",
        "mean_log_probs",
        "model_beam_search",
        "prefill",
        "sample",
        "truncate_after_end",
    ]
    for name in keras_attention.decoding.__all__:
        assert hasattr(keras_attention.decoding, name)


def test_keras_attention_speculative_is_the_decoding_module():
    names = ["speculative_fill", "speculative_generate", "speculative_translate"]
    assert keras_attention.speculative.__all__ == names
    for name in names:
        assert getattr(keras_attention.speculative, name) is getattr(speculative, name)


def sibling_imports(path):
    """The modules of `keras_attention.decoding` that the file at `path`
    imports, `__init__` for a name imported from the package itself."""
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("keras_attention.decoding."):
                found.add(node.module.rsplit(".", 1)[1])
            elif node.module == "keras_attention.decoding":
                names = {alias.name for alias in node.names}
                found |= names & modules
                if names - modules:
                    found.add("__init__")
    return found & modules


def test_the_modules_import_one_another_without_a_cycle():
    graph = {path.stem: sibling_imports(path) for path in PACKAGE.glob("*.py")}
    # Peel off the modules that import no module left; a cycle never goes.
    while graph:
        leaves = {
            name for name, imported in graph.items() if not imported & graph.keys()
        }
        assert leaves, f"an import cycle among {sorted(graph)}"
        graph = {name: graph[name] for name in graph.keys() - leaves}
