"""keras-hub's models with our attention. Every test here builds keras-hub's
model and the swapped one, and many compile `generate` or a training step:
they run in CI's slow tier (and on keras-hub's oldest tested release,
`.ci/run`), not in the README's fast tier."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integrations/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slow)
