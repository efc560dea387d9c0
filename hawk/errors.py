"""The root of hawk's errors, :class:`HawkError`, and its kinds.

Every error hawk raises is a :class:`HawkError`. Raised itself, it says a
function is outside the hawk language (or an IR node is ill-typed), and can point
at the offending source line. Its kinds are also the builtin exception they
stand for, so ``except ValueError`` (or ``TypeError``, ``IndexError`` ...)
keeps catching what it caught before:

=================================  =====================  ===================================
kind                               also a                 raised for
=================================  =====================  ===================================
:class:`HawkValueError`            ``ValueError``         a value passed to hawk's API
:class:`HawkTypeError`             ``TypeError``          an argument of the wrong Python type
:class:`HawkKeyError`              ``KeyError``           a name looked up that is not there
:class:`PlaneIndexError`           ``IndexError``         a kernel's table index out of range
:class:`HawkZeroDivisionError`     ``ZeroDivisionError``  a kernel's integer division by zero
:class:`HawkOverflowError`         ``OverflowError``      a kernel's int beyond int64 (checked)
=================================  =====================  ===================================
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdjointCostWarning",
    "HawkError",
    "HawkKeyError",
    "HawkOverflowError",
    "HawkTypeError",
    "HawkValueError",
    "HawkZeroDivisionError",
    "PlaneIndexError",
]


class HawkError(Exception):
    """The root of hawk's errors; raised itself when a function is outside the hawk
    language, or an IR node is ill-typed.

    ``str(error)`` is the message; when the error points into a kernel's
    source, the offending line follows it with a caret under the column.

    Attributes:
        line: the source line the refusal is about, when there is one.
        column: its 0-based column, when known.
        source: the text of that line, when known.
    """

    def __init__(
        self,
        message: str,
        line: int | None = None,
        column: int | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.source = source

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as the same class with the same message and attributes
        (line, source, a :class:`PlaneIndexError`'s fields), whatever its ``__init__``
        takes, so a worker process's error reaches its parent whole."""
        return (type(self).__new__, (type(self), *self.args), self.__dict__)

    def __str__(self) -> str:
        if self.source is None:
            return self.message
        text = f"{self.message}\n    {self.source}"
        if self.column is not None:
            text += "\n    " + " " * self.column + "^"
        return text


class HawkValueError(HawkError, ValueError):
    """A value passed to hawk's API is refused (a ``ValueError``)."""


class HawkTypeError(HawkError, TypeError):
    """An argument of a type hawk does not take (a ``TypeError``)."""


class HawkKeyError(HawkError, KeyError):
    """A name looked up that is not there (a ``KeyError``, which shows its message quoted)."""

    def __str__(self) -> str:
        return KeyError.__str__(self)


class HawkZeroDivisionError(HawkError, ZeroDivisionError):
    """A kernel divided an integer by zero on some lane (:mod:`hawk.emit.checks`)."""


class HawkOverflowError(HawkError, OverflowError):
    """A kernel's int value left int64 where it is checked (``int_overflow="check"``),
    or ``int()`` met an infinity or a real beyond int64 (an ``OverflowError``,
    :mod:`hawk.emit.checks`)."""


class PlaneIndexError(HawkError, IndexError):
    """A kernel addressed a table outside it (:mod:`hawk.emit.checks`).

    Attributes:
        plane: the table's name.
        axis: the axis label, or ``"index"`` for a flat table.
        index: the offending index.
        extent: the axis's extent (a flat table's length).
        lane: the lane that failed.
    """

    def __init__(
        self, message: str, *, plane: str, axis: str, index: int, extent: int, lane: int
    ) -> None:
        super().__init__(message)
        self.plane = plane
        self.axis = axis
        self.index = index
        self.extent = extent
        self.lane = lane


class AdjointCostWarning(HawkError, UserWarning):
    """Warned (a ``UserWarning``) when an adjoint costs far more than its kernel: a
    loop whose reverse sweep reruns it up to each iteration (:mod:`hawk.diff`)."""
