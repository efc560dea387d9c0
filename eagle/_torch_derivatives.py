"""The derivatives of an :class:`eagle.torch.Function`: :class:`Derivatives`.

The backward runs the kernel's adjoint once: on the GEMM route the gradient products of
``eagle.diff.reverse(plan, accumulate=False)``, which write the gradients (beta = 0, no
zeroing first), otherwise ``hawk.diff.vjp(kernel, wrt, lane_gradients="store")``,
which writes the lane gradients (no zeroing first) and reads the broadcast cotangent of
a sum as its one element. A ``Mutable[Table]``'s initial value's gradient is its
cotangent (adds pass it through), reshaped in torch.

The backward's own backward (double backward) runs the adjoint of that adjoint,
``hawk.diff.vjp(hawk.diff.vjp(kernel, ...), ...)``, once; it raises where hawk.diff
cannot differentiate the adjoint. Forward mode comes from the same second-order kernel:
the adjoint is linear in the cotangents, so the Jacobian times the tangents is the
gradient, with respect to the cotangents, of the adjoint's gradients dotted with the
tangents; and forward mode through the backward (``torch.func.hessian``) uses the
symmetry of the Hessian.

How these enter torch (registered ops, ``autograd.Function``) is :mod:`eagle._torch_autograd`'s
business: it passes the ``gradients`` and ``second`` callables that run the next order
through its own route. Only :mod:`eagle.torch` imports this module (it needs torch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

import eagle.plan
import hawk
import hawk.diff
from eagle._torch_runner import (
    DTYPE_NAMES,
    Runner,
    adds,
    compute_dtype,
    compute_dtype_of,
    contiguous,
    first_tensor,
    refuse_nondeterminism,
    rounded,
)
from eagle.diff import AdjointPlan
from eagle.errors import EagleRuntimeError, EagleValueError
from eagle.gemm.steps import Side
from hawk.ir import Plane
from hawk.kinds import PlaneKind

__all__ = ["Derivatives", "split"]


def split(items: Sequence[Any], *counts: int) -> list[Sequence[Any]]:
    """``items`` cut into consecutive runs of ``counts`` items."""
    parts, start = [], 0
    for count in counts:
        parts.append(items[start : start + count])
        start += count
    return parts


@dataclass(frozen=True)
class _Adjoint:
    """A prepared adjoint: its kernel, its runner, the planes it takes, and whether it
    adds floats atomically on the device (a loop's table adds)."""

    kernel: hawk.Kernel
    runner: Runner
    takes: frozenset[str]
    adds: bool


@dataclass(frozen=True)
class _StandIn:
    """An initial value a backward does not keep: its position among the saved tensors,
    its shape, dtype and device."""

    position: int
    shape: Any
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class _Backward:
    """A prepared backward: its adjoint, the planes it takes in order (the inputs, the
    ``held`` outputs' values before the launch, every cotangent, the gradients made), the
    outputs (by position) whose cotangent the runner reads as its one element (``one``),
    and how each gradient is made (``made``: its slot and ``"empty"``, written whole in
    the slot's dtype; or ``"summed"``, added into over lanes in the compute dtype)."""

    adjoint: _Adjoint
    names: tuple[str, ...]
    held: tuple[int, ...]
    one: frozenset[int]
    made: tuple[tuple[int, str], ...]


class Derivatives:
    """The derivatives of a kernel made a torch op, over its input planes ``inputs``
    (Scalar, Param, Table) and ``outputs`` (the Mutable planes). Its methods take the
    inputs (``values``), the outputs' initial values (``initials``, None where not
    given) and the outputs' cotangents; a *slot* is an input or an initial value."""

    def __init__(
        self,
        kernel: hawk.Kernel,
        adjoint: AdjointPlan,
        inputs: tuple[Plane, ...],
        outputs: tuple[Plane, ...],
    ) -> None:
        self.kernel = kernel
        self.adjoint = adjoint
        # the GEMM route's backward writes its gradients, so they start uninitialised
        self._written = AdjointPlan(adjoint.primal, accumulate=False)
        self._inputs, self._outputs = inputs, outputs
        self._input_names = tuple(p.name for p in inputs)
        self._output_names = tuple(p.name for p in outputs)
        cotangents = hawk.diff.cotangent_planes(kernel)
        self._cotangent_names = tuple(cotangents[name] for name in self._output_names)
        gradients = hawk.diff.gradient_planes(kernel)
        # Each slot has a gradient plane, or None: an output the kernel writes without
        # reading it first, and a Mutable[Table], whose initial value's gradient is its
        # cotangent (passed through in torch).
        self._slot_gradients = (
            *(gradients[name] for name in self._input_names),
            *(gradients.get(p.name) if p.kind == PlaneKind.OUTPUT else None for p in outputs),
        )
        # the slots whose gradient a loop adjoint writes per lane (no zeroing first)
        self._lane_slots = (
            *(p.kind == PlaneKind.INPUT for p in inputs),
            *(p.kind == PlaneKind.OUTPUT for p in outputs),
        )
        # the slots of Mutable[Table]s' initial values, whose gradient is their cotangent
        self._passing_slots = tuple(
            len(inputs) + i for i, p in enumerate(outputs) if p.kind == PlaneKind.ACCUMULATOR
        )
        self._has_lane_input = any(p.kind == PlaneKind.INPUT for p in inputs)
        self._backward_runners: dict[tuple[Any, ...], _Backward] = {}
        self._second_runners: dict[tuple[Any, ...], _Adjoint] = {}
        self._adjoint_route: dict[tuple[str, torch.dtype], bool] = {}

    # -- what a backward keeps of the call ------------------------------------------

    @functools.cached_property
    def _read_initials(self) -> tuple[bool, ...]:
        """For each output, whether an adjoint may read its initial value (worked out at
        the first call autograd records, not when the function is made: it derives the
        adjoint, which may warn of its cost)."""
        reads = self._slot_gradients[len(self._inputs) :]  # (None: not read before written)
        return _initials_read(self.kernel, self._outputs, [g is not None for g in reads])

    def kept(self, tensors: Sequence[Any]) -> tuple[list[Any], tuple[_StandIn, ...]]:
        """``tensors`` (the inputs, then the initial values) as a backward saves them: each
        initial value no adjoint of the kernel reads left out (None), so that changing it
        in place before the backward is no error, with what stands in for it
        (:meth:`restored`)."""
        kept = list(tensors)
        stand_ins = []
        for position, read in enumerate(self._read_initials, start=len(self._inputs)):
            start = kept[position]
            if start is not None and not read:
                stand_ins.append(_StandIn(position, start.shape, start.dtype, start.device))
                kept[position] = None
        return kept, tuple(stand_ins)

    @staticmethod
    def restored(saved: Sequence[Any], stand_ins: Sequence[_StandIn]) -> list[Any]:
        """The tensors :meth:`kept` saved, each one left out standing in as zeros of its
        shape, dtype and device (the backward reads only those of an unread value)."""
        tensors = list(saved)
        for stand_in in stand_ins:
            if tensors[stand_in.position] is None:
                tensors[stand_in.position] = torch.zeros(
                    (), dtype=stand_in.dtype, device=stand_in.device
                ).expand(stand_in.shape)
        return tensors

    def _refuse_unkept(self, held: Sequence[int]) -> None:
        """Raise if an adjoint reads the initial value of an output in ``held`` that
        :meth:`kept` leaves out (it would read zeros): a fault of eagle's, never silent."""
        unkept = [self._output_names[i] for i in held if not self._read_initials[i]]
        if unkept:
            raise EagleRuntimeError(
                f"internal error: an adjoint of hawk kernel {self.kernel.name!r} reads the "
                f"initial value of {unkept[0]!r}, which its backward does not keep; please "
                "report it"
            )

    # -- the backward ------------------------------------------------------------------

    def backward_formula(
        self,
        saved: Sequence[Any],
        cotangents: Sequence[Any],
        needs_input_grad: Sequence[bool],
        gradients: Callable[..., Sequence[Any]],
        count: Callable[[Sequence[Any], Sequence[Any]], Any],
        dtype: torch.dtype,
    ) -> list[Any]:
        """The gradient of each differentiable slot (None where not needed): the adjoint's
        through ``gradients`` (the registered backward op, or the eager one), a
        ``Mutable[Table]``'s initial value's its cotangent, reshaped in torch.

        A cotangent may be None: an output no loss reads (torch's grads are not
        materialised). Its output is left out of the adjoint, as torch prunes it (its
        zero cotangent times an infinite partial, ``sqrt`` at 0, would be NaN); its
        tensor in the calls below is a zero of its shape (``count``, the forward's lane
        count of its inputs and initial values, and ``dtype``)."""
        values, initials = split(saved, len(self._inputs), len(self._outputs))
        needs = [
            bool(need) and gradient is not None
            for need, gradient in zip(needs_input_grad, self._slot_gradients, strict=False)
        ]
        zero = tuple(bar is None for bar in cotangents)
        if any(zero):
            if all(zero):
                return [None] * len(needs)
            cotangents, zero = self._absent_filled(values, initials, cotangents, count, dtype)
        if any(needs):
            computed = gradients(values, initials, cotangents, needs, zero)
            grads = [g if need else None for g, need in zip(computed, needs, strict=True)]
        else:
            grads = [None] * len(needs)
        first_initial = len(self._inputs)
        for slot in self._passing_slots:
            if needs_input_grad[slot] and not zero[slot - first_initial]:  # (absent: none)
                start = initials[slot - first_initial]
                bar = cotangents[slot - first_initial]
                grads[slot] = rounded(bar, start.dtype).reshape(start.shape)
        return grads

    def _absent_filled(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        cotangents: Sequence[Any],
        count: Callable[[Sequence[Any], Sequence[Any]], Any],
        dtype: torch.dtype,
    ) -> tuple[list[Any], tuple[bool, ...]]:
        """``cotangents`` with a zero of its output's shape for each None (expanded from
        one element), and which outputs the adjoint leaves out: those, but one lane
        output kept where leaving them all out would leave it no lane plane."""
        device = first_tensor(values, initials).device
        lanes = None
        filled, zero = [], []
        for plane, bar in zip(self._outputs, cotangents, strict=True):
            zero.append(bar is None)
            if bar is None:
                if lanes is None:
                    lanes = count(values, initials)
                shape = (lanes,) if plane.kind == PlaneKind.OUTPUT else _shape(plane)
                bar = torch.zeros((), dtype=dtype, device=device).expand(shape)
            filled.append(bar)
        if not self._has_lane_input:
            lane = [i for i, p in enumerate(self._outputs) if p.kind == PlaneKind.OUTPUT]
            if lane and all(zero[i] for i in lane):
                zero[lane[0]] = False
        return filled, tuple(zero)

    def gradients_fake(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        cotangents: Sequence[Any],
        needs: Sequence[bool],
    ) -> list[Any]:
        return [
            _empty_as(self._grad_like(slot, values, initials, cotangents)) if need else None
            for slot, need in enumerate(needs)
        ]

    def _grad_like(
        self, slot: int, values: Sequence[Any], initials: Sequence[Any], cotangents: Sequence[Any]
    ) -> Any:
        """The tensor the gradient of differentiable slot ``slot`` is shaped like."""
        if slot < len(values):
            return values[slot]
        position = slot - len(values)
        if initials[position] is not None:
            return initials[position]
        return cotangents[position]  # its cotangent, when no initial value was given

    def gradients(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        cotangents: Sequence[Any],
        needs: Sequence[bool],
        zero: Sequence[bool],
    ) -> list[Any]:
        """The gradient of each differentiable slot that ``needs`` asks for (None for the
        others), in its input's dtype and shape, made by one launch of the adjoint, which
        leaves out the outputs ``zero`` marks (their cotangents are zero)."""
        device = first_tensor(values, cotangents).device
        dtypes = {t.dtype for t in values}
        dtypes.update(t.dtype for t in cotangents)
        real = compute_dtype_of(dtypes)
        # An adjoint that runs its own loop is specialised for a fresh call: it writes the
        # lane gradients (no zeroing first) and reads a broadcast cotangent (the gradient
        # of a sum) as its one element (no copy). The GEMM route writes its gradients; it
        # has no way to leave an output out, so an adjoint that does runs its own loop.
        zero = tuple(zero)
        fresh = any(zero) or self._adjoint_loops(device, dtypes)
        broadcast = (
            tuple(
                plane.name
                for plane, bar, absent in zip(self._outputs, cotangents, zero, strict=True)
                if plane.kind == PlaneKind.OUTPUT
                and not absent
                and bar.stride(0) == 0
                and bar.numel()
            )
            # (the adjoint needs a lane plane left to count its lanes: a Scalar input; zero
            # lanes have no element to read)
            if fresh and self._has_lane_input
            else ()
        )
        key = (tuple(needs), fresh, broadcast, zero)
        backward = self._backward_runners.get(key)
        if backward is None:
            backward = self._backward_runners[key] = self._backward(needs, fresh, broadcast, zero)
        tensors = [contiguous(value) for value in values]
        for position in backward.held:  # the value each held output had before the launch
            tensors.append(_held(initials[position], cotangents[position]))
        for position, bar in enumerate(cotangents):
            if not zero[position]:
                # (a broadcast one read as its one element, a negated view's resolved)
                tensors.append(bar.resolve_neg() if position in backward.one else contiguous(bar))
        results: list[Any] = [None] * len(needs)
        for slot, made in backward.made:
            like = self._grad_like(slot, values, initials, cotangents)
            if made == "summed":  # summed over lanes: in the compute dtype, rounded once
                gradient = torch.zeros(like.shape, dtype=real, device=device)
                results[slot] = (gradient, like.dtype)
            else:
                gradient = torch.empty(like.shape, dtype=like.dtype, device=device)
                results[slot] = gradient
            tensors.append(gradient)
        if backward.adjoint.adds:
            refuse_nondeterminism(
                f"the backward of the eagle.torch op of hawk kernel {self.kernel.name!r}", device
            )
        backward.adjoint.runner.run(backward.names, tensors, device)
        for slot, made in backward.made:
            if made == "summed":
                gradient, dtype = results[slot]
                results[slot] = rounded(gradient, dtype)
        return results

    def _adjoint_loops(self, device: torch.device, dtypes: set[torch.dtype]) -> bool:
        """True when the adjoint over tensors of ``dtypes`` on ``device`` runs its own loop
        (planes of several dtypes always do)."""
        if len(dtypes) != 1:
            return True
        (dtype,) = dtypes
        key = (device.type, dtype)
        loops = self._adjoint_route.get(key)
        if loops is None:
            side: Side = "device" if device.type == "cuda" else "host"
            loops = self._adjoint_route[key] = (
                self.adjoint.route(side, DTYPE_NAMES[dtype]) == "loop"
            )
        return loops

    def _backward(
        self,
        needs: Sequence[bool],
        fresh: bool,
        broadcast: tuple[str, ...],
        zero: tuple[bool, ...],
    ) -> _Backward:
        """The backward for these needs (:meth:`_backward_adjoint`), with the planes it
        takes in order and how each call fills them.

        Raises:
            ValueError: ``needs`` asks for a gradient the kernel has not.
        """
        for slot, need in enumerate(needs):
            if need and self._slot_gradients[slot] is None:
                raise EagleValueError(
                    f"needs[{slot}] is True, but the kernel never reads the initial value of "
                    f"output {self._output_names[slot - len(self._inputs)]!r} (or adds into "
                    "it), so its adjoint has no gradient for it; pass False there"
                )
        adjoint = self._backward_adjoint(needs, fresh, broadcast, zero)
        held = tuple(i for i, name in enumerate(self._output_names) if name in adjoint.takes)
        self._refuse_unkept(held)
        made = tuple(
            (slot, "summed" if fresh and not self._lane_slots[slot] else "empty")
            for slot, need in enumerate(needs)
            if need
        )
        names = (
            *self._input_names,
            *(self._output_names[i] for i in held),
            *(name for name, absent in zip(self._cotangent_names, zero, strict=True) if not absent),
            *(cast(str, self._slot_gradients[slot]) for slot, _ in made),
        )
        one = frozenset(self._output_names.index(name) for name in broadcast)
        return _Backward(adjoint, names, held, one, made)

    def _backward_adjoint(
        self,
        needs: Sequence[bool],
        fresh: bool,
        broadcast: tuple[str, ...],
        zero: tuple[bool, ...],
    ) -> _Adjoint:
        """The adjoint for these needs: ``eagle.diff.reverse(plan, accumulate=False)``'s
        gradient products, which write the gradients, or, for a fresh call, the adjoint
        kernel that writes them, with ``broadcast`` outputs' cotangents read as one element
        and ``zero`` outputs left out."""
        names = self._input_names + self._output_names
        wrt = [names[slot] for slot, need in enumerate(needs) if need]
        if not fresh:
            kernel = hawk.diff.vjp(self.kernel, wrt)  # the kernel whose planes reverse takes
            return _Adjoint(kernel, Runner(self._written), _plane_names(kernel), adds=False)
        kernel = hawk.diff.vjp(
            self.kernel,
            wrt,
            lane_gradients="store",
            broadcast=broadcast,
            zero_cotangents=self._zero_names(zero),
        )
        return self._looped(kernel, frozenset(kernel.cotangents[name] for name in broadcast))

    def _zero_names(self, zero: Sequence[bool]) -> tuple[str, ...]:
        """The outputs ``zero`` marks, by name (``hawk.diff.vjp``'s ``zero_cotangents``)."""
        return tuple(name for name, absent in zip(self._output_names, zero, strict=True) if absent)

    # -- second order: the backward's own backward, and forward mode -------------------

    def second_formula(
        self,
        saved: Sequence[Any],
        gg: Sequence[Any],
        needs: Sequence[bool],
        zero: Sequence[bool],
        needs_input_grad: Sequence[bool],
        second: Callable[..., Sequence[Any]],
    ) -> list[Any]:
        """The backward of the backward op: the gradient of each of its tensor inputs
        (the inputs, the initial values, the cotangents; None where not needed) for the
        cotangents ``gg`` of the gradients it made (with the outputs ``zero`` left out),
        through ``second`` (the registered op, or the eager one)."""
        count = len(saved)
        wants = [bool(want) for want in needs_input_grad[:count]]
        gg = [g if need else None for g, need in zip(gg, needs, strict=True)]
        if not any(wants) or all(g is None for g in gg):
            return [None] * count
        # a gradient no loss reads (no cotangent) leaves the first adjoint, as torch prunes
        # it: its zero cotangent times an infinite partial (sqrt at 0) would be NaN
        needs = [g is not None for g in gg]
        values, initials, cotangents = split(
            saved, len(self._inputs), len(self._outputs), len(self._outputs)
        )
        return list(second(values, initials, cotangents, gg, needs, wants, zero))

    def second_plan(
        self, needs: Sequence[bool], wants: Sequence[bool], zero: Sequence[bool]
    ) -> tuple[hawk.diff.AdjointKernel, dict[int, str]]:
        """The first adjoint (for ``needs``, with the outputs ``zero`` left out), and for
        each wanted input of the backward op (in the order inputs, initial values,
        cotangents) that the first adjoint reads, its plane there. The others have no
        gradient."""
        slots = (*self._input_names, *self._output_names)
        first = hawk.diff.vjp(
            self.kernel, [name for name, need in zip(slots, needs, strict=True) if need],
            lane_gradients="store", zero_cotangents=self._zero_names(zero),
        )  # fmt: skip
        takes = _plane_names(first)
        planes = (
            *self._input_names,
            *(name if name in takes else None for name in self._output_names),
            *(name if name in takes else None for name in self._cotangent_names),
        )
        wanted = {
            index: name
            for index, (name, want) in enumerate(zip(planes, wants, strict=True))
            if want and name is not None
        }
        return first, wanted

    def second_fake(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        cotangents: Sequence[Any],
        needs: Sequence[bool],
        wants: Sequence[bool],
        zero: Sequence[bool],
    ) -> list[Any]:
        _, wanted = self.second_plan(needs, wants, zero)
        inputs = (*values, *initials, *cotangents)
        return [_empty_as(inputs[i]) if i in wanted else None for i in range(len(wants))]

    def second(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        cotangents: Sequence[Any],
        gg: Sequence[Any],
        needs: Sequence[bool],
        wants: Sequence[bool],
        zero: Sequence[bool],
    ) -> list[Any]:
        """The second-order gradients (:meth:`second_formula`), by one launch of the
        adjoint of the first adjoint (``hawk.diff.vjp`` of ``hawk.diff.vjp``), the
        outputs ``zero`` marks left out of the first.

        Raises:
            RuntimeError: hawk.diff cannot differentiate the first adjoint.
        """
        first, wanted = self.second_plan(needs, wants, zero)
        results: list[Any] = [None] * len(wants)
        if not wanted:
            return results
        wrt = tuple(dict.fromkeys(wanted.values()))
        key = (tuple(needs), tuple(zero), wrt)
        adjoint = self._second_runners.get(key)
        if adjoint is None:
            adjoint = self._second_runners[key] = self._second_adjoint(first, wrt)
        kernel = adjoint.kernel
        assert isinstance(kernel, hawk.diff.AdjointKernel)
        device = first_tensor(values, cotangents).device
        real = compute_dtype(*values, *cotangents, *(g for g in gg if g is not None))
        # the tensor each plane of the first adjoint is
        given: dict[str, Any] = dict(zip(self._input_names, values, strict=True))
        takes = _plane_names(first)
        self._refuse_unkept(tuple(i for i, name in enumerate(self._output_names) if name in takes))
        for plane, name, start, bar in zip(
            self._outputs, self._cotangent_names, initials, cotangents, strict=True
        ):
            if plane.name in takes:
                given[plane.name] = _held(start, bar)
            if name in takes:
                given[name] = bar
        planes: dict[str, Any] = {name: contiguous(tensor) for name, tensor in given.items()}
        slots = (*self._input_names, *self._output_names)
        for slot, need in enumerate(needs):  # the cotangents of the first adjoint's gradients
            if need:
                name = kernel.cotangents[first.gradients[slots[slot]]]
                like = self._grad_like(slot, values, initials, cotangents)
                g = gg[slot]
                planes[name] = (
                    torch.zeros(like.numel(), dtype=like.dtype, device=device)
                    if g is None
                    else contiguous(g.reshape(-1))
                )
        kinds = {p.name: p.kind for p in kernel.planes}
        made = {}
        for name in wrt:
            gradient = kernel.gradients[name]
            like = given[name]
            made[name] = planes[gradient] = (
                torch.empty(like.numel(), dtype=like.dtype, device=device)
                if kinds[gradient] == PlaneKind.OUTPUT
                else torch.zeros(like.numel(), dtype=real, device=device)
            )
        if adjoint.adds:
            refuse_nondeterminism(
                "the second-order backward of the eagle.torch op of hawk kernel "
                f"{self.kernel.name!r}",
                device,
            )
        names = tuple(p.name for p in kernel.planes)
        adjoint.runner.run(names, [planes[name] for name in names], device)
        for index, name in wanted.items():
            like = given[name]
            results[index] = rounded(made[name].reshape(like.shape), like.dtype)
        return results

    def _second_adjoint(self, first: hawk.diff.AdjointKernel, wrt: tuple[str, ...]) -> _Adjoint:
        try:
            kernel = hawk.diff.vjp(first, wrt, lane_gradients="store")
        except hawk.HawkError as exc:
            raise EagleRuntimeError(
                f"the eagle.torch op of hawk kernel {self.kernel.name!r} has no second "
                f"derivative with respect to {', '.join(wrt)}: hawk.diff cannot differentiate "
                f"its adjoint, {first.name!r} ({exc}). Take fewer derivatives (its gradient "
                "without create_graph=True or forward mode, or with fewer tensors requiring "
                "grad), or write the second derivative as a kernel of its own"
            ) from exc
        return self._looped(kernel)

    def _looped(
        self, kernel: hawk.diff.AdjointKernel, one: frozenset[str] = frozenset()
    ) -> _Adjoint:
        """``kernel`` (an adjoint) prepared to run on its own loop, under the forward plan's
        int and add policy, whatever policy is in force where the backward runs."""
        made = self.adjoint.primal.policy
        plan = eagle.plan.auto(
            kernel, contraction="loop", adds=made.adds, int_overflow=made.int_overflow
        )
        return _Adjoint(kernel, Runner(plan, one), _plane_names(kernel), adds(kernel, made.adds))

    def tangents(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        tangents: Sequence[Any],
        count: Any,
        dtype: torch.dtype,
        second: Callable[..., Sequence[Any]],
    ) -> tuple[Any, ...]:
        """Forward mode: each output's tangent for the tangents of the inputs and initial
        values (None: no tangent). The adjoint is linear in its cotangents, so the
        product of the Jacobian and the tangents is the gradient, with respect to the
        cotangents, of the adjoint's gradients dotted with the tangents: the second-order
        kernel, at zero cotangents."""
        device = first_tensor(values, initials).device
        zeros = [
            torch.zeros(
                count if p.kind == PlaneKind.OUTPUT else _shape(p), dtype=dtype, device=device
            )
            for p in self._outputs
        ]
        needs = [
            t is not None and gradient is not None
            for t, gradient in zip(tangents, self._slot_gradients, strict=True)
        ]
        results: list[Any] = [None] * len(self._outputs)
        if any(needs):
            wants = [False] * (len(values) + len(initials)) + [True] * len(zeros)
            gg = [t if need else None for t, need in zip(tangents, needs, strict=True)]
            present = [False] * len(zeros)  # (the cotangents here are the variables)
            results = list(second(values, initials, zeros, gg, needs, wants, present))[
                -len(zeros) :
            ]
        for position, plane in enumerate(self._outputs):
            tangent = tangents[len(values) + position]
            if plane.kind == PlaneKind.ACCUMULATOR and tangent is not None:  # adds pass it through
                passed = rounded(tangent.reshape(_shape(plane)), dtype)
                results[position] = (
                    passed if results[position] is None else results[position] + passed
                )
        return tuple(z if r is None else r for r, z in zip(results, zeros, strict=True))

    def gradient_tangents(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        cotangents: Sequence[Any],
        needs: Sequence[bool],
        zero: Sequence[bool],
        tangents: Sequence[Any],
        gradients: Callable[..., Sequence[Any]],
        second: Callable[..., Sequence[Any]],
    ) -> list[Any]:
        """Forward mode through the backward (forward-over-reverse, as ``torch.func.hessian``
        takes it): the tangent of each gradient ``needs`` asks for (None for the others),
        for the tangents of the inputs, initial values and cotangents. The gradients are
        linear in the cotangents, so their tangents' share is the backward itself at the
        cotangents' tangents; the inputs' share is the Hessian of the outputs dotted with
        the cotangents, which is symmetric, so it is the second-order backward with the
        inputs' tangents as the cotangents of the gradients. The outputs ``zero`` marks
        (their cotangents are zero constants, with no tangent) stay left out."""
        slots = len(self._slot_gradients)
        results: list[Any] = [None] * slots
        bar_tangents = tangents[slots:]
        if any(t is not None for t in bar_tangents):
            linear = [
                torch.zeros_like(bar) if t is None else t
                for t, bar in zip(bar_tangents, cotangents, strict=True)
            ]
            results = [
                g if need else None
                for g, need in zip(
                    gradients(values, initials, linear, needs, zero), needs, strict=True
                )
            ]
        taken = [
            t is not None and gradient is not None
            for t, gradient in zip(tangents[:slots], self._slot_gradients, strict=True)
        ]
        if any(taken):
            wants = [*needs, *(False for _ in cotangents)]
            gg = [t if take else None for t, take in zip(tangents[:slots], taken, strict=True)]
            curved = second(values, initials, cotangents, gg, taken, wants, zero)
            for slot in range(slots):
                if curved[slot] is not None:
                    results[slot] = (
                        curved[slot] if results[slot] is None else results[slot] + curved[slot]
                    )
        return [
            torch.zeros_like(self._grad_like(slot, values, initials, cotangents))
            if need and result is None
            else result
            for slot, (need, result) in enumerate(zip(needs, results, strict=True))
        ]


def _initials_read(
    kernel: hawk.Kernel, outputs: Sequence[Plane], reads: Sequence[bool]
) -> tuple[bool, ...]:
    """For each output, whether an adjoint may read its initial value: one the kernel
    reads before writing it (``reads``) that the whole adjoint takes (every adjoint with
    respect to fewer planes, and each of those adjoints' own, takes no more of them);
    where hawk cannot differentiate the kernel with respect to all of its planes at once,
    every one the kernel reads first."""
    if not any(reads):
        return tuple(reads)
    try:
        takes = _plane_names(hawk.diff.vjp(kernel))
    except hawk.HawkError:
        return tuple(reads)
    return tuple(read and p.name in takes for read, p in zip(reads, outputs, strict=True))


def _held(start: Any, bar: torch.Tensor) -> torch.Tensor:
    """The value an output held before the forward launch, as the kernel read it (its
    initial value in the output's dtype, the cotangent's; zeros when none was given)."""
    if start is None:
        return torch.zeros(bar.shape, dtype=bar.dtype, device=bar.device)
    return contiguous(start if start.dtype == bar.dtype else start.to(bar.dtype))


def _empty_as(tensor: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor of ``tensor``'s shape, dtype and device."""
    return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)


def _plane_names(kernel: hawk.Kernel) -> frozenset[str]:
    return frozenset(p.name for p in kernel.planes)


def _shape(plane: Plane) -> tuple[int, ...]:
    """The declared shape of an accumulator plane."""
    assert plane.shape is not None  # Function refuses a flat (axis-less) accumulator
    return plane.shape
