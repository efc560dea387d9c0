"""The ``"reference"`` backend: a plan's kernel interpreted one lane at a time, for debugging.

``eagle.plan.auto(kernel, backend="reference")`` runs over host arrays as the
``"numpy"`` backend does, with the same results and refusals, but each lane runs the
kernel's statements in plain Python (:mod:`hawk.emit.reference`), so ``hm.debug_print``
prints per lane and ``hm.breakpoint`` stops in the debugger. emit: the interpreter for a
signature, kept per kernel; load: its function; bind: the function and the planes' flat
arrays, run whole when launched. It has no product route: a recognised contraction runs
as the kernel's own loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hawk
from eagle.plan._backends import (
    Backend,
    Binding,
    KernelPrograms,
    Plan,
    Signature,
    host_call,
    plane_dtypes,
)
from eagle.plan._bound import Step
from eagle.plan._planes import Planes
from hawk.emit import reference
from hawk.emit.checks import IntOverflow

__all__ = ["BACKEND", "ReferenceBackend"]


class ReferenceBackend(Backend):
    """Host planes through hawk's per-lane interpreter (see the module docstring)."""

    name = "reference"
    side = "host"

    def __init__(self) -> None:
        self._programs: KernelPrograms[reference.ReferenceProgram] = KernelPrograms(
            "reference programs"
        )

    def emit(
        self,
        kernel: hawk.Kernel,
        signature: Signature,
        *,
        values: frozenset[str] = frozenset(),
        lanes: int = 0,
        int_overflow: IntOverflow = "wrap",
    ) -> reference.ReferenceProgram:
        return self._programs.get(
            kernel,
            (signature, int_overflow),
            lambda: reference.emit(kernel.debug_ir, plane_dtypes(kernel, signature), int_overflow),
        )

    def load(self, program: Any, device: int | None) -> Callable[..., None]:
        return program.function

    def bind(self, plan: Plan, checked: Planes) -> Binding:
        program = self.emit(plan.kernel, checked.signature, int_overflow=plan.policy.int_overflow)
        run, setters = host_call(self.load(program, None), program.arguments, checked)
        written = tuple(checked.values[p.name] for p in plan.kernel.planes if p.is_written)
        return Binding(Step(run, written=written), setters)


BACKEND = ReferenceBackend()
