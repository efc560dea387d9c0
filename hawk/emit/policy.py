"""How plans built now treat contractions: ``"loop"`` (the default) or ``"gemm"``.

>>> from hawk.emit import policy
>>> with policy.using(contraction="gemm"):
...     policy.current().contraction
'gemm'

A plan records the policy current when it was built and keeps it. The
policy is the default: a plan builder may take the choice as a keyword
instead (``eagle.plan.auto(kernel, contraction="gemm")``), which wins over it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

__all__ = ["CONTRACTIONS", "Policy", "current", "using"]

#: the values ``contraction`` may take
CONTRACTIONS = ("loop", "gemm")


@dataclass(frozen=True)
class Policy:
    """Emission choices a plan is built under.

    Attributes:
        contraction: ``"gemm"`` lets a kernel that is one dense two-operand
            contraction run as one cuBLAS product on the device; ``"loop"``
            runs every kernel's own loop.
    """

    contraction: str = "loop"

    def __post_init__(self) -> None:
        if self.contraction not in CONTRACTIONS:
            raise ValueError(f"contraction must be one of {CONTRACTIONS}, not {self.contraction!r}")


_DEFAULT = Policy()
_current: contextvars.ContextVar[Policy] = contextvars.ContextVar("hawk_policy")


def current() -> Policy:
    """The policy in force in this thread / task."""
    return _current.get(_DEFAULT)


@contextmanager
def using(*, contraction: str) -> Iterator[Policy]:
    """Make ``contraction`` the policy inside the ``with`` block.

    Raises:
        ValueError: ``contraction`` is not ``"gemm"`` or ``"loop"``.
    """
    token = _current.set(replace(current(), contraction=contraction))
    try:
        yield current()
    finally:
        _current.reset(token)
