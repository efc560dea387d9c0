"""hawk's vocabulary: the types of IR values and the kinds of planes.

Both are :class:`enum.StrEnum`, so a member equals its string
(``PlaneKind.TABLE == "table"``); hawk's own code uses the members.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["PlaneKind", "Type"]


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
