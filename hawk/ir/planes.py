"""A kernel's parameters: :class:`Plane`."""

from __future__ import annotations

from dataclasses import dataclass

from hawk.errors import HawkError
from hawk.kinds import PlaneKind

__all__ = ["Plane"]


@dataclass(frozen=True)
class Plane:
    """One kernel parameter.

    Attributes:
        name: the parameter's name.
        kind: a :class:`~hawk.kinds.PlaneKind` (its string is accepted).
        axes: a named table's ``((label, extent), ...)`` in declared
            (row-major) order; None for a flat table and for the other kinds.
    """

    name: str
    kind: PlaneKind
    axes: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", PlaneKind(self.kind))
        except ValueError:
            kinds = tuple(str(kind) for kind in PlaneKind)
            raise HawkError(f"plane {self.name!r}: kind must be one of {kinds}") from None
        if self.axes is not None and not self.kind.is_table:
            raise HawkError(f"plane {self.name!r}: only tables have axes")

    @property
    def is_lane(self) -> bool:
        """True for planes holding one value per lane (inputs and outputs)."""
        return self.kind.is_lane

    @property
    def is_table(self) -> bool:
        """True for tables, read with ``.at`` or added to with ``.add``."""
        return self.kind.is_table

    @property
    def is_written(self) -> bool:
        """True for the planes the kernel writes (``Mutable`` ones)."""
        return self.kind.is_written

    @property
    def shape(self) -> tuple[int, ...] | None:
        """A named table's declared shape; None otherwise."""
        return None if self.axes is None else tuple(size for _, size in self.axes)

    @property
    def strides(self) -> tuple[int, ...] | None:
        """A named table's row-major strides in elements; None otherwise."""
        if self.axes is None:
            return None
        strides, step = [], 1
        for _, size in reversed(self.axes):
            strides.append(step)
            step *= size
        return tuple(reversed(strides))

    def declaration(self) -> str:
        """The declaration as written in hawk, e.g. ``Table["row":4, "col":3]``."""
        if self.kind == PlaneKind.INPUT:
            return "Scalar"
        if self.kind == PlaneKind.OUTPUT:
            return "Mutable[Scalar]"
        if self.kind == PlaneKind.PARAM:
            return "Param"
        table = "Table"
        if self.axes is not None:
            table += "[" + ", ".join(f'"{label}":{size}' for label, size in self.axes) + "]"
        return table if self.kind == PlaneKind.TABLE else f"Mutable[{table}]"
