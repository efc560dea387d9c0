"""eagle — capture-legal dense matrix products between your own CUDA kernels.

Submodules: :mod:`eagle.arrays`, :mod:`eagle.cuda`, :mod:`eagle.gemm`,
:mod:`eagle.plan`, :mod:`eagle.diff`. They are imported on first attribute
access; importing eagle never loads a CUDA driver.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Array", "arrays", "cuda", "diff", "gemm", "plan"]

_SUBMODULES = {"arrays", "cuda", "gemm", "plan", "diff"}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # hawk holds the one version string; read on demand
        return importlib.import_module("hawk").__version__
    if name in _SUBMODULES:
        return importlib.import_module(f"eagle.{name}")
    if name == "Array":
        return importlib.import_module("eagle.arrays").Array
    raise AttributeError(f"module 'eagle' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__, "__version__"])
