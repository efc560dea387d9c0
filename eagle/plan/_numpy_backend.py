"""The ``"numpy"`` backend: a plan's kernel as hawk's numpy program, run now over host arrays.

emit: :func:`hawk.emit.host.emit` (Python source, vectorised over lanes),
kept per kernel and signature; load: the program's function (hawk compiled it
when it emitted it); bind: the function and the planes' flat arrays, run
whole when launched. A plan built with ``host_route="gemm"`` runs a
recognised contraction as numpy products instead
(:class:`eagle.plan._route.HostGemm`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hawk
from eagle.gemm.lowering import Direction
from eagle.plan._backends import (
    Backend,
    Binding,
    KernelPrograms,
    Plan,
    Signature,
    check_lanes,
    host_call,
    plane_dtypes,
)
from eagle.plan._bound import Step
from eagle.plan._planes import Planes
from eagle.plan._route import HostGemm
from hawk import ir
from hawk.emit import host
from hawk.emit.checks import IntOverflow
from hawk.emit.policy import Policy

__all__ = ["BACKEND", "NumpyBackend"]

_HOST_REASON = (
    "the host runs the kernel's own loop; build the plan with "
    "eagle.plan.auto(kernel, contraction='gemm', host_route='gemm') to run a recognised "
    "contraction on the host as one numpy product"
)


class NumpyBackend(Backend):
    """Host planes through hawk's numpy program (see the module docstring)."""

    name = "numpy"
    side = "host"

    def __init__(self) -> None:
        # per kernel (going with it): signature -> its program and the plane a run needs no
        # saved copy of
        self._programs: KernelPrograms[_Emitted] = KernelPrograms("numpy programs")

    def product_reasons(self, policy: Policy) -> tuple[str, ...]:
        return () if policy.host_route == "gemm" else (_HOST_REASON,)

    def emit(
        self,
        kernel: hawk.Kernel,
        signature: Signature,
        *,
        values: frozenset[str] = frozenset(),
        lanes: int = 0,
        int_overflow: IntOverflow = "wrap",
    ) -> host.HostProgram:
        # (a Param given as a number is a one-element array the program reads: one program)
        return self._emitted(kernel, signature, int_overflow).program

    def load(self, program: Any, device: int | None) -> Callable[..., None]:
        return program.function

    def bind(self, plan: Plan, checked: Planes) -> Binding:
        emitted = self._emitted(plan.kernel, checked.signature, plan.policy.int_overflow)
        program = emitted.program
        check_lanes(plan.kernel.ir, program.launch_checks, checked)
        run, setters = host_call(self.load(program, None), program.arguments, checked)
        last = emitted.written_last
        written = tuple(
            checked.values[p.name] for p in plan.kernel.planes if p.is_written and p.name != last
        )
        step = Step(run, written=written, last=None if last is None else checked.values[last])
        return Binding(step, setters)

    def bind_products(
        self,
        plan: Plan,
        checked: Planes,
        *,
        direction: Direction = "forward",
        kernel: ir.KernelIR | None = None,
        accumulate: bool = True,
    ) -> tuple[Step, ...]:
        assert plan.record is not None
        product = HostGemm(
            plan, plan.record, checked.values, direction=direction, accumulate=accumulate
        )
        return (Step(product, written=product.written, last=product.last),)

    def _emitted(
        self, kernel: hawk.Kernel, signature: Signature, int_overflow: IntOverflow
    ) -> _Emitted:
        def make() -> _Emitted:
            dtypes = plane_dtypes(kernel, signature)
            program = host.emit(kernel.ir, dtypes, int_overflow=int_overflow)
            return _Emitted(program, _written_last(kernel.ir))

        return self._programs.get(kernel, (signature, int_overflow), make)


class _Emitted:
    """A kernel's program for one signature, and the plane its last statement writes."""

    __slots__ = ("program", "written_last")

    def __init__(self, program: host.HostProgram, written_last: str | None) -> None:
        self.program, self.written_last = program, written_last


def _written_last(kernel: ir.KernelIR) -> str | None:
    """The plane the body's last statement stores into, when nothing else writes it, if
    any: the program runs the statements in order, so that plane is untouched until the
    last one, which completes the run (``Step.last``: a run that writes no other plane
    needs no saved copy of it)."""
    body = kernel.body
    last = body[-1] if body else None
    if not isinstance(last, ir.Store):
        return None
    writes = [
        s
        for s in ir.walk(kernel)
        if isinstance(s, ir.Store | ir.Accumulate) and s.plane == last.plane
    ]
    return last.plane.name if writes == [last] else None


BACKEND = NumpyBackend()
