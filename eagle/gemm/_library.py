"""The one checked path into nvmath-python's cuBLAS and cuBLASLt bindings.

Every cuBLAS or cuBLASLt call eagle makes goes by attribute through :func:`cublas` or
:func:`cublaslt` (``cublas().sgemm(...)``): a failed status raises
:class:`~eagle.cuda.CudaError` naming the call and cuBLAS's status, as every other CUDA
call eagle makes does (nvmath's own ``cuBLASError`` never reaches a user). The bindings'
enums and classes (``Operation``, ``MatmulHeuristicResult``) are read through the same
objects unchanged. The bindings are imported on first use; without nvmath-python that
raises :class:`~eagle.gemm.CublasUnavailable`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from eagle.cuda._runtime import CudaError
from eagle.gemm.errors import CublasUnavailable

__all__ = ["CheckedLibrary", "cublas", "cublaslt"]


class CheckedLibrary:
    """One nvmath binding module, its functions called through :func:`_checked` (each
    made on first use and kept), its enums, classes and other values as they are."""

    __slots__ = ("__dict__", "_errors", "_module", "_name")

    def __init__(self, module: Any, name: str, errors: tuple[type[BaseException], ...]) -> None:
        self._module = module
        self._name = name
        self._errors = errors

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self._module, name)
        if callable(value) and not isinstance(value, type):
            value = _checked(self._name, name, self._module, self._errors)
        self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"<checked {self._name}>"


def _checked(
    library: str, name: str, module: Any, errors: tuple[type[BaseException], ...]
) -> Callable[..., Any]:
    """The function ``name`` of ``module`` (looked up at each call, a dict lookup), with a
    failure of the library's raised as :class:`CudaError`."""

    def checked(*args: Any) -> Any:
        try:
            return getattr(module, name)(*args)
        except errors as exc:
            raise CudaError(f"{library}.{name}", *_status(exc)) from exc

    checked.__name__ = checked.__qualname__ = name
    checked.__doc__ = f"``{library}.{name}``, a failure raised as eagle.cuda.CudaError."
    return checked


def _status(exc: BaseException) -> tuple[str, str]:
    """cuBLAS's name of the status a binding raised (cuBLASLt shares cuBLAS's), and
    cuBLAS's description of it where the library gives one (else the exception's text)."""
    status = getattr(exc, "status", None)
    try:
        from nvmath.bindings import cublas as module

        name = f"CUBLAS_STATUS_{module.Status(status).name}"
    except (ImportError, ValueError, TypeError):
        return f"cuBLAS status {status}", str(exc)
    try:
        description = str(module.get_status_string(status))
    except (RuntimeError, OSError):  # (no library to ask: the binding's own text)
        description = str(exc)
    return name, "" if description == name else description


@functools.cache
def cublas() -> CheckedLibrary:
    """nvmath's cuBLAS bindings, checked.

    Raises:
        CublasUnavailable: nvmath-python is not installed.
    """
    return _load("cublas", "cuBLAS", "cuBLASError")


@functools.cache
def cublaslt() -> CheckedLibrary:
    """nvmath's cuBLASLt bindings, checked.

    Raises:
        CublasUnavailable: nvmath-python is not installed.
    """
    return _load("cublasLt", "cuBLASLt", "cuBLASLtError")


def _load(module_name: str, library: str, error: str) -> CheckedLibrary:
    """``nvmath.bindings.<module_name>``, checked: its exception ``error`` raised as
    :class:`CudaError`."""
    try:
        module = importlib.import_module(f"nvmath.bindings.{module_name}")
    except ImportError as exc:
        raise CublasUnavailable(
            f"{library} is not reachable: nvmath-python is not installed ({exc}); "
            "install nvmath-python"
        ) from exc
    return CheckedLibrary(module, module_name, (getattr(module, error),))
