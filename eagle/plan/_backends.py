"""Backends: how a plan runs its kernel over planes on one side, registered by name.

A :class:`Backend` has three stages:

* **emit** — the kernel's program for planes of one signature (hawk's numpy
  program, hawk's CUDA C), kept per kernel and signature; what
  ``plan.source(side)`` shows;
* **load** — that program made runnable (the numpy function; the CUDA C
  compiled with NVRTC and loaded, with its error record);
* **bind** — the loaded program bound to checked planes as one
  :class:`~eagle.plan._bound.Step` (a launch only enqueues it, or runs it
  now on the host), with the setters of the Params given as numbers.

A backend that can run a recognised contraction as matrix products also
binds those (:meth:`Backend.bind_products`) and says when its policy lets it
(:meth:`Backend.product_reasons`). :class:`~eagle.plan.AutoPlan` picks one
backend per side (the planes' residency: ``"host"`` or ``"device"``) and
never names one: by default the ``"numpy"`` backend for host planes and the
``"cuda"`` backend for device planes, or the one named by
``eagle.plan.auto(kernel, backend=name)``.

Adding a backend is one row of :data:`_REGISTERED` (its name and the module
that defines it as ``BACKEND``), or a call to :func:`register`.
"""

from __future__ import annotations

import abc
import functools
import importlib
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import hawk
from eagle._cache import KeyedCache
from eagle.errors import EagleTypeError, EagleValueError
from eagle.gemm.contraction import RecognizedContraction
from eagle.gemm.lowering import Direction
from eagle.gemm.steps import Side
from eagle.plan._bound import Step
from eagle.plan._planes import Planes
from hawk import ir
from hawk.emit.checks import IntOverflow, LaneCheck, check_launch
from hawk.emit.policy import Policy

__all__ = [
    "DEFAULTS",
    "PROGRAMS",
    "Backend",
    "Binding",
    "KernelPrograms",
    "Plan",
    "Program",
    "Side",
    "backend_named",
    "check_lanes",
    "host_call",
    "plane_dtypes",
    "register",
    "registered",
]

Signature = tuple[str, ...]
"""Each plane's dtype name, in the kernel's plane order."""

V = TypeVar("V")

#: programs a backend keeps per kernel (they go with the kernel)
PROGRAMS = 64


class KernelPrograms(Generic[V]):
    """A backend's emitted programs: per kernel (going with it), a :class:`KeyedCache` of
    at most :data:`PROGRAMS` programs by the backend's key (its signature and options)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._by_kernel: weakref.WeakKeyDictionary[hawk.Kernel, KeyedCache[Any, V]] = (
            weakref.WeakKeyDictionary()
        )

    def __getitem__(self, kernel: hawk.Kernel) -> KeyedCache[Any, V]:
        return self._by_kernel[kernel]

    def get(self, kernel: hawk.Kernel, key: Hashable, make: Callable[[], V]) -> V:
        """The program of ``kernel`` for ``key``, made by ``make()`` the first time."""
        programs = self._by_kernel.get(kernel)
        if programs is None:
            programs = self._by_kernel[kernel] = KeyedCache(self.name, PROGRAMS)
        program = programs.get(key)
        if program is None:
            program = programs[key] = make()
        return program


class Plan(Protocol):
    """What a backend reads of the plan it binds (an :class:`eagle.plan.AutoPlan`)."""

    @property
    def kernel(self) -> hawk.Kernel: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def record(self) -> RecognizedContraction | None: ...


class Program(Protocol):
    """What a backend emits: its source text and the checks its launch makes first."""

    @property
    def source(self) -> str: ...

    @property
    def launch_checks(self) -> tuple[LaneCheck, ...]: ...


@dataclass(frozen=True)
class Binding:
    """The kernel's own loop bound to planes.

    Attributes:
        step: the bound work.
        setters: Param name -> a function taking a later run's number for it, for
            each Param given as a number (:meth:`eagle.plan.AutoPlan.run` reuses
            the binding with them).
    """

    step: Step
    setters: Mapping[str, Callable[[float], None]] = field(default_factory=dict)


class Backend(abc.ABC):
    """How plans run a kernel on one side: emit a program, load it, bind it to planes.

    Attributes:
        name: the name it is registered under (``eagle.plan.auto(kernel, backend=name)``).
        side: the planes it takes, ``"host"`` or ``"device"``.
    """

    name: ClassVar[str]
    side: ClassVar[Side]

    def __repr__(self) -> str:
        return f"<eagle backend {self.name!r} ({self.side})>"

    def product_reasons(self, policy: Policy) -> tuple[str, ...]:
        """Why a plan built under ``policy`` runs the kernel's own loop here, whatever the
        kernel and planes (empty when a recognised contraction may run as matrix
        products, :meth:`bind_products`). A backend without products always says so."""
        return (f"the {self.name!r} backend runs the kernel's own loop (it has no product route)",)

    @abc.abstractmethod
    def emit(
        self,
        kernel: hawk.Kernel,
        signature: Signature,
        *,
        values: frozenset[str] = frozenset(),
        lanes: int = 0,
        int_overflow: IntOverflow = "wrap",
    ) -> Program:
        """The program of ``kernel`` for planes of ``signature`` over ``lanes`` lanes (0:
        any), the Params named in ``values`` given as numbers, its int values wrapping or
        checked (``int_overflow``, :data:`hawk.emit.checks.IntOverflow`)."""

    @abc.abstractmethod
    def load(self, program: Any, device: int | None) -> Any:
        """``program`` (from :meth:`emit`) made runnable on ``device`` (None on the host)."""

    @abc.abstractmethod
    def bind(self, plan: Plan, checked: Planes) -> Binding:
        """The kernel's own loop of ``plan`` bound to ``checked`` planes."""

    def bind_products(
        self,
        plan: Plan,
        checked: Planes,
        *,
        direction: Direction = "forward",
        kernel: ir.KernelIR | None = None,
        accumulate: bool = True,
    ) -> tuple[Step, ...]:
        """The products of ``plan``'s recognised contraction bound to ``checked`` planes,
        as the steps that run them in order: ``direction="forward"`` writes the output,
        ``"adjoint"`` adds into the gradient planes passed (the planes of ``kernel``, the
        adjoint's IR), or writes them with ``accumulate=False``. Independent products may
        be steps of their own that a capture forks (:attr:`Step.fork`). Called only when
        :meth:`product_reasons` and the route's checks allow it.

        Raises:
            TypeError: the backend has no product route.
        """
        raise EagleTypeError(
            f"the {self.name!r} backend has no product route; its plans run the kernel's own loop"
        )


#: the backend a side runs on when a plan names none
DEFAULTS: dict[Side, str] = {"host": "numpy", "device": "cuda"}

#: backend name -> the backend, or the module that defines it as ``BACKEND`` (imported on
#: first use, so a backend costs nothing until a plan asks for it)
_REGISTERED: dict[str, Backend | str] = {
    "numpy": "eagle.plan._numpy_backend",
    "cuda": "eagle.plan._cuda_backend",
    "reference": "eagle.plan._reference_backend",
}
_lock = threading.Lock()


def register(backend: Backend) -> None:
    """Make ``backend`` available as ``eagle.plan.auto(kernel, backend=backend.name)``.

    Raises:
        TypeError: ``backend`` is not a :class:`Backend`.
        ValueError: another backend is registered under its name.
    """
    if not isinstance(backend, Backend):
        raise EagleTypeError(f"register takes a Backend, not {type(backend).__name__}")
    with _lock:
        present = _REGISTERED.get(backend.name)
        if present is not None and present is not backend:
            raise EagleValueError(
                f"a backend is already registered as {backend.name!r}; pick another name"
            )
        _REGISTERED[backend.name] = backend


def registered() -> tuple[str, ...]:
    """The names of the registered backends."""
    return tuple(_REGISTERED)


def backend_named(name: str) -> Backend:
    """The backend registered as ``name``.

    Raises:
        ValueError: no backend is registered as ``name`` (the message names those that are).
    """
    found = _REGISTERED.get(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(repr(known) for known in _REGISTERED)
        raise EagleValueError(
            f"backend must be one of {known} (or None: by the planes), not {name!r}"
        )
    if isinstance(found, Backend):
        return found
    backend = importlib.import_module(found).BACKEND
    with _lock:
        _REGISTERED[name] = backend
    return backend


def check_lanes(kernel: ir.KernelIR, checks: tuple[LaneCheck, ...], checked: Planes) -> None:
    """Make the checks a program leaves to its launch, for the bound lane count and
    flat-table lengths (raising the error the program's own check would)."""
    if not checks:
        return
    lengths = {
        p.name: int(checked.values[p.name].shape[0])
        for p in kernel.planes
        if p.is_table and p.axes is None
    }
    check_launch(checks, checked.lanes, lengths)


def host_call(
    function: Callable[..., None], arguments: tuple[str, ...], checked: Planes
) -> tuple[Callable[[None], None], dict[str, Callable[[float], None]]]:
    """A host program's call over ``checked`` planes (its ``arguments`` in order, then the
    lane count), and the setters of the Params given as numbers (one-element arrays the
    program reads)."""
    args = [checked.values[name] for name in arguments]
    lanes = checked.lanes
    setters: dict[str, Callable[[float], None]] = {
        name: functools.partial(checked.values[name].__setitem__, 0) for name in checked.numbers
    }

    def run(_stream: None) -> None:
        function(*args, lanes)

    return run, setters


def plane_dtypes(kernel: hawk.Kernel, signature: Signature) -> dict[str, str]:
    """Plane name -> dtype name, from a signature in the kernel's plane order."""
    return {p.name: dtype for p, dtype in zip(kernel.planes, signature, strict=True)}
