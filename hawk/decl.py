"""Plane declarations: the annotations a kernel's parameters carry.

* ``hawk.Scalar`` — a per-lane input plane (one value per lane).
* ``hawk.Mutable[hawk.Scalar]`` — a per-lane output; the kernel may read it
  first (read-modify-write).
* ``hawk.Param`` — one uniform value.
* ``hawk.Table`` — a flat lookup table, read with ``t.at(i)``;
  ``hawk.Table["row":R, "col":C]`` — named row-major axes, read with every
  axis by name, ``t.at(row=r, col=c)``.
* ``hawk.Mutable[hawk.Table...]`` — a table the kernel only adds into,
  ``t.add(i, value=v)`` or ``t.add(row=r, col=c, value=v)`` (atomic on the
  device), e.g. a histogram or a gradient.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

from hawk.errors import HawkError, HawkTypeError
from hawk.ir import Plane
from hawk.kinds import PlaneKind

__all__ = ["Mutable", "Param", "Scalar", "Table"]

#: the keyword ``.add`` takes its value by, so no axis may use it
VALUE_KEYWORD = "value"


class _Declaration:
    """Base of the declaration classes; they are annotations, never instantiated."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise HawkTypeError(
            f"hawk.{cls.__name__} is a declaration for a kernel parameter's annotation "
            f"(x: hawk.{cls.__name__}), not a value to make"
        )

    def __class_getitem__(cls, item: Any) -> Any:
        raise HawkTypeError(
            f"hawk.{cls.__name__} takes no [...]: it is one value "
            f"{'per lane' if cls is Scalar else 'for all lanes'}; for several values, "
            'declare a table, e.g. hawk.Table["k":4]'
        )


class Scalar(_Declaration):
    """A per-lane input plane: a 1-D array with one value per lane."""


class Param(_Declaration):
    """One uniform value: a number (on the device, passed to the kernel by value) or a
    one-element array (on the device, read through its pointer, so a captured graph
    reads its current value)."""


@dataclass(frozen=True)
class TableSpec:
    """A named table's axes, ``((label, extent), ...)``; made by ``Table[...]``."""

    axes: tuple[tuple[str, int], ...]

    def __repr__(self) -> str:
        return "hawk.Table[" + ", ".join(f'"{a}":{n}' for a, n in self.axes) + "]"

    def __getitem__(self, item: Any) -> Any:
        raise HawkTypeError(
            f"{self!r}[...] declares axes twice; give every axis in one [...], e.g. "
            'hawk.Table["row":4, "col":3]'
        )


class Table(_Declaration):
    """A lookup table. Plain ``Table`` is flat (any 1-D array, ``t.at(i)``);
    ``Table["row":R, "col":C]`` names row-major axes with constant extents."""

    def __class_getitem__(cls, items: Any) -> TableSpec:
        items = items if isinstance(items, tuple) else (items,)
        if not items:
            raise HawkError(
                "hawk.Table[()] declares a table with no axes; for one value write hawk.Param, "
                'for a table give its axes, e.g. Table["row":4], or write plain hawk.Table'
            )
        axes: list[tuple[str, int]] = []
        for item in items:
            if not (
                isinstance(item, slice)
                and isinstance(item.start, str)
                and item.start.isidentifier()
                and item.step is None
            ):
                raise HawkError(
                    f'hawk.Table axes are written "label":extent, e.g. Table["row":4, "col":3]; '
                    f"got {item!r}"
                )
            label, extent = item.start, _extent(item.stop)
            if extent is None:
                raise HawkError(
                    f"hawk.Table axis {label!r} needs a positive int extent below 2**63, not "
                    f"{item.stop!r}"
                )
            if label == VALUE_KEYWORD:
                raise HawkError(
                    f"hawk.Table axis name {VALUE_KEYWORD!r} is reserved (t.add(..., value=v)); "
                    "choose another"
                )
            if any(label == seen for seen, _ in axes):
                raise HawkError(f"hawk.Table axis {label!r} is declared twice")
            axes.append((label, extent))
        if math.prod(extent for _, extent in axes) >= 2**63:
            raise HawkError(
                f"{TableSpec(tuple(axes))!r} holds 2**63 values or more, beyond int64 "
                "indices; declare fewer"
            )
        return TableSpec(tuple(axes))


def _extent(value: Any) -> int | None:
    """``value`` as an axis extent (an int or a numpy int, positive, within int64), or None."""
    if isinstance(value, bool):
        return None
    try:
        extent = operator.index(value)
    except TypeError:
        return None
    return extent if 0 < extent < 2**63 else None


@dataclass(frozen=True)
class MutableSpec:
    """``Mutable[...]`` of a Scalar or a table; made by ``Mutable[...]``."""

    of: Any

    def __repr__(self) -> str:
        inner = self.of if isinstance(self.of, TableSpec) else f"hawk.{self.of.__name__}"
        return f"hawk.Mutable[{inner}]"

    def __getitem__(self, item: Any) -> Any:
        if self.of is Scalar:
            raise HawkTypeError(
                "hawk.Mutable[hawk.Scalar] takes no [...]: it is one value per lane; for a "
                'table the kernel adds into, write hawk.Mutable[hawk.Table["k":4]]'
            )
        if self.of is Table:
            raise HawkTypeError(
                "hawk.Mutable[hawk.Table][...]: give the table's axes inside Mutable[...], "
                'on the table, e.g. hawk.Mutable[hawk.Table["k":4]]'
            )
        raise HawkTypeError(
            f"{self!r}[...] declares axes twice; give every axis in one [...], e.g. "
            'hawk.Mutable[hawk.Table["row":4, "col":3]]'
        )


class Mutable(_Declaration):
    """``Mutable[Scalar]``: a per-lane output. ``Mutable[Table...]``: a table
    the kernel adds into."""

    def __class_getitem__(cls, item: Any) -> MutableSpec:
        if item is Scalar or item is Table or isinstance(item, TableSpec):
            return MutableSpec(item)
        shown = item.__name__ if isinstance(item, type) else repr(item)
        hint = " (a Param is uniform and cannot be written by lanes)" if item is Param else ""
        raise HawkError(
            f"hawk.Mutable takes hawk.Scalar or a hawk.Table, e.g. hawk.Mutable[hawk.Scalar], "
            f"not {shown}{hint}"
        )


def _declared_plane(name: str, annotation: Any) -> Plane:
    """The :class:`~hawk.ir.Plane` a parameter's annotation declares.

    Raises:
        HawkError: ``annotation`` is not a hawk declaration.
    """
    if annotation is Scalar:
        return Plane(name, PlaneKind.INPUT)
    if annotation is Param:
        return Plane(name, PlaneKind.PARAM)
    if annotation is Table:
        return Plane(name, PlaneKind.TABLE)
    if isinstance(annotation, TableSpec):
        return Plane(name, PlaneKind.TABLE, annotation.axes)
    if isinstance(annotation, MutableSpec):
        if annotation.of is Scalar:
            return Plane(name, PlaneKind.OUTPUT)
        axes = annotation.of.axes if isinstance(annotation.of, TableSpec) else None
        return Plane(name, PlaneKind.ACCUMULATOR, axes)
    written = getattr(annotation, "__qualname__", None) or repr(annotation)
    raise HawkError(
        f"parameter {name!r} is declared {written}; declare it hawk.Scalar, "
        "hawk.Mutable[hawk.Scalar], hawk.Param, hawk.Table or hawk.Table[...]"
    )
