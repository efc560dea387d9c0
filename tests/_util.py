"""Helpers shared by the tests."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest


def importable(module: str) -> bool:
    """False for eagle's torch modules (``eagle.torch``, ``eagle._torch_*``) where torch is
    not installed, as in CI; True for every other module."""
    if module == "eagle.torch" or module.startswith("eagle._torch"):
        return importlib.util.find_spec("torch") is not None
    return True


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref||, computed in float64."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


class FakeCalls:
    """Stands in for a checked binding (``eagle.cuda._runtime.cudart`` or ``cudadrv``):
    ``fake.cudaX(*args)`` returns ``handler("cudaX", *args)``."""

    def __init__(self, handler: Callable[..., Any]) -> None:
        self._handler = handler

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(self._handler, name)


def fake_calls(
    monkeypatch: pytest.MonkeyPatch,
    handler: Callable[..., Any],
    *modules: ModuleType,
    binding: str = "cudart",
) -> None:
    """Send each of ``modules``' calls through ``binding`` to ``handler(name, *args)``."""
    for module in modules:
        monkeypatch.setattr(module, binding, FakeCalls(handler))


def forget_fake_leftovers() -> None:
    """Drop what tests with faked drivers left for :func:`eagle.clear_caches` to give back:
    libraries of collected kernels, slots of collected error records and collected cuBLAS
    handles. Giving them back needs the driver they were faked over; a test that calls
    ``clear_caches`` without fakes starts with none (on a GPU this leaks a few test-made
    libraries, which the process's end frees)."""
    import gc

    from eagle.cuda import _records, module
    from eagle.gemm import capture

    gc.collect()
    module._unused_libraries.clear()
    _records._unused.clear()
    capture._retired.clear()
