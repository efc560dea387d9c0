"""The root of eagle's errors, :class:`EagleError`, and its kinds.

Every error eagle raises is an :class:`EagleError`, so ``except eagle.EagleError``
catches them all. Each kind below is also the builtin exception it stands for, so
``except ValueError`` (or ``TypeError``, ``IndexError`` ...) keeps catching what
it caught before:

=============================  ==================  =================================
kind                           also a              raised for
=============================  ==================  =================================
:class:`EagleValueError`       ``ValueError``      a value you passed (a shape, a name, an option)
:class:`EagleTypeError`        ``TypeError``       an argument of the wrong Python type
:class:`EagleIndexError`       ``IndexError``      an index outside an array
:class:`EagleRuntimeError`     ``RuntimeError``    the state of the machine or of an object
:class:`LifetimeError`         ``RuntimeError``    an object used after it was destroyed
:class:`EagleBufferError`      ``BufferError``     memory DLPack or a buffer cannot describe
:class:`EagleOverflowError`    ``OverflowError``   a value too large for its dtype
:class:`EagleImportError`      ``ImportError``     an optional dependency that is missing
=============================  ==================  =================================

The named refusals live beside what raises them and derive from these:
:class:`eagle.cuda.CudaError` (a runtime error), the product refusals of
:mod:`eagle.gemm`. This module imports only the standard library, so ``eagle.EagleError`` is
cheap to reach. :func:`check_option` is the one check of an option eagle takes by
string (``direction="adjoint"``, ``side="host"``): each is a ``Literal`` type beside
what it configures.
"""

from __future__ import annotations

import difflib
import sys
import warnings
from typing import Any, get_args

__all__ = [
    "EagleBufferError",
    "EagleError",
    "EagleImportError",
    "EagleIndexError",
    "EagleOverflowError",
    "EagleRuntimeError",
    "EagleTypeError",
    "EagleValueError",
    "LifetimeError",
    "check_option",
    "shown",
]


class EagleError(Exception):
    """The root of every error eagle raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as the same class with the same message and attributes,
        whatever its ``__init__`` takes, so a worker process's error reaches its parent
        whole (rebuilt from its message alone, a kind with more arguments failed)."""
        return (type(self).__new__, (type(self), *self.args), self.__dict__)


class EagleValueError(EagleError, ValueError):
    """A value passed to eagle is refused (a ``ValueError``)."""


class EagleTypeError(EagleError, TypeError):
    """An argument of a type eagle does not take (a ``TypeError``)."""


class EagleIndexError(EagleError, IndexError):
    """An index outside what it addresses (an ``IndexError``)."""


class EagleRuntimeError(EagleError, RuntimeError):
    """The machine or an object is not in a state that allows the call (a ``RuntimeError``)."""


class LifetimeError(EagleRuntimeError):
    """An eagle object was used after it was destroyed or consumed, or destroyed while
    something that needs it is still alive."""


class EagleBufferError(EagleError, BufferError):
    """Memory that DLPack or the buffer protocol cannot describe (a ``BufferError``)."""


class EagleOverflowError(EagleError, OverflowError):
    """A value too large for the dtype it must fit (an ``OverflowError``)."""


class EagleImportError(EagleError, ImportError):
    """An optional dependency eagle needs for this call is not installed (an ``ImportError``)."""


def check_option(value: Any, vocabulary: Any, argument: str) -> Any:
    """``value`` when it is one of the strings of ``vocabulary`` (a ``Literal`` type).

    Raises:
        EagleValueError: it is not, naming ``argument`` and every value it may take.
    """
    allowed = get_args(vocabulary)
    if not isinstance(value, str) or value not in allowed:
        raise EagleValueError(
            f"{argument} must be {_alternatives(allowed)}, not {shown(value)}"
            f"{_did_you_mean(value, allowed)}"
        )
    return value


#: what a newcomer may write for a value of eagle's vocabularies: a device for a side
_ALIASES = {"cpu": "host", "cuda": "device", "gpu": "device"}


def _did_you_mean(value: Any, allowed: tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for a string close to one of ``allowed`` (a misspelling,
    or a device name where a side goes), else nothing."""
    if not isinstance(value, str):
        return ""
    alias = _ALIASES.get(value.lower().partition(":")[0])
    close = [alias] if alias in allowed else difflib.get_close_matches(value.lower(), allowed, 1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _warn_user(message: str, category: type[Warning]) -> None:
    """Warn ``message`` at the line that called into eagle: the first frame of the stack
    outside eagle, hawk and torch (which calls eagle on a user's behalf, from a
    backward)."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] in (
        "eagle",
        "hawk",
        "torch",
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def shown(value: Any) -> str:
    """``value`` as an error message shows it: its repr when short, else its type (an
    array passed where a name goes is not printed whole)."""
    text = repr(value)
    if len(text) <= 60:
        return text
    return f"an object of type {type(value).__name__}"


def _alternatives(allowed: tuple[str, ...]) -> str:
    """``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    quoted = [repr(value) for value in allowed]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
