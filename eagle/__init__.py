"""eagle — capture-legal dense matrix products between your own CUDA kernels.

Submodules: :mod:`eagle.arrays`, :mod:`eagle.cuda`, :mod:`eagle.gemm`,
:mod:`eagle.plan`, :mod:`eagle.diff`. They are imported on first attribute
access; importing eagle never loads a CUDA driver. Every error eagle raises is
an :class:`EagleError` (:mod:`eagle.errors`). :func:`clear_caches` drops what
eagle keeps in the process only to be faster next time.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Array", "EagleError", "arrays", "clear_caches", "cuda", "diff", "gemm", "plan"]

_SUBMODULES = {"arrays", "cuda", "diff", "errors", "gemm", "plan"}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # hawk holds the one version string; read on demand
        return importlib.import_module("hawk").__version__
    if name in _SUBMODULES:
        return importlib.import_module(f"eagle.{name}")
    if name == "Array":
        return importlib.import_module("eagle.arrays").Array
    if name == "EagleError":  # eagle.errors imports only the standard library
        return importlib.import_module("eagle.errors").EagleError
    if name == "clear_caches":
        return importlib.import_module("eagle._cache").clear_caches
    raise AttributeError(f"module 'eagle' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names and submodules, and the module's own dunders (not its imports)."""
    dunders = [name for name in globals() if name.startswith("__")]
    return sorted({*dunders, *__all__, *_SUBMODULES, "__version__"})
