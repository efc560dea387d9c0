"""Shared pytest setup: tests marked ``gpu`` skip cleanly where no device is present."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.cuda


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if eagle.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh random generator per test (never zeros for GPU checks)."""
    return np.random.default_rng()
