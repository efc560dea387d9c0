"""A hawk kernel as a differentiable PyTorch op: ``eagle.torch.function(kernel)``.

::

    f = eagle.torch.function(contract, contraction="gemm")
    y = f(w=w, f=features)          # a new tensor; y.sum().backward() fills w.grad

The call takes the kernel's input planes (``Scalar``, ``Table``, ``Param``)
as tensors (a ``Param`` also as a number) and, optionally, the initial
values of its ``Mutable[Scalar]`` planes, and returns the final values of
its ``Mutable`` planes as new tensors (one, or a tuple in declaration order).
It never writes into your tensors. CPU tensors run the kernel's host
program, CUDA tensors its device kernel (or the GEMM route) on torch's
current stream. Gradients come from the kernel's adjoint: :func:`hawk.diff.vjp` with
``lane_gradients="store"`` (and the summed outputs' cotangents read as one element) where
it runs its own loop, :func:`eagle.diff.reverse`'s gradient products on the GEMM route.

Each function is a ``torch.library.custom_op`` in the ``eagle`` namespace,
with a fake implementation and a registered autograd formula, so
``torch.compile(..., fullgraph=True)`` keeps it in one graph and
``torch.cuda.graph`` can capture its forward and backward.

Importing this module needs PyTorch; ``import eagle`` never imports it.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from typing import Any

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "eagle.torch needs PyTorch, which is not installed: install it with "
        "`pip install torch` (see https://pytorch.org for a CUDA build), then import eagle.torch"
    ) from exc

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from eagle._torch_runner import Runner
from hawk.contraction import lane_layout
from hawk.emit import policy
from hawk.ir import Plane

__all__ = ["Function", "function"]

_NAMESPACE = "eagle"
_FLOATS = (torch.float32, torch.float64)

_functions: weakref.WeakKeyDictionary[hawk.Kernel, dict[str, Function]] = (
    weakref.WeakKeyDictionary()
)
_op_names = itertools.count()
_constants: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}


def function(kernel: hawk.Kernel, contraction: str | None = None) -> Function:
    """The torch op of ``kernel``: call it with tensors, differentiate through it.

    Args:
        kernel: a ``@hawk.kernel``.
        contraction: ``"loop"`` or ``"gemm"`` (on CUDA tensors, a kernel that is
            one dense contraction then runs as one cuBLAS product, whatever dtype
            the op takes; CPU tensors run its loop); None for the current
            :func:`hawk.emit.policy.current` policy.

    Make it once, outside any ``torch.compile`` region (as you would make a
    module): choosing the op reads the current policy, which dynamo does not
    trace; calling the op inside a compiled function is what compiles.

    Returns:
        The :class:`Function`; the same one for the same kernel and policy.

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
        ValueError: ``contraction`` is not None, ``"loop"`` or ``"gemm"``; the
            kernel has a flat ``Mutable[Table]`` (declare its axes so the
            output's shape is known) or a plane named ``lanes``.
    """
    if not isinstance(kernel, hawk.Kernel):
        raise TypeError(
            f"eagle.torch.function takes a @hawk.kernel function, not {type(kernel).__name__}"
        )
    chosen = policy.current().contraction if contraction is None else contraction
    if chosen not in policy.CONTRACTIONS:
        raise ValueError(
            f"contraction must be None or one of {policy.CONTRACTIONS}, not {contraction!r}"
        )
    made = _functions.setdefault(kernel, {})
    if chosen not in made:
        made[chosen] = Function(kernel, chosen)
    return made[chosen]


class Function:
    """A hawk kernel as a torch op; made by :func:`function`.

    Call it with one keyword per input plane (and optionally per
    ``Mutable[Scalar]`` plane, its initial value; outputs not given start at
    zero), plus ``lanes=`` when no lane plane is given (a contraction whose
    lanes are its product knows its own).

    Attributes:
        kernel: the hawk kernel.
        plan: its :class:`eagle.plan.AutoPlan`.
        adjoint: ``eagle.diff.reverse(plan)``, which the backward runs on the GEMM
            route (on the loop route it runs ``hawk.diff.vjp(kernel, ...,
            lane_gradients="store")``, which needs no zeroed gradients).
        op: the forward ``torch.library`` op (``torch.ops.eagle.<name>``).
        backward_op: the op the backward calls.
    """

    def __init__(self, kernel: hawk.Kernel, contraction: str) -> None:
        planes = kernel.planes
        names = [p.name for p in planes]
        if "lanes" in names:
            raise ValueError(
                f"kernel {kernel.name!r} has a plane named 'lanes', which eagle.torch takes "
                "as the lane count; rename the plane"
            )
        flat = [p.name for p in planes if p.kind == "accumulator" and p.axes is None]
        if flat:
            raise ValueError(
                f"plane {flat[0]!r} of kernel {kernel.name!r} is a flat Mutable[Table], whose "
                "size eagle.torch cannot know; declare its axes (Mutable[Table['i':N]])"
            )
        self.kernel = kernel
        with policy.using(contraction=contraction):
            self.plan = eagle.plan.auto(kernel)
        self.adjoint = eagle.diff.reverse(self.plan)
        self._inputs = tuple(p for p in planes if p.kind in ("input", "param", "table"))
        self._outputs = tuple(p for p in planes if p.kind in ("output", "accumulator"))
        self._initials = tuple(p for p in self._outputs if p.kind == "output")
        gradients = hawk.diff.gradient_planes(kernel)
        self._read_first = tuple(p.name in gradients for p in self._initials)
        self._input_names = tuple(p.name for p in self._inputs)
        self._initial_names = tuple(p.name for p in self._initials)
        layout = lane_layout(kernel)
        # a contraction whose lanes are its product knows its lane count
        self._default_lanes = None if layout is None else layout.lanes
        self._params = tuple(i for i, p in enumerate(self._inputs) if p.kind == "param")
        self._lane_slots = tuple(i for i, p in enumerate(self._inputs) if p.kind == "input")
        # the gradient plane of each differentiable slot (inputs, then initial values)
        self._gradient_names = (
            *(gradients[name] for name in self._input_names),
            *(gradients.get(name) for name in self._initial_names),
        )
        self._forward_names = (*self._input_names, *(p.name for p in self._outputs))
        self._forward_runner = Runner(self.plan)
        self._backward_runners: dict[tuple, Runner] = {}
        self._adjoint_route: dict[tuple[str, torch.dtype], bool] = {}
        # which differentiable slots have per-lane gradients (an adjoint can write those)
        self._lane_gradient = (
            *(p.kind == "input" for p in self._inputs),
            *(True for _ in self._initials),
        )
        name = f"{kernel.name}_{contraction}_{next(_op_names)}"
        self.op = self._register_forward(name)
        self.backward_op = self._register_backward(f"{name}_backward")

    def __repr__(self) -> str:
        return f"Function({self.kernel.name}, contraction={self.plan.policy.contraction!r})"

    def __call__(self, lanes: int | None = None, **planes: Any) -> Any:
        """Run the kernel: its Mutable planes' final values, one tensor or a tuple.

        Raises:
            TypeError: a missing, unknown or misplaced plane; a number for a
                plane that is not a Param; no lane plane and no ``lanes``;
                a tensor that is not float32 or float64.
        """
        try:
            values = [planes.pop(name) for name in self._input_names]
        except KeyError as missing:
            raise TypeError(
                f"missing plane {missing.args[0]!r} of kernel {self.kernel.name!r}; pass "
                f"{', '.join(self._input_names)} (and optionally {', '.join(self._initial_names)})"
            ) from None
        initials = [planes.pop(name, None) for name in self._initial_names]
        if planes:
            unknown = next(iter(planes))
            raise TypeError(
                f"kernel {self.kernel.name!r} takes no plane {unknown!r}; its inputs are "
                f"{', '.join(self._input_names)} and its initial values "
                f"{', '.join(self._initial_names) or '(none)'}"
            )
        self._check(values, initials, lanes)
        if self._params:
            self._numbers_to_tensors(values, initials)
        if lanes is None:
            lanes = -1 if self._default_lanes is None else self._default_lanes
        if _eager(values, initials):
            if _recorded(values, initials):
                return _EagerOp.apply(self, *values, *initials, lanes)
            return self._forward(*values, *initials, lanes)  # no gradient to record
        return self.op(*values, *initials, lanes)

    # -- the call's checks -------------------------------------------------------------

    def _check(self, values: list[Any], initials: list[Any], lanes: int | None) -> None:
        for plane, value in zip(self._inputs, values, strict=True):
            if isinstance(value, torch.Tensor):
                if value.dtype not in _FLOATS:
                    raise TypeError(
                        f"plane {plane.name!r} is a {value.dtype} tensor; hawk planes are "
                        "float32 or float64 (convert it with .float() or .double())"
                    )
            elif plane.kind != "param" or not isinstance(value, int | float):
                raise TypeError(
                    f"plane {plane.name!r} ({plane.declaration()}) is a {type(value).__name__}; "
                    f"pass a tensor{' or a number' if plane.kind == 'param' else ''}"
                )
        for name, value in zip(self._initial_names, initials, strict=True):
            if value is not None and (
                not isinstance(value, torch.Tensor) or value.dtype not in _FLOATS
            ):
                raise TypeError(
                    f"the initial value of {name!r} must be a float32 or float64 tensor, not "
                    f"{getattr(value, 'dtype', type(value).__name__)}"
                )
        if self._lane_slots or any(v is not None for v in initials):
            return
        if lanes is None and self._default_lanes is None:
            raise TypeError(
                f"kernel {self.kernel.name!r} has no lane plane among those given; pass lanes=N"
            )

    def _numbers_to_tensors(self, values: list[Any], initials: list[Any]) -> None:
        tensors = [v for v in (*values, *initials) if isinstance(v, torch.Tensor)]
        if not tensors:
            raise TypeError(
                f"pass at least one plane of kernel {self.kernel.name!r} as a tensor; its "
                "device is where the kernel runs"
            )
        dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
        for slot in self._params:
            if not isinstance(values[slot], torch.Tensor):
                values[slot] = _constant(float(values[slot]), dtype, tensors[0].device)

    # -- the ops -----------------------------------------------------------------------

    def _register_forward(self, name: str) -> Any:
        inputs = ", ".join(f"Tensor {n}" for n in self._input_names)
        initials = "".join(f", Tensor? {n}" for n in self._initial_names)
        results = ", ".join("Tensor" for _ in self._outputs)
        schema = f"({inputs}{initials}, SymInt lanes) -> ({results})"
        op = _custom_op(name, self._forward, schema, self._forward_fake)
        op.register_autograd(self._backward, setup_context=self._setup_context)
        return op

    def _register_backward(self, name: str) -> Any:
        primal = ", ".join(f"Tensor {n}" for n in self._input_names)
        initials = "".join(f", Tensor? {n}" for n in self._initial_names)
        cotangents = "".join(f", Tensor {p.name}_bar" for p in self._outputs)
        results = ", ".join("Tensor" for _ in self._gradient_names)
        schema = f"({primal}{initials}{cotangents}, bool[] needs) -> ({results})"
        return _custom_op(name, self._gradients, schema, self._gradients_fake)

    def _split(self, args: Sequence[Any]) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any]]:
        count = len(self._inputs)
        end = count + len(self._initials)
        return args[:count], args[count:end], args[end:]

    def _layout(self, values: Sequence[Any], initials: Sequence[Any], lanes: Any) -> tuple:
        """The outputs' dtype, device and lane count for these arguments."""
        tensors = [t for t in (*values, *initials) if t is not None]
        dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
        lane_tensors = [values[i] for i in self._lane_slots] + [
            t for t in initials if t is not None
        ]
        count = lane_tensors[0].numel() if lane_tensors else lanes
        return dtype, tensors[0].device, count

    def _empty_outputs(self, values: Sequence[Any], initials: Sequence[Any], lanes: Any) -> list:
        dtype, device, count = self._layout(values, initials, lanes)
        return [
            torch.empty(
                count if p.kind == "output" else _accumulator_shape(p), dtype=dtype, device=device
            )
            for p in self._outputs
        ]

    def _forward_fake(self, *args: Any) -> Any:
        values, initials, (lanes,) = self._split(args)
        outputs = self._empty_outputs(values, initials, lanes)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _forward(self, *args: Any) -> Any:
        values, initials, (lanes,) = self._split(args)
        dtype, device, count = self._layout(values, initials, lanes)
        starts = iter(zip(initials, self._read_first, strict=True))
        outputs = []
        for plane in self._outputs:
            if plane.kind == "accumulator":
                outputs.append(torch.zeros(_accumulator_shape(plane), dtype=dtype, device=device))
                continue
            start, read_first = next(starts)
            if start is not None:
                out = start.to(dtype=dtype, memory_format=torch.contiguous_format, copy=True)
            else:
                out = (torch.zeros if read_first else torch.empty)(
                    count, dtype=dtype, device=device
                )
            outputs.append(out)
        tensors = [*map(_contiguous, values), *outputs]
        self._forward_runner.run(self._forward_names, tensors, device)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _setup_context(self, ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        values, initials, _ = self._split(inputs)
        ctx.save_for_backward(*values, *initials)

    def _backward(self, ctx: Any, *cotangents: Any) -> tuple[Any, ...]:
        slots = len(self._gradient_names)
        needs = self._needed(ctx.needs_input_grad)
        grads: list[Any] = [None] * (slots + 1)  # the last argument is the lane count
        if not any(needs):
            return tuple(grads)
        computed = self.backward_op(*ctx.saved_tensors, *cotangents, needs)
        for slot, need in enumerate(needs):
            if need:
                grads[slot] = computed[slot]
        return tuple(grads)

    def _needed(self, needs_input_grad: Sequence[bool]) -> list[bool]:
        """Which differentiable slots need a gradient (and have a gradient plane)."""
        return [
            bool(need) and gradient is not None
            for need, gradient in zip(
                needs_input_grad[: len(self._gradient_names)], self._gradient_names, strict=True
            )
        ]

    def _gradients_fake(self, *args: Any) -> tuple[Any, ...]:
        values, initials, rest = self._split(args)
        *_, needs = rest
        return tuple(
            torch.empty_like(self._grad_like(slot, values, initials, rest))
            if need
            else values[0].new_empty(0)
            for slot, need in enumerate(needs)
        )

    def _grad_like(
        self, slot: int, values: Sequence[Any], initials: Sequence[Any], cotangents: Sequence[Any]
    ) -> Any:
        """The tensor the gradient of differentiable slot ``slot`` is shaped like."""
        if slot < len(values):
            return values[slot]
        position = slot - len(values)
        if initials[position] is not None:
            return initials[position]
        output = self._outputs.index(self._initials[position])
        return cotangents[output]  # its cotangent, when no initial value was given

    def _gradients(self, *args: Any) -> tuple[Any, ...]:
        """The backward op: a tensor per differentiable slot (empty where not needed)."""
        values, initials, rest = self._split(args)
        *cotangents, needs = rest
        computed = self._computed_gradients(values, initials, cotangents, needs)
        return tuple(values[0].new_empty(0) if g is None else g for g in computed)

    def _computed_gradients(
        self,
        values: Sequence[Any],
        initials: Sequence[Any],
        cotangents: Sequence[Any],
        needs: Sequence[bool],
    ) -> list[Any]:
        """The gradient of each differentiable slot that ``needs`` asks for (None for the
        others), made by one launch of the adjoint."""
        device = values[0].device if values else cotangents[0].device
        dtype = torch.float64 if any(v.dtype == torch.float64 for v in values) else torch.float32
        # An adjoint that runs its own loop is specialised for a fresh call: it writes the
        # lane gradients (no zeroing first) and reads a broadcast cotangent (the gradient
        # of a sum) as its one element (no copy). The GEMM route adds into zeroed planes.
        fresh = self._adjoint_loops(device, dtype)
        names: list[str] = []
        tensors: list[Any] = []
        for plane, value in zip(self._inputs, values, strict=True):
            names.append(plane.name)
            tensors.append(_contiguous(value))
        for plane, start, read_first in zip(
            self._initials, initials, self._read_first, strict=True
        ):
            if read_first:
                bar = cotangents[self._outputs.index(plane)]
                names.append(plane.name)
                tensors.append(torch.zeros_like(bar) if start is None else _contiguous(start))
        broadcast = []
        for plane, bar in zip(self._outputs, cotangents, strict=True):
            names.append(f"{plane.name}_bar")
            # (the adjoint needs a lane plane left to count its lanes: a Scalar input)
            if (
                fresh
                and self._lane_slots
                and plane.kind == "output"
                and bar.stride(0) == 0
                and bar.numel()  # zero lanes: no element to read
            ):
                broadcast.append(plane.name)  # the runner reads it as its one element
                tensors.append(bar)
            else:
                tensors.append(_contiguous(bar))
        results: list[Any] = []
        for slot, need in enumerate(needs):
            if not need:
                results.append(None)
                continue
            name = self._gradient_names[slot]
            if name is None:
                raise ValueError(
                    f"needs[{slot}] is True, but the kernel never reads the initial value of "
                    f"output {self._initial_names[slot - len(values)]!r}, so it has no "
                    "gradient; pass False there"
                )
            like = self._grad_like(slot, values, initials, cotangents)
            written = fresh and self._lane_gradient[slot]
            make = torch.empty_like if written else torch.zeros_like
            gradient = make(like, memory_format=torch.contiguous_format)
            names.append(name)
            tensors.append(gradient)
            results.append(gradient)
        key = (tuple(needs), fresh, tuple(broadcast))
        runner = self._backward_runners.get(key)
        if runner is None:
            runner = self._backward_runners[key] = self._backward_runner(needs, fresh, broadcast)
        runner.run(tuple(names), tensors, device)
        return results

    def _adjoint_loops(self, device: torch.device, dtype: torch.dtype) -> bool:
        """True when the adjoint over tensors of ``dtype`` on ``device`` runs its own loop."""
        key = (device.type, dtype)
        loops = self._adjoint_route.get(key)
        if loops is None:
            side = "device" if device.type == "cuda" else "host"
            name = "float64" if dtype == torch.float64 else "float32"
            loops = self._adjoint_route[key] = self.adjoint.route(side, name) == "loop"
        return loops

    def _backward_runner(self, needs: Sequence[bool], fresh: bool, broadcast: list[str]) -> Runner:
        """The runner of the adjoint for these needs: ``eagle.diff.reverse``'s (which
        adds into the gradients) or, for a fresh call, the adjoint kernel that writes
        them, with ``broadcast`` outputs' cotangents read as one element."""
        if not fresh:
            return Runner(self.adjoint)
        names = self._input_names + self._initial_names
        wrt = [names[slot] for slot, need in enumerate(needs) if need]
        kernel = hawk.diff.vjp(self.kernel, wrt, lane_gradients="store", broadcast=broadcast)
        one = frozenset(kernel.cotangents[name] for name in broadcast)
        return Runner(eagle.plan.auto(kernel, contraction="loop"), one)


def _custom_op(name: str, function: Any, schema: str, fake: Any) -> Any:
    """``function`` registered as the op ``eagle::<name>`` of ``schema``, with its fake."""
    op = torch.library.custom_op(f"{_NAMESPACE}::{name}", function, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op


def _eager(values: Sequence[Any], initials: Sequence[Any]) -> bool:
    """True when a call may skip torch's op dispatch: eager mode, plain tensors, and
    no torch function or dispatch mode, fake tensors or functorch transform active."""
    if (
        torch.compiler.is_compiling()
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._are_functorch_transforms_active()
    ):
        return False
    return all(type(t) in _PLAIN for t in (*values, *initials) if t is not None)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _recorded(values: Sequence[Any], initials: Sequence[Any]) -> bool:
    """True when autograd records the call: gradients are on and a tensor requires one."""
    return torch.is_grad_enabled() and any(
        t.requires_grad for t in (*values, *initials) if t is not None
    )


class _EagerOp(torch.autograd.Function):
    """The op's eager path: the same forward and gradients as the registered op,
    without torch's custom-op dispatch (which costs more than the launch)."""

    @staticmethod
    def forward(ctx: Any, function: Function, *args: Any) -> Any:
        ctx.function = function
        values, initials, _ = function._split(args)
        ctx.save_for_backward(*values, *initials)
        return function._forward(*args)

    @staticmethod
    def backward(ctx: Any, *cotangents: Any) -> tuple[Any, ...]:
        function = ctx.function
        needs = function._needed(ctx.needs_input_grad[1:])
        grads: list[Any] = [None] * (len(ctx.needs_input_grad))
        if any(needs):
            values, initials, _ = function._split(ctx.saved_tensors)
            computed = function._computed_gradients(values, initials, cotangents, needs)
            grads[1 : 1 + len(computed)] = computed  # None where not needed
        return tuple(grads)


def _constant(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A one-element tensor holding ``value``, made once per value, dtype and device
    in eager mode (made afresh while compiling or capturing a graph)."""
    if torch.compiler.is_compiling():
        return torch.full((1,), value, dtype=dtype, device=device)
    key = (value, dtype, device)
    tensor = _constants.get(key)
    if tensor is None:
        tensor = torch.full((1,), value, dtype=dtype, device=device)
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if not capturing:
            _constants[key] = tensor
    return tensor


def _contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself when it is contiguous (no torch call), else a contiguous copy."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _accumulator_shape(plane: Plane) -> tuple[int, ...]:
    """The declared shape of an accumulator plane."""
    assert plane.shape is not None  # Function refuses a flat (axis-less) accumulator
    return plane.shape
