"""Bound launches run as one: ``eagle.plan.sequence([bound, ...])`` -> :class:`BoundSequence`.

A sequence is the steps of its launches (bound plans, bound adjoints, other sequences),
in order, as one bound launch (:class:`eagle.plan._bound.Bound`). It launches, prepares
and captures like each of them; what it adds is the span of its branches. Inside a
capture, a step that may fork (an adjoint's gradient product) stays on its branch until
a later step of the sequence touches what it writes, or writes what it reads, else
until the sequence's end, where a launch of the adjoint alone would join it at its own
end. A product can so run beside the next launches' kernels. On the host a sequence is
all or nothing over every launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eagle.errors import EagleTypeError
from eagle.plan._bound import Bound, listed, one_place

__all__ = ["BoundSequence", "sequence"]


class BoundSequence(Bound):
    """Bound launches run as one launch; made by :func:`sequence`.

    Attributes:
        launches: the bound launches, in the order they run.
        side: ``"host"`` or ``"device"``.
        device: the device index, or None on the host.
    """

    _what = "sequence"

    def __init__(self, launches: Sequence[Bound]) -> None:
        self.launches = tuple(launches)
        names = [repr(launch) for launch in self.launches]
        side, device = one_place(self.launches, names, "every launch of a sequence")
        steps = [step for launch in self.launches for step in launch._steps]
        super().__init__(side, device, steps)

    def __repr__(self) -> str:
        return f"BoundSequence({listed([repr(launch) for launch in self.launches])})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Refused: its launches hold their planes' memory."""
        raise EagleTypeError(
            "a bound sequence holds its launches' planes and what was prepared for them, so "
            "it cannot be pickled or copied; pickle or copy the plans, then bind them again "
            "and make a new sequence"
        )


def sequence(launches: Sequence[Bound]) -> BoundSequence:
    """The bound launches ``launches`` run as one, in order.

    ``sequence([a, b]).launch(stream)`` enqueues what ``a.launch(stream)`` then
    ``b.launch(stream)`` would. Inside a capture, an adjoint's gradient product that
    forks onto a branch may stay there across the launches after it, up to the first
    step that touches what it writes or writes what it reads, or else to the end of the
    sequence: an adjoint launched alone must join its branches before it returns. On
    the host, the launches run now, all or nothing: if one raises, every plane any of
    them writes is as it was. ``prepare`` and ``capture`` work as for each launch.

    Args:
        launches: bound plans (:meth:`eagle.plan.AutoPlan.bind`), bound adjoints
            (``eagle.diff.reverse(...).bind``) or sequences, all on one side and device.

    Raises:
        TypeError: ``launches`` is not a list or tuple of bound launches, or is empty.
        ValueError: the launches are on different sides or devices.
    """
    if not isinstance(launches, list | tuple):
        raise EagleTypeError(
            f"launches: pass a list of bound launches (plan.bind(...) results), not "
            f"{type(launches).__name__}"
        )
    if not launches:
        raise EagleTypeError("launches: pass at least one bound launch")
    for position, launch in enumerate(launches):
        if not isinstance(launch, Bound):
            raise EagleTypeError(
                f"launches[{position}]: pass a bound launch (plan.bind(...) or "
                f"eagle.diff.reverse(...).bind(...)), not {type(launch).__name__}"
            )
    return BoundSequence(launches)
