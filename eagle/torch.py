"""A hawk kernel as a differentiable PyTorch op: ``eagle.torch.function(kernel)``.

::

    f = eagle.torch.function(contract, contraction="gemm")
    y = f(w=w, f=features)          # a new tensor; y.sum().backward() fills w.grad

The call takes the kernel's input planes (``Scalar``, ``Table``, ``Param``)
as tensors (a ``Param`` also as a number) and, optionally, the initial
values of its ``Mutable`` planes, and returns the final values of its
``Mutable`` planes as new tensors (one, or a tuple in declaration order).
It never writes into your tensors. Tensors are float16, bfloat16, float32 or
float64 (the dtypes hawk planes take); the outputs have the dtype torch's
type promotion gives the tensors passed (Params aside, as torch's scalars),
each gradient its input's dtype. CPU tensors run the kernel's host program,
CUDA tensors its device kernel (or the GEMM route) on torch's current stream.

Gradients come from the kernel's adjoint: :func:`hawk.diff.vjp` with
``lane_gradients="store"`` (and the summed outputs' cotangents read as one
element) where it runs its own loop, :func:`eagle.diff.reverse`'s gradient
products on the GEMM route. The backward is itself differentiable where
:func:`hawk.diff.vjp` can differentiate the adjoint (double backward, a
gradient penalty, ``torch.func.jvp`` through the same second-order kernel);
where it cannot, differentiating the backward raises, never giving a
silently detached result.

A plain eager call goes through a ``torch.autograd.Function`` (as do calls
under ``torch.func`` transforms and forward-mode AD); ``torch.compile``, fake
tensors and torch modes see an op defined through ``torch.library`` in the ``eagle``
namespace with a fake implementation and a registered autograd formula, so
``torch.compile(..., fullgraph=True)`` keeps it in one graph and
``torch.cuda.graph`` can capture its forward and backward. Functions with the
same number of inputs and outputs share one such op (torch cannot unregister
an op), which finds its function by ``Function.key``: a function you drop
is freed, and a graph compiled for it never runs another.

Importing this module needs PyTorch; ``import eagle`` never imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
import threading
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle._cache import KeyedCache
from eagle.errors import EagleImportError, EagleOverflowError, EagleTypeError, EagleValueError

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised in a subprocess
    raise EagleImportError(
        "eagle.torch needs PyTorch, which is not installed: install it with "
        "`pip install torch` (see https://pytorch.org for a CUDA build), then import eagle.torch"
    ) from exc

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from eagle import _torch_autograd as autograd
from eagle._torch_derivatives import Derivatives
from eagle._torch_runner import (
    DTYPE_NAMES,
    Runner,
    adds,
    compute_dtype,
    contiguous,
    first_tensor,
    refuse_nondeterminism,
    rounded,
)
from eagle.plan._planes import by_position, fitted_number, not_a_kernel
from hawk.contraction import lane_layout
from hawk.emit import policy
from hawk.emit.policy import Contraction
from hawk.ir import Plane
from hawk.kinds import PlaneKind

__all__ = ["Function", "function"]

_DTYPE_LIST = ", ".join(DTYPE_NAMES.values())
#: the largest finite number of each dtype a kernel computes in, for Params given as numbers
_LARGEST = {real: torch.finfo(real).max for real in (torch.float32, torch.float64)}


#: each kernel's live functions, by the policy their plans are built under
_functions: weakref.WeakKeyDictionary[hawk.Kernel, dict[policy.Policy, weakref.ref[Function]]] = (
    weakref.WeakKeyDictionary()
)
_making = threading.Lock()  # so that threads asking at once get the same function
#: the one-element tensors of the Param numbers eager calls were given, the most recently
#: used kept (a binding is cached by its tensors' addresses, so a number reused keeps one)
_constants: KeyedCache[tuple[Any, ...], torch.Tensor] = KeyedCache("eagle.torch constants", 256)


def function(kernel: hawk.Kernel, contraction: Contraction | None = None) -> Function:
    """The torch op of ``kernel``: call it with tensors, differentiate through it.

    Args:
        kernel: a ``@hawk.kernel``.
        contraction: ``"loop"`` or ``"gemm"`` (on CUDA tensors of one dtype, a kernel
            that is one dense contraction then runs as one cuBLAS product, whatever
            dtype the op takes; CPU tensors run its loop); None for the current
            :func:`hawk.emit.policy.current` policy's.

    The op keeps the policy in force when it is made (:func:`hawk.emit.policy.using`,
    with ``contraction``): its forward and its backward run under it wherever they are
    called. Make it once, outside any ``torch.compile`` region, and keep it (as you
    would a module): choosing the op reads the current policy, which dynamo does not
    trace; calling the op inside a compiled function is what compiles.

    Returns:
        The :class:`Function`; the same one for the same kernel and policy while
        it is alive (nothing but you and autograd graphs holds it, so a function
        you drop is freed).

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
        ValueError: ``contraction`` is not None, ``"loop"`` or ``"gemm"``; the
            kernel has a flat ``Mutable[Table]`` (declare its axes so the
            output's shape is known) or a plane named ``lanes``.
    """
    if not isinstance(kernel, hawk.Kernel):
        raise not_a_kernel("eagle.torch.function", kernel)
    if contraction is not None and contraction not in policy.CONTRACTIONS:
        raise EagleValueError(
            f"contraction must be None or one of {policy.CONTRACTIONS}, not {contraction!r}"
        )
    chosen = policy.current()
    if contraction is not None:
        chosen = dataclasses.replace(chosen, contraction=contraction)
    return _function_under(kernel, chosen)


def _function_under(kernel: hawk.Kernel, chosen: policy.Policy) -> Function:
    """The live function of ``kernel`` under the policy ``chosen``, made if there is none
    (and what a pickled function loads as)."""
    with _making:
        made = _functions.setdefault(kernel, {})
        known = made.get(chosen)
        alive = None if known is None else known()
        if alive is None:
            alive = Function(kernel, chosen)
            made[chosen] = weakref.ref(alive)
    return alive


class Function:
    """A hawk kernel as a torch op; made by :func:`function`.

    Call it with one keyword per input plane (and optionally per ``Mutable``
    plane, its initial value: a ``Mutable[Scalar]`` one value per lane, a
    ``Mutable[Table]`` its declared number of values; outputs not given start
    at zero), plus ``lanes=`` when no lane plane is given (a contraction whose
    lanes are its product knows its own).

    Attributes:
        kernel: the hawk kernel.
        plan: its :class:`eagle.plan.AutoPlan`.
        adjoint: ``eagle.diff.reverse(plan)``, which the backward runs on the GEMM
            route (on the loop route it runs ``hawk.diff.vjp(kernel, ...,
            lane_gradients="store")``, which needs no zeroed gradients).
        key: a hash of what this function computes (its kernel's IR and policy), the
            same in every process; the registered ops take it as their last argument.
        op: the registered forward op (``torch.ops.eagle.function_<inputs>_<outputs>``),
            shared by every function with as many inputs and outputs: it takes the
            inputs, the initial values, the lane count (-1: from the lane planes),
            the outputs' dtype (the one its tensors other than Params decide, where it
            has any) and ``key``.
        backward_op: the registered op the backward calls (shared alike).
    """

    def __init__(self, kernel: hawk.Kernel, chosen: policy.Policy) -> None:
        planes = kernel.planes
        names = [p.name for p in planes]
        if "lanes" in names:
            raise EagleValueError(
                f"kernel {kernel.name!r} has a plane named 'lanes', which eagle.torch takes "
                "as the lane count; rename the plane"
            )
        flat = [p.name for p in planes if p.kind == PlaneKind.ACCUMULATOR and p.axes is None]
        if flat:
            raise EagleValueError(
                f"plane {flat[0]!r} of kernel {kernel.name!r} is a flat Mutable[Table], whose "
                "size eagle.torch cannot know; declare its axes (Mutable[Table['i':N]])"
            )
        self.kernel = kernel
        self.plan = eagle.plan.auto(kernel, **dataclasses.asdict(chosen))
        self.adjoint = eagle.diff.AdjointPlan(self.plan)  # what eagle.diff.reverse(plan) makes
        self._inputs = tuple(p for p in planes if not p.is_written)
        self._outputs = tuple(p for p in planes if p.is_written)
        self._input_names = tuple(p.name for p in self._inputs)
        self._output_names = tuple(p.name for p in self._outputs)
        self._slots = (
            *(_Slot.of(p, initial=False) for p in self._inputs),
            *(_Slot.of(p, initial=True) for p in self._outputs),
        )
        self._output_slots = self._slots[len(self._inputs) :]
        self._param_slots = tuple(
            i for i, p in enumerate(self._inputs) if p.kind == PlaneKind.PARAM
        )
        self._param_names = frozenset(self._input_names[i] for i in self._param_slots)
        # outputs the kernel reads before writing them start at zero (others, uninitialised)
        read = hawk.diff.gradient_planes(kernel)
        self._reads_first = tuple(p.name in read for p in self._outputs)
        layout = lane_layout(kernel)
        # a contraction whose lanes are its product knows its lane count
        self._default_lanes = None if layout is None else layout.lanes
        self._forward_names = (*self._input_names, *self._output_names)
        self._forward_runner = Runner(self.plan)
        self._forward_adds = adds(kernel, self.plan.policy.adds)
        self._derivatives = Derivatives(kernel, self.adjoint, self._inputs, self._outputs)
        self.key = autograd.register(self)
        self.op, self.backward_op, self._second_op = autograd.signature_ops(
            len(self._inputs), len(self._outputs)
        )

    def __repr__(self) -> str:
        return f"Function({self.kernel.name}, contraction={self.plan.policy.contraction!r})"

    def __copy__(self) -> Function:
        """The function itself: it holds no state of a call (as a torch op, or a Python
        function), so ``copy.deepcopy(model)`` shares it."""
        return self

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its kernel and policy (``torch.save`` of a model that holds it): it
        loads as the function of that kernel under that policy, the same one where one
        is alive."""
        return _function_under, (self.kernel, self.plan.policy)

    def __deepcopy__(self, memo: dict[int, Any]) -> Function:
        return self

    def __call__(self, /, lanes: int | None = None, *arrays: Any, **planes: Any) -> Any:
        """Run the kernel: its Mutable planes' final values, one tensor or a tuple.

        Raises:
            TypeError: a missing, unknown or misplaced plane; a number for a
                plane that is not a Param, or a bool; a tensor of a dtype hawk
                planes do not take; no tensor at all; no lane plane and no
                ``lanes``; ``lanes`` that is not an int; tensors passed by position.
            ValueError: a lane plane that is not 1-D; lane planes of different
                lengths; a Param tensor of more than one element; a table of
                the wrong number of elements; tensors on two devices;
                negative ``lanes``, or ``lanes`` that disagree with the lane planes.
            OverflowError: a Param number too large for the dtype the kernel
                computes in.
        """
        if arrays:
            raise by_position("f", self._input_names, 1 + len(arrays))
        try:
            values = [planes.pop(name) for name in self._input_names]
        except KeyError as missing:
            raise self._missing(missing.args[0], planes, lanes) from None
        initials = [planes.pop(name, None) for name in self._output_names]
        if planes:
            unknown = next(iter(planes))
            raise EagleTypeError(
                f"kernel {self.kernel.name!r} takes no plane {unknown!r}; its inputs are "
                f"{', '.join(self._input_names) or '(none)'} and its initial values "
                f"{', '.join(self._output_names)}"
            )
        if torch.jit.is_tracing():
            with _tracer_quiet():
                dtype, real, device, lengths = self._check(values, initials)
                count = self._check_lanes(lengths, lanes)
        else:
            dtype, real, device, lengths = self._check(values, initials)
            count = self._check_lanes(lengths, lanes)
        for index in self._param_slots:
            if not isinstance(values[index], torch.Tensor):
                values[index] = _constant(values[index], real, device)
        if autograd.dispatched(values, initials, self.kernel.name):  # (lanes from the planes)
            return self.op(*values, *initials, -1 if lengths else count, dtype, self.key)
        recorder = autograd.recorder(values, initials)
        if recorder is not None:
            return recorder.apply(self, count, dtype, *values, *initials)
        return self._forward(values, initials, count, dtype)

    # -- the call's checks -------------------------------------------------------------

    def _missing(self, name: str, planes: dict[str, Any], lanes: Any) -> Exception:
        """The error for a call without plane ``name``: a plane passed as ``lanes`` (the
        one positional argument), a misspelt one, or one left out."""
        known = {*self._input_names, *self._output_names}
        if isinstance(lanes, torch.Tensor):
            return EagleTypeError(
                f"a tensor was passed by position, as lanes; kernel {self.kernel.name!r} takes "
                f"its planes by name: f({', '.join(f'{n}=...' for n in self._input_names)})"
            )
        unknown = [given for given in planes if given not in known]
        if unknown:
            return EagleTypeError(
                f"kernel {self.kernel.name!r} takes no plane {unknown[0]!r} (and plane "
                f"{name!r} is missing); its inputs are {', '.join(self._input_names)}"
            )
        return EagleTypeError(
            f"missing plane {name!r} of kernel {self.kernel.name!r}; pass "
            f"{', '.join(self._input_names)} (and optionally "
            f"{', '.join(self._output_names)}, their initial values)"
        )

    def _check(
        self, values: list[Any], initials: list[Any]
    ) -> tuple[torch.dtype, torch.dtype, torch.device, list[tuple[str, int]]]:
        """The outputs' dtype, the dtype the kernel computes in, the device, and the
        length of each lane plane given (by name), for these planes (checked)."""
        given: list[torch.Tensor] = []  # the tensors that decide the dtype
        params: list[torch.Tensor] = []
        lengths: list[tuple[str, int]] = []
        for slot, value in zip(self._slots, (*values, *initials), strict=True):
            if isinstance(value, torch.Tensor):
                if value.dtype not in DTYPE_NAMES:
                    raise EagleTypeError(
                        f"{slot.what} is a {value.dtype} tensor; hawk planes are {_DTYPE_LIST} "
                        "(convert it with .float() or .double())"
                    )
                if value.layout is not torch.strided or value.is_nested:
                    layout = "nested" if value.is_nested else str(value.layout)
                    raise EagleTypeError(
                        f"{slot.what} is a {layout} tensor; eagle.torch ops take strided "
                        "tensors: pass .to_dense() of it (a nested one: each of its tensors)"
                    )
                if slot.lane:
                    if value.dim() != 1:
                        raise EagleValueError(
                            f"{slot.what} ({slot.plane.declaration()}) takes a 1-D tensor with "
                            f"one value per lane, not shape {tuple(value.shape)}; pass "
                            ".reshape(-1) if its values are the lanes"
                        )
                    lengths.append((slot.plane.name, value.shape[0]))
                elif slot.param:
                    if value.numel() != 1:
                        raise EagleValueError(
                            f"{slot.what} is a Param: pass a number or a one-element tensor, "
                            f"not shape {tuple(value.shape)}"
                        )
                    params.append(value)
                    continue
                else:
                    slot.refuse_shape(value)
                given.append(value)
            elif value is not None or not slot.initial:
                _refuse_value(slot, value)
        tensors = given + params
        if not tensors:
            raise EagleTypeError(
                f"pass at least one plane of kernel {self.kernel.name!r} as a tensor; its "
                "device is where the kernel runs"
            )
        device = tensors[0].device
        for tensor in tensors:
            if tensor.device != device:
                self._refuse_devices(values, initials)
        # Params are like torch's scalars: they decide the outputs' dtype only when they
        # are the only tensors
        deciding = given or params
        dtype = deciding[0].dtype
        for tensor in deciding:
            if tensor.dtype != dtype:
                dtype = torch.promote_types(dtype, tensor.dtype)
        real = compute_dtype(*tensors)
        for index in self._param_slots:
            if isinstance(values[index], np.generic):  # a numpy number: as Python's
                values[index] = values[index].item()
            if not isinstance(values[index], torch.Tensor) and not torch.compiler.is_compiling():
                # (while compiling, the number may be an input of the graph: comparing it
                # would compile again for the values either side, and NaN has no order)
                values[index] = _param_number(self._inputs[index].name, values[index], real)
        return dtype, real, device, lengths

    def _refuse_devices(self, values: list[Any], initials: list[Any]) -> None:
        """Raise for tensors on two devices, naming two of them."""
        named = [
            (slot.plane.name, value)
            for slot, value in zip(self._slots, (*values, *initials), strict=True)
            if isinstance(value, torch.Tensor)
        ]
        named.sort(key=lambda item: item[0] in self._param_names)  # as the dtype: Params last
        first_name, first = named[0]
        for name, tensor in named[1:]:
            if tensor.device != first.device:
                raise EagleValueError(
                    f"plane {name!r} is on {tensor.device} but plane {first_name!r} is on "
                    f"{first.device}; pass every tensor on one device (a Param may be a number)"
                )

    def _check_lanes(self, lengths: list[tuple[str, int]], lanes: Any) -> Any:
        """The lane count, from the lane planes' ``lengths`` or ``lanes`` (checked)."""
        for name, length in lengths[1:]:
            if length != lengths[0][1]:
                raise EagleValueError(
                    f"plane {name!r} has {length} values but plane {lengths[0][0]!r} has "
                    f"{lengths[0][1]}; every lane plane (Scalar, Mutable[Scalar]) holds "
                    "one value per lane"
                )
        if lengths and self._default_lanes not in (None, lengths[0][1]):
            name, length = lengths[0]
            raise EagleValueError(
                f"plane {name!r} has {length} values, but kernel {self.kernel.name!r} has "
                f"{self._default_lanes} lanes (its contraction's product); pass lane planes of "
                f"{self._default_lanes} values"
            )
        if lanes is None:
            if lengths:
                return lengths[0][1]
            if self._default_lanes is None:
                raise EagleTypeError(
                    f"kernel {self.kernel.name!r} has no lane plane among those given; pass lanes=N"
                )
            return self._default_lanes
        if isinstance(lanes, np.integer):
            lanes = int(lanes)
        if isinstance(lanes, bool) or not isinstance(lanes, int | torch.SymInt):
            traced = (
                " (under torch.jit.trace a shape, x.shape[0], is a tensor whose value a trace "
                "would keep: use torch.export or torch.compile, which keep it symbolic)"
                if isinstance(lanes, torch.Tensor) and torch.jit.is_tracing()
                else ""
            )
            raise EagleTypeError(f"lanes must be an int (the lane count), not {lanes!r}{traced}")
        if lanes < 0:
            raise EagleValueError(f"lanes must be a lane count, 0 or more, not {lanes}")
        if lengths and lengths[0][1] != lanes:
            name, length = lengths[0]
            raise EagleValueError(
                f"lanes={lanes}, but plane {name!r} has {length} values, one per "
                f"lane; leave lanes out (the lane planes give the count)"
            )
        if not lengths and self._default_lanes not in (None, lanes):
            raise EagleValueError(
                f"lanes={lanes}, but kernel {self.kernel.name!r} has {self._default_lanes} "
                "lanes (its contraction's product); leave lanes out"
            )
        return lanes

    # -- the forward -------------------------------------------------------------------

    def _count(self, values: Sequence[Any], initials: Sequence[Any], lanes: Any) -> Any:
        """The lane count: the lane planes' length, or ``lanes`` (-1: the lane planes
        give it)."""
        for slot, tensor in zip(self._slots, (*values, *initials), strict=True):
            if slot.lane and tensor is not None:
                return tensor.shape[0]
        return lanes

    def _forward_fake(
        self, values: Sequence[Any], initials: Sequence[Any], lanes: Any, dtype: torch.dtype
    ) -> Any:
        """The registered op's fake: its outputs' shapes, dtype and device, checked as
        the op's forward checks them (:meth:`_op_checked`)."""
        dtype = self._op_checked(values, initials, dtype)
        count = self._count(values, initials, lanes)
        device = first_tensor(values, initials).device
        outputs = [
            torch.empty(
                count if p.kind == PlaneKind.OUTPUT else _shape(p), dtype=dtype, device=device
            )
            for p in self._outputs
        ]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _forward_op(
        self, values: Sequence[Any], initials: Sequence[Any], lanes: Any, dtype: torch.dtype
    ) -> Any:
        """The registered op's forward, which a graph traced or exported with the op (or a
        direct call of :attr:`op`) runs without :meth:`__call__`'s checks; it makes those
        of :meth:`_op_checked`, as the fake does."""
        return self._forward(values, initials, lanes, self._op_checked(values, initials, dtype))

    def _op_checked(
        self, values: Sequence[Any], initials: Sequence[Any], dtype: torch.dtype
    ) -> torch.dtype:
        """The registered op's outputs' dtype, ``dtype``, checked against the one its
        tensors other than Params decide in a call (where it has any), and each table's
        shape checked (its values would be read in another order).

        Raises:
            TypeError: the dtypes differ: a graph traced or exported over tensors of one
                dtype run over another (it keeps ``dtype`` and its Param numbers'
                tensors), or a direct call of :attr:`op` with another ``dtype``.
            ValueError: a table of another shape than its declared one.
        """
        decided = None
        for slot, value in zip(self._slots, (*values, *initials), strict=True):
            if value is not None and not slot.param:
                if not slot.lane:
                    slot.refuse_shape(value)
                seen = value.dtype
                decided = seen if decided is None else torch.promote_types(decided, seen)
        if decided is not None and decided != dtype:
            raise EagleTypeError(
                f"the eagle.torch op of kernel {self.kernel.name!r} was recorded for {dtype} "
                f"outputs, but its tensors give {decided}: a graph traced or exported over "
                "tensors of one dtype keeps that dtype (and its Param numbers' tensors); "
                "record it again over tensors of this dtype (a direct call of f.op: pass "
                f"{decided})"
            )
        return dtype

    def _forward(
        self, values: Sequence[Any], initials: Sequence[Any], lanes: Any, dtype: torch.dtype
    ) -> Any:
        """The op's forward: the outputs, new tensors of ``dtype``."""
        count = lanes if lanes >= 0 else self._count(values, initials, lanes)
        device = first_tensor(values, initials).device
        real = compute_dtype(*values, *initials)
        outputs = []
        for slot, start, reads in zip(self._output_slots, initials, self._reads_first, strict=True):
            if start is None and slot.lane:
                outputs.append(
                    (torch.zeros if reads else torch.empty)(count, dtype=dtype, device=device)
                )
            elif slot.lane:
                outputs.append(_copy(start, dtype))
            else:  # an accumulator: summed in the compute dtype, rounded once
                shape = _shape(slot.plane)
                outputs.append(
                    torch.zeros(shape, dtype=real, device=device)
                    if start is None  # (a copy of its own, never a view: see _copy)
                    else torch.empty(shape, dtype=real, device=device).copy_(start.reshape(shape))
                )
        if self._forward_adds:
            refuse_nondeterminism(f"the eagle.torch op of hawk kernel {self.kernel.name!r}", device)
        self._forward_runner.run(self._forward_names, [*map(contiguous, values), *outputs], device)
        if len(outputs) == 1:
            return rounded(outputs[0], dtype)
        return tuple(rounded(out, dtype) for out in outputs)


@dataclass(frozen=True)
class _Slot:
    """What a call checks of a plane it takes (an input, or an output's initial value),
    worked out once per function: its plane, whether it is a Param or a lane plane, a
    table's declared number of values (None: any), and how errors name it."""

    plane: Plane
    initial: bool
    param: bool
    lane: bool
    size: int | None
    what: str

    def refuse_shape(self, value: torch.Tensor) -> None:
        """Raise for a table's tensor of another shape than its declared one or its values
        in a row (never its transpose, which has as many values)."""
        if self.size is not None and (
            value.numel() != self.size
            or (self.size != 1 and value.dim() != 1 and tuple(value.shape) != self.plane.shape)
        ):
            raise EagleValueError(
                f"{self.what} is {self.plane.declaration()}: pass a tensor of shape "
                f"{self.plane.shape}, or a 1-D tensor of its {self.size} values "
                f"(row-major), not shape {tuple(value.shape)}"
            )

    @classmethod
    def of(cls, plane: Plane, *, initial: bool) -> _Slot:
        shape = plane.shape
        return cls(
            plane,
            initial,
            param=plane.kind == PlaneKind.PARAM,
            lane=plane.is_lane,
            size=None if shape is None else math.prod(shape),
            what=f"the initial value of {plane.name!r}" if initial else f"plane {plane.name!r}",
        )


@contextlib.contextmanager
def _tracer_quiet() -> Iterator[None]:
    """Silence ``torch.jit.trace``'s warnings about a call's checks, which compare sizes
    (traced tensors there): they record nothing in the trace, whose op reads the lane
    count from its planes. A traced call is checked by the plan (lane planes of unequal
    lengths, by name) and by torch (a table's initial value of the wrong size, which the
    op reshapes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        yield


def _refuse_value(slot: _Slot, value: Any) -> None:
    """Raise for ``value``, given for ``slot`` and not a tensor: it is not a number given
    for a Param (an int or a float, not a bool), nor None for an initial value."""
    plane = slot.plane
    if slot.initial:
        raise EagleTypeError(
            f"the initial value of {plane.name!r} ({plane.declaration()}) is a "
            f"{type(value).__name__}; pass a tensor, or leave it out to start at zero"
        )
    number = isinstance(value, numbers.Real | torch.SymInt | torch.SymFloat)
    if not slot.param or isinstance(value, bool | np.bool_) or not number:
        raise EagleTypeError(
            f"plane {plane.name!r} ({plane.declaration()}) is a {type(value).__name__}; "
            f"pass a tensor{' or a number (int or float)' if slot.param else ''}"
        )


def _param_number(name: str, value: Any, real: torch.dtype) -> Any:
    """A Param number as the kernel takes it, checked as ``plan.run`` checks it
    (:func:`eagle.plan._planes.fitted_number`; infinities and NaN are values like any
    other): refused where it rounds to an infinity in the dtype the kernel computes in;
    one that rounds to that dtype's largest value is brought to it, as torch takes no
    larger number for the dtype."""
    if isinstance(value, torch.SymInt | torch.SymFloat):
        return value  # (a symbolic number, kept one: checking it would fix its value)
    number = fitted_number(value, str(real).removeprefix("torch."))
    if number is None:
        shown = f"an int of {value.bit_length()} bits" if isinstance(value, int) else repr(value)
        wider = " or float64 tensors" if real == torch.float32 else ""
        raise EagleOverflowError(
            f"Param {name!r} is {shown}, too large for {real} (the dtype the kernel computes "
            f"in); pass a number within ±{_LARGEST[real]:.8g}{wider}"
        )
    limit = _LARGEST[real]
    if math.isfinite(number) and abs(number) > limit:
        return math.copysign(limit, number)
    return number


def _constant(value: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A one-element tensor holding the number ``value``, kept per value (its sign too: -0.0
    is not 0.0), dtype and device for plain eager calls; made afresh while compiling (from
    a symbolic number too), tracing or capturing a graph, under inference mode, a torch
    dispatch mode (fake tensors) or a torch.func transform (its wrapped tensors), whose
    tensors must not serve a later call."""
    compiling = torch.compiler.is_compiling()
    if (
        compiling
        or torch.jit.is_tracing()
        or torch.is_inference_mode_enabled()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._are_functorch_transforms_active()
        or (device.type == "cuda" and torch.cuda.is_current_stream_capturing())
    ):
        symbolic = isinstance(value, torch.SymInt | torch.SymFloat)
        if symbolic or (isinstance(value, float) and compiling):
            # a product with the number: a trace keeps a symbolic number (and dynamo a
            # float) an input of the graph where it meets a tensor in arithmetic, and fixes
            # it to its value elsewhere
            return torch.ones((1,), dtype=dtype, device=device) * value
        # an int rounded by float(), as plan.run and eager calls round it
        return torch.full((1,), float(value), dtype=dtype, device=device)
    value = float(value)
    key = (value, math.copysign(1.0, value), dtype, device) if value == value else (dtype, device)
    tensor = _constants.get(key)
    if tensor is None:
        tensor = _constants[key] = torch.full((1,), value, dtype=dtype, device=device)
    return tensor


def _copy(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous copy of ``tensor`` in ``dtype``, a tensor of its own (never a view: an
    output that is one may not be changed in place, as torch's own outputs may)."""
    return tensor.to(dtype=dtype, memory_format=torch.contiguous_format, copy=True)


def _shape(plane: Plane) -> tuple[int, ...]:
    """The declared shape of an accumulator plane."""
    assert plane.shape is not None  # Function refuses a flat (axis-less) accumulator
    return plane.shape
