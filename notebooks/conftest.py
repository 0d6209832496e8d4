"""The notebooks run as tests through nbmake (see pyproject.toml). Each loads the local embedding model, so each
is marked `slow`, like the other tests that do: `make test-fast` skips them, `make test` runs them."""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
