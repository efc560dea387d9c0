"""How plans built now treat contractions: ``"loop"`` (the default) or ``"gemm"``,
and in what arithmetic a routed float32 product sums: ``"fp32"`` (the default) or
``"tf32"``.

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
per-plan opt-in and has no ``using`` default.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from hawk.errors import HawkValueError

__all__ = ["CONTRACTIONS", "MATH", "Policy", "current", "using"]

#: the values ``contraction`` may take
CONTRACTIONS = ("loop", "gemm")

#: the values ``math`` may take
MATH = ("fp32", "tf32")

# the values ``host_route`` may take: those of ``contraction``
_HOST_ROUTES = CONTRACTIONS


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
    """

    contraction: str = "loop"
    math: str = "fp32"
    host_route: str = "loop"

    def __post_init__(self) -> None:
        for field, allowed in (
            ("contraction", CONTRACTIONS),
            ("math", MATH),
            ("host_route", _HOST_ROUTES),
        ):
            if getattr(self, field) not in allowed:
                raise HawkValueError(
                    f"{field} must be one of {allowed}, not {getattr(self, field)!r}"
                )


_DEFAULT = Policy()
_current: contextvars.ContextVar[Policy] = contextvars.ContextVar("hawk_policy")


def current() -> Policy:
    """The policy in force in this thread / task."""
    return _current.get(_DEFAULT)


@contextmanager
def using(*, contraction: str | None = None, math: str | None = None) -> Iterator[Policy]:
    """Make ``contraction`` and/or ``math`` the policy inside the ``with`` block (a
    choice left None keeps the current one).

    Raises:
        ValueError: ``contraction`` is not ``"gemm"`` or ``"loop"``, or ``math``
            is not ``"fp32"`` or ``"tf32"``.
    """
    changes = {k: v for k, v in (("contraction", contraction), ("math", math)) if v is not None}
    token = _current.set(replace(current(), **changes))
    try:
        yield current()
    finally:
        _current.reset(token)
