"""How plans built now treat contractions: ``"loop"`` (the default) or ``"gemm"``,
in what arithmetic a routed float32 product sums: ``"fp32"`` (the default) or
``"tf32"``, and what an int value beyond int64 does: ``"wrap"`` (the default) or
``"check"``.

>>> from hawk.emit import policy
>>> with policy.using(contraction="gemm", math="tf32"):
...     policy.current().contraction, policy.current().math
('gemm', 'tf32')

A plan records the policy current when it was built and keeps it. The
policy is the default: a plan builder may take the choices as keywords
instead (``eagle.plan.auto(kernel, contraction="gemm", math="tf32")``), which
win over it. TF32 is never chosen silently: it applies only to a plan built
with ``math="tf32"``, here or by keyword. ``host_route`` (``"loop"`` unless
a plan is built with ``eagle.plan.auto(kernel, host_route="gemm")``) is a
per-plan opt-in and has no ``using`` default. So is ``adds``, where a device kernel sums
its adds into a small table (:mod:`hawk.emit.private`): ``"auto"`` (the default),
``"shared"``, ``"global"`` or ``"deterministic"``.
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from hawk.dtypes import Float32Math
from hawk.emit.checks import IntOverflow
from hawk.errors import HawkError
from hawk.kinds import check_option

__all__ = [
    "CONTRACTIONS",
    "INT_OVERFLOWS",
    "MATH",
    "TABLE_ADDS",
    "Contraction",
    "Policy",
    "TableAdds",
    "Using",
    "current",
    "using",
]

Contraction = Literal["loop", "gemm"]
"""How a contraction runs (its own loop, or one cuBLAS product); ``host_route`` takes
the same values."""

#: the values ``contraction`` may take
CONTRACTIONS: tuple[Contraction, ...] = get_args(Contraction)

TableAdds = Literal["auto", "shared", "global", "deterministic"]
"""Where a device kernel sums its adds into a small table. ``"shared"`` sums them in a copy
per block in shared memory, ``"global"`` makes global atomics, ``"auto"`` uses shared
memory when the table and the lanes qualify, and ``"deterministic"`` uses it in an order
fixed by the lane count alone; :mod:`hawk.emit.private` says when and how."""

#: the values ``adds`` may take
TABLE_ADDS: tuple[TableAdds, ...] = get_args(TableAdds)

#: the values ``math`` may take (how a product of float32 factors sums)
MATH: tuple[Float32Math, ...] = get_args(Float32Math)

#: the values ``int_overflow`` may take (what an int value beyond int64 does)
INT_OVERFLOWS: tuple[IntOverflow, ...] = get_args(IntOverflow)


@dataclass(frozen=True)
class Policy:
    """Emission choices a plan is built under.

    Attributes:
        contraction: ``"gemm"`` lets a kernel that is one dense two-operand
            contraction run as one cuBLAS product on the device; ``"loop"``
            runs every kernel's own loop.
        math: how a routed product over float32 planes sums: ``"fp32"``
            (exact float32) or ``"tf32"`` (TF32 tensor cores). Products over
            other dtypes ignore it.
        host_route: ``"gemm"`` also runs a routed contraction on the host as
            one numpy product (with ``contraction="gemm"``); ``"loop"`` keeps
            the host on the kernel's own loop.
        int_overflow: ``"wrap"``: an int value beyond int64 wraps, two's
            complement; ``"check"``: the run raises ``HawkOverflowError`` naming
            the expression and the first lane.
        adds: where a device kernel sums its adds into a small table (see
            :data:`TableAdds`); the host ignores it.
    """

    contraction: Contraction = "loop"
    math: Float32Math = "fp32"
    host_route: Contraction = "loop"
    int_overflow: IntOverflow = "wrap"
    adds: TableAdds = "auto"

    def __post_init__(self) -> None:
        check_option(self.contraction, Contraction, "contraction")
        check_option(self.math, Float32Math, "math")
        check_option(self.host_route, Contraction, "host_route")
        check_option(self.int_overflow, IntOverflow, "int_overflow")
        check_option(self.adds, TableAdds, "adds")


_DEFAULT = Policy()
_current: contextvars.ContextVar[Policy] = contextvars.ContextVar("hawk_policy")


def current() -> Policy:
    """The policy in force in this thread / task."""
    return _current.get(_DEFAULT)


def using(
    *,
    contraction: Contraction | None = None,
    math: Float32Math | None = None,
    host_route: Contraction | None = None,
    int_overflow: IntOverflow | None = None,
    adds: TableAdds | None = None,
) -> Using:
    """Make these choices (the fields of :class:`Policy`) the policy inside the ``with``
    block; a choice left None keeps the current one. The object may be kept and used for
    several ``with`` blocks, nested too; each takes the policy current when it begins.

    Raises:
        ValueError: a choice that is not one of its field's values (the message names
            the field and its values).
    """
    chosen: dict[str, str | None] = {
        "contraction": contraction,
        "math": math,
        "host_route": host_route,
        "int_overflow": int_overflow,
        "adds": adds,
    }
    changes: dict[str, Any] = {k: v for k, v in chosen.items() if v is not None}
    replace(_DEFAULT, **changes)  # (its checks, made now)
    return Using(changes)


#: the ``with`` blocks of :func:`using` open in this thread or asyncio task (each has a
#: context of its own), innermost last: each one's object and the policy it chose (the
#: last one's is ``_current``'s value)
_open: contextvars.ContextVar[tuple[tuple[Using, Policy], ...]] = contextvars.ContextVar(
    "hawk_policy_blocks", default=()
)


def _set_blocks(blocks: tuple[tuple[Using, Policy], ...]) -> None:
    _open.set(blocks)
    _current.set(blocks[-1][1] if blocks else _DEFAULT)


class Using:
    """The choices of :func:`using`, made the policy inside each ``with`` block that
    uses them (each thread and each asyncio task keeps its own open blocks)."""

    def __init__(self, changes: dict[str, Any]) -> None:
        self._changes = changes

    def __enter__(self) -> Policy:
        chosen = replace(current(), **self._changes)
        _set_blocks((*_open.get(), (self, chosen)))
        return chosen

    def __exit__(self, *exc: object) -> None:
        blocks = _open.get()
        mine = [i for i, (using, _) in enumerate(blocks) if using is self]
        if not mine:
            raise HawkError(
                f"with {self!r}: the block is not open in this thread or task (it began in "
                "another); enter and leave it in one thread or task"
            )
        # (left out of order, its own block ends; a block opened inside it keeps the
        # policy it chose on top of this one until it ends too)
        _set_blocks(blocks[: mine[-1]] + blocks[mine[-1] + 1 :])

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the call that made it."""
        return (functools.partial(using, **self._changes), ())

    def __repr__(self) -> str:
        given = ", ".join(f"{key}={value!r}" for key, value in self._changes.items())
        return f"hawk.emit.policy.using({given})"
