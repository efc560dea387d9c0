"""hawk's vocabulary: the types of IR values and the kinds of planes, and the one check
of an option's string.

Both are :class:`enum.StrEnum`, so a member equals its string
(``PlaneKind.TABLE == "table"``); hawk's own code uses the members. The options hawk
takes by string (``contraction="gemm"``, ``math="tf32"``, ``lane_gradients="store"``)
are ``Literal`` types beside what they configure, each checked by :func:`check_option`.
"""

from __future__ import annotations

import difflib
from enum import StrEnum
from typing import Any, get_args

from hawk.errors import HawkValueError

__all__ = ["PlaneKind", "Type", "check_option"]


def check_option(value: Any, vocabulary: Any, argument: str) -> Any:
    """``value`` when it is one of the strings of ``vocabulary`` (a ``Literal`` type).

    Raises:
        HawkValueError: it is not, naming ``argument`` and every value it may take.
    """
    allowed = get_args(vocabulary)
    if not isinstance(value, str) or value not in allowed:
        text = repr(value)
        shown = text if len(text) <= 60 else f"an object of type {type(value).__name__}"
        close = (
            difflib.get_close_matches(value.lower(), allowed, 1) if isinstance(value, str) else []
        )
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise HawkValueError(f"{argument} must be {_alternatives(allowed)}, not {shown}{hint}")
    return value


def _alternatives(allowed: tuple[str, ...]) -> str:
    """``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    quoted = [repr(value) for value in allowed]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class Type(StrEnum):
    """The type of an IR value."""

    INT = "int"
    """a 64-bit integer"""
    REAL = "real"
    """the kernel's float type, fixed when it is emitted for concrete dtypes"""
    BOOL = "bool"
    """the result of a comparison"""


class PlaneKind(StrEnum):
    """What a kernel parameter is, from its declaration."""

    INPUT = "input"
    """``hawk.Scalar``: one value per lane, read"""
    OUTPUT = "output"
    """``hawk.Mutable[hawk.Scalar]``: one value per lane, written (and maybe read first)"""
    PARAM = "param"
    """``hawk.Param``: one uniform value"""
    TABLE = "table"
    """``hawk.Table``: a lookup table, read with ``.at``"""
    ACCUMULATOR = "accumulator"
    """``hawk.Mutable[hawk.Table]``: a table only added into, with ``.add``"""

    @property
    def is_lane(self) -> bool:
        """True for the kinds holding one value per lane (inputs and outputs)."""
        return self in (PlaneKind.INPUT, PlaneKind.OUTPUT)

    @property
    def is_table(self) -> bool:
        """True for tables, read with ``.at`` or added into with ``.add``."""
        return self in (PlaneKind.TABLE, PlaneKind.ACCUMULATOR)

    @property
    def is_written(self) -> bool:
        """True for the kinds a kernel writes (``Mutable`` planes: outputs and tables
        added into); the others it only reads."""
        return self in (PlaneKind.OUTPUT, PlaneKind.ACCUMULATOR)
