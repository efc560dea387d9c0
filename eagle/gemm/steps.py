"""Plans of named buffers and steps: what a plan declares, validates and binds.

A :class:`LoweredPlan` is an ordered list of :class:`PlanStep` over named
buffers, each declared by a :class:`WorkspaceSpec`; a matmul step carries the
:class:`MatmulSpec` of its product. Building a plan validates it; calling it
checks every bound buffer against its spec and runs the steps. The steps'
host and device functions live elsewhere (:mod:`eagle.gemm.matmul` for
products); nothing here touches a device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from eagle.cuda.stream import launch_stream
from eagle.errors import EagleTypeError, check_option
from eagle.gemm._operands import Operand, bump_written, operand, ordered
from eagle.gemm.dtypes import SCALED_DTYPES, dtype_of, product_dtypes
from eagle.gemm.errors import GemmMappingUnavailable, MatmulUnavailable, PlanUnavailable
from eagle.gemm.params import _mapped, _shares_memory, check_scaled_layout, product_shape

__all__ = [
    "BACKENDS",
    "STEP_KINDS",
    "LoweredPlan",
    "MatmulSpec",
    "PlanStep",
    "Side",
    "StepFn",
    "StepKind",
    "WorkspaceSpec",
    "assembly_step",
]

Side = Literal["host", "device"]
"""Where a step, a plan or a launch runs (numpy on the host, or the device)."""

BACKENDS: tuple[Side, ...] = get_args(Side)
"""Where a step or plan runs."""

StepKind = Literal["generated", "matmul", "assembly"]
"""What a plan step is (a kernel emitted for the plan, a matrix product, or a step that
arranges buffers)."""

STEP_KINDS: tuple[StepKind, ...] = get_args(StepKind)
"""A kernel emitted for the plan, a matrix product, or a step that arranges buffers."""

StepFn = Callable[[Mapping[str, Any]], None]
"""A step's host or device function, which takes the bound buffers by name."""


@dataclass(frozen=True)
class WorkspaceSpec:
    """A buffer a plan reads or writes.

    Attributes:
        name: the buffer's name in the plan.
        shape: its shape, a tuple of non-negative ints.
        dtype: its dtype name, e.g. ``"float32"`` or ``"bfloat16"`` (anything
            ``numpy.dtype`` takes is accepted and stored by name).

    Raises:
        PlanUnavailable: a negative or non-integer extent, or an unknown dtype.
        TypeError: a name that is not a str.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise EagleTypeError(f"a buffer's name is a str, not {self.name!r}")
        try:
            # (a bool is no extent: the comprehension's int() would read True as 1)
            shape = tuple(
                int(extent) if not isinstance(extent, bool | np.bool_) else -1
                for extent in self.shape
            )
            dtype = dtype_of(self.dtype).name if self.dtype is not None else None
        except (TypeError, ValueError) as exc:
            raise PlanUnavailable(
                f"buffer {self.name!r}: shape must be a tuple of ints and dtype a numpy dtype "
                f"name, not {self.shape!r} and {self.dtype!r}"
            ) from exc
        if dtype is None:
            raise PlanUnavailable(f"buffer {self.name!r}: give a dtype, e.g. 'float32'")
        if any(extent < 0 for extent in shape) or shape != tuple(self.shape):
            raise PlanUnavailable(
                f"buffer {self.name!r}: shape {tuple(self.shape)!r} must hold non-negative ints"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)


@dataclass(frozen=True)
class MatmulSpec:
    """The product a matmul step computes: ``out = op(a) @ op(b)`` over named buffers.

    Attributes:
        a: the name of the left operand's buffer.
        b: the name of the right operand's buffer.
        out: the name of the destination's buffer.
        transpose_a: ``op(a)`` is ``a.T`` when set.
        transpose_b: ``op(b)`` is ``b.T`` when set.
        transpose_out: ``out`` holds the product transposed.
        a_scale: the name of ``a``'s per-tensor scale (a one-element float32 buffer),
            or None: fp8 factors only, ``out = (a_scale * b_scale) * op(a) @ op(b)``.
        b_scale: the name of ``b``'s scale, or None.
    """

    a: str
    b: str
    out: str
    transpose_a: bool = False
    transpose_b: bool = False
    transpose_out: bool = False
    a_scale: str | None = None
    b_scale: str | None = None

    @property
    def scales(self) -> dict[str, str]:
        """The scale buffers' names by role (``"a_scale"``, ``"b_scale"``), those given."""
        named = {"a_scale": self.a_scale, "b_scale": self.b_scale}
        return {role: name for role, name in named.items() if name is not None}


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan.

    Equality and hashing ignore the callables and ``matmul``.

    Attributes:
        name: the step's name, unique in its plan.
        kind: ``"generated"``, ``"matmul"`` or ``"assembly"`` (see :data:`STEP_KINDS`).
        reads: names of the buffers it reads.
        writes: names of the buffers it writes.
        device_fn: runs the step on the device, given the buffers by name.
        host_fn: runs the step on the host, given the buffers by name.
        matmul: the :class:`MatmulSpec` of a ``"matmul"`` step (None otherwise).

    Raises:
        PlanUnavailable: an unknown kind, or a matmul step without a spec
            (or another kind with one).
        TypeError: names that are not a sequence of strings, or a function
            that is not callable.
    """

    name: str
    kind: StepKind
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    device_fn: StepFn = field(compare=False, repr=False)
    host_fn: StepFn = field(compare=False, repr=False)
    matmul: MatmulSpec | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise EagleTypeError(f"a step's name is a str, not {type(self.name).__name__}")
        if self.kind not in STEP_KINDS:
            raise PlanUnavailable(
                f"step {self.name!r}: kind must be one of {STEP_KINDS}, not {self.kind!r}"
            )
        if (self.kind == "matmul") != (self.matmul is not None):
            raise PlanUnavailable(
                f"step {self.name!r}: a 'matmul' step carries a MatmulSpec and no other kind "
                f"does (kind {self.kind!r}, matmul {self.matmul!r})"
            )
        for label in ("reads", "writes"):
            object.__setattr__(self, label, _names(self.name, label, getattr(self, label)))
        for label in ("device_fn", "host_fn"):
            if not callable(getattr(self, label)):
                raise EagleTypeError(
                    f"step {self.name!r}: {label} must be callable (a function of the buffers "
                    f"by name), not {type(getattr(self, label)).__name__}"
                )

    def run(self, bufs: Mapping[str, Any], backend: Side) -> None:
        """Run the step on ``backend`` over ``bufs`` (buffers by name), in place.

        Args:
            bufs: the buffers by name: for ``"host"`` numpy arrays, host eagle
                Arrays or CPU torch tensors; for ``"device"`` device arrays of any
                producer (eagle, torch, CuPy, CUDA array interface, DLPack).
            backend: ``"host"`` or ``"device"``. On the device the step only
                enqueues work, on the stream ``plan.run`` would use, after the work
                the buffers' producers queued.

        Raises:
            ValueError: an unknown backend.
            TypeError: ``bufs`` is not a mapping.
            MatmulUnavailable: (a matmul step) a buffer is missing, on the wrong
                side, of dtypes no product takes (:mod:`eagle.gemm.dtypes`), of the
                wrong shape, (host) a read-only ``out``, or (device) laid out
                so cuBLAS cannot address it or an ``out`` sharing memory with
                an operand.
            GemmCaptureUnavailable: (a matmul step, device) no driver or cuBLAS.
        """
        if backend == "device":  # (the common case first, with one test)
            function = self.device_fn
        else:
            _check_backend(backend)  # "host", or refused naming both
            function = self.host_fn
        if type(bufs) is not dict:  # (a dict needs no check: the common case, inline)
            _check_mapping("bufs", bufs)
        function(bufs)


def assembly_step(
    name: str,
    *,
    reads: Sequence[str],
    writes: Sequence[str],
    host_fn: StepFn,
    device_fn: StepFn,
) -> PlanStep:
    """A step that arranges buffers around the products (a fill, a copy, a sum).

    Args:
        name: the step's name.
        reads: names of the buffers it reads.
        writes: names of the buffers it writes.
        host_fn: does it on the host, given the buffers by name.
        device_fn: enqueues it on the device (on eagle's current stream, so it
            can be captured), given the buffers by name.

    Raises:
        TypeError: as :class:`PlanStep`.
    """
    return PlanStep(
        name,
        "assembly",
        _names(name, "reads", reads),
        _names(name, "writes", writes),
        device_fn,
        host_fn,
    )


@dataclass(frozen=True)
class LoweredPlan:
    """Steps over declared buffers, validated when built.

    Every buffer a step reads is an input or was written by an earlier step;
    every buffer a step writes is an output or a workspace; every output is
    written; matmul steps' buffers are 2-D, of one float dtype, with shapes that
    agree. Call it as ``plan(backend, buffers)``.

    Attributes:
        steps: the :class:`PlanStep` in order.
        mechanism: how it computes, e.g. ``"gemm"`` or ``"gemv"`` (a product
            against a ones vector).
        determinism: what repeats, e.g. ``"run_to_run"``: two runs on one
            device and one library build give the same bits.
        inputs: the buffers it only reads.
        outputs: the buffers it writes for the caller.
        workspaces: scratch buffers the caller provides.

    Raises:
        PlanUnavailable: a rule above is broken, a name is declared twice, or
            two steps share a name.
        TypeError: a step that is not a :class:`PlanStep`, or a buffer not
            declared by a :class:`WorkspaceSpec`.
    """

    steps: tuple[PlanStep, ...]
    mechanism: str
    determinism: str
    inputs: tuple[WorkspaceSpec, ...]
    outputs: tuple[WorkspaceSpec, ...]
    workspaces: tuple[WorkspaceSpec, ...] = ()

    def __post_init__(self) -> None:
        for label in ("steps", "inputs", "outputs", "workspaces"):
            given = getattr(self, label)
            if isinstance(given, str | PlanStep | WorkspaceSpec) or not isinstance(given, Iterable):
                raise EagleTypeError(
                    f"{label} must be a sequence (of "
                    f"{'PlanStep' if label == 'steps' else 'WorkspaceSpec'}), not {given!r}"
                )
            object.__setattr__(self, label, tuple(given))
        _validate(self)

    @property
    def required(self) -> dict[str, WorkspaceSpec]:
        """Every buffer the caller binds, by name (inputs, then outputs, then workspaces)."""
        return {spec.name: spec for spec in self.inputs + self.outputs + self.workspaces}

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kind of each step, in order."""
        return tuple(step.kind for step in self.steps)

    def subplan(self, outputs: Iterable[str]) -> LoweredPlan:
        """The steps that ``outputs`` need, as a plan of its own.

        It keeps each step that writes one of ``outputs`` or a buffer a kept
        step reads, and declares only the buffers those steps touch; so an
        adjoint asked for one gradient binds and computes only that one.

        Args:
            outputs: names of outputs of this plan.

        Raises:
            TypeError: ``outputs`` is one string, not a collection of names.
            PlanUnavailable: a name that is not one of this plan's outputs.
        """
        if isinstance(outputs, str):
            raise EagleTypeError(f"outputs must be a collection of names, e.g. [{outputs!r}]")
        wanted = set(outputs)
        declared = [spec.name for spec in self.outputs]
        unknown = sorted(wanted.difference(declared))
        if unknown:
            raise PlanUnavailable(
                f"{unknown} are not outputs of this plan; its outputs are {declared}"
            )
        kept: list[PlanStep] = []
        for step in reversed(self.steps):
            if wanted.intersection(step.writes):
                kept.append(step)
                wanted.update(step.reads)
        kept.reverse()
        touched = {name for step in kept for name in step.reads + step.writes}
        return LoweredPlan(
            tuple(kept),
            self.mechanism,
            self.determinism,
            tuple(spec for spec in self.inputs if spec.name in touched),
            tuple(spec for spec in self.outputs if spec.name in touched),
            tuple(spec for spec in self.workspaces if spec.name in touched),
        )

    def __call__(self, backend: Side, buffers: Mapping[str, Any]) -> None:
        """Run every step on ``backend`` over ``buffers``, writing outputs in place.

        Each buffer is checked against its spec first; nothing is allocated. A
        buffer of the declared shape is used as it is; a contiguous 1-D buffer
        with as many elements (a lane plane, say) is seen in the declared shape
        without a copy.

        Args:
            backend: ``"host"`` or ``"device"``.
            buffers: by name; for the host, numpy arrays, host eagle Arrays or
                CPU torch tensors; for the device, device arrays of any producer
                (eagle Arrays, torch tensors, CuPy arrays, CUDA array interface or
                DLPack objects), all on one device. Torch tensors the plan writes
                have their versions bumped.

        On the host, a call that raises leaves every buffer as it was (the steps'
        writes are undone); on the device the steps are enqueued one after another.

        Raises:
            ValueError: an unknown backend.
            TypeError: ``buffers`` is not a mapping.
            MatmulUnavailable: a buffer is missing, on the wrong side or device,
                or of another dtype or shape than its spec; one neither side takes
                (non-native byte order, a null or misaligned address, a written
                buffer that is read-only or a torch tensor that requires grad); or
                a step refused.
        """
        device = backend == "device"
        bound, taken = _bind_buffers(self, buffers, backend, MatmulUnavailable, sync=device)
        if device and bound:  # the producers' queued work comes first
            arrays = tuple(bound.values())
            ordered(taken.values(), launch_stream(arrays, arrays[0].device_index))
        if device:
            for step in self.steps:
                step.run(bound, backend)
        else:
            _run_host_steps(self.steps, bound)
        for spec in self.outputs + self.workspaces:
            bump_written(taken[spec.name])  # torch tensors written: their versions go up


def _run_host_steps(steps: Sequence[PlanStep], bound: dict[str, Any]) -> None:
    """Run ``steps`` on the host over ``bound``; if one raises (a step of your own, say),
    write back what the earlier ones wrote, so that a call that raises changes nothing."""
    if len(steps) == 1 and steps[0].kind == "matmul":  # (checks all, then writes)
        steps[0].run(bound, "host")
        return
    written = dict.fromkeys(name for step in steps for name in step.writes)
    saved = [(np.asarray(bound[name]), np.array(bound[name], copy=True)) for name in written]
    try:
        for step in steps:
            step.run(bound, "host")
    except BaseException:
        for array, before in saved:
            np.copyto(array, before)
        raise


# --- plan validation and binding -------------------------------------------------------------


def _names(step: str, label: str, names: Any) -> tuple[str, ...]:
    taken = tuple(names) if isinstance(names, Iterable) and not isinstance(names, str) else None
    if taken is None or not all(isinstance(name, str) for name in taken):
        raise EagleTypeError(
            f"step {step!r}: {label} must be a sequence of buffer names, not {names!r}"
        )
    return taken


def _validate(plan: LoweredPlan) -> None:
    specs = plan.inputs + plan.outputs + plan.workspaces
    for spec in specs:
        if not isinstance(spec, WorkspaceSpec):
            raise EagleTypeError(f"buffers are declared with WorkspaceSpec, not {spec!r}")
    declared: dict[str, WorkspaceSpec] = {}
    for spec in specs:
        if spec.name in declared:
            raise PlanUnavailable(f"buffer {spec.name!r} is declared twice")
        declared[spec.name] = spec
    inputs = {spec.name for spec in plan.inputs}
    writable = {spec.name for spec in plan.outputs + plan.workspaces}
    written: set[str] = set()
    step_names: set[str] = set()
    for step in plan.steps:
        if not isinstance(step, PlanStep):
            raise EagleTypeError(f"plan steps are PlanStep, not {step!r}")
        if step.name in step_names:
            raise PlanUnavailable(f"two steps are named {step.name!r}")
        step_names.add(step.name)
        for name in step.reads:
            if name in writable and name not in written:
                raise PlanUnavailable(f"step {step.name!r} reads {name!r} before a step writes it")
            if name not in inputs | writable:
                raise PlanUnavailable(
                    f"step {step.name!r} reads {name!r}, which the plan does not declare"
                )
        for name in step.writes:
            if name not in writable:
                what = "an input" if name in inputs else "not declared"
                raise PlanUnavailable(
                    f"step {step.name!r} writes {name!r}, which is {what}; declare it as an "
                    f"output or a workspace"
                )
        written.update(step.writes)
        if step.matmul is not None:
            _check_matmul_specs(step.name, step.matmul, declared)
    for spec in plan.outputs:
        if spec.name not in written:
            raise PlanUnavailable(f"output {spec.name!r} is never written")


def _check_matmul_specs(step: str, spec: MatmulSpec, declared: Mapping[str, WorkspaceSpec]) -> None:
    a, b, out = declared[spec.a], declared[spec.b], declared[spec.out]
    try:
        dtype = product_dtypes(a.dtype, b.dtype, out.dtype)[0]
    except GemmMappingUnavailable as exc:
        raise PlanUnavailable(
            f"matmul step {step!r}: buffers {a.name!r}, {b.name!r}, {out.name!r} are declared "
            f"{a.dtype}, {b.dtype}, {out.dtype}; {exc}"
        ) from None
    for role, name in spec.scales.items():
        scale = declared[name]
        if dtype not in SCALED_DTYPES:
            raise PlanUnavailable(
                f"matmul step {step!r}: {role} {name!r} scales a {dtype} product; per-tensor "
                f"scales are for fp8 factors ({', '.join(SCALED_DTYPES)}); leave it out"
            )
        if scale.dtype != "float32" or math.prod(scale.shape) != 1:
            raise PlanUnavailable(
                f"matmul step {step!r}: {role} {name!r} is declared {scale.dtype} of shape "
                f"{scale.shape}; a scale is one float32 element, e.g. shape (1,)"
            )
    want = _out_shape(step, spec, a.shape, b.shape, PlanUnavailable)
    if out.shape != want:
        raise PlanUnavailable(
            f"matmul step {step!r}: out {out.name!r} is declared {out.shape}; it must be {want}"
        )
    if dtype in SCALED_DTYPES:
        _check_scaled_specs(step, spec, {"a": a, "b": b, "out": out})


def _check_scaled_specs(step: str, spec: MatmulSpec, specs: Mapping[str, WorkspaceSpec]) -> None:
    """Refuse, when the plan is built, an fp8 step whose declared buffers (C-ordered) have a
    layout fp8 products do not take, so no run stops after earlier steps wrote."""
    itemsizes = {role: dtype_of(specs[role].dtype).itemsize for role in specs}
    shapes = {role: specs[role].shape for role in specs}
    strides = {
        role: (shape[1] * itemsizes[role], itemsizes[role]) for role, shape in shapes.items()
    }
    flags = (spec.transpose_a, spec.transpose_b, spec.transpose_out)
    try:
        check_scaled_layout(_mapped(shapes, strides, itemsizes, flags), itemsizes["out"])
    except GemmMappingUnavailable as exc:
        raise PlanUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from None


def _out_shape(
    step: str,
    spec: MatmulSpec,
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    error: type[Exception],
    *,
    cublas: bool = True,
) -> tuple[int, int]:
    """The shape a matmul step's ``out`` must have, or ``error`` naming the step's buffers
    (``cublas=False``: on the host, where extents have no 32-bit limit)."""
    try:
        return product_shape(
            a_shape, b_shape,
            transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
            transpose_out=spec.transpose_out, cublas=cublas,
        )  # fmt: skip
    except GemmMappingUnavailable as exc:
        raise error(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc


def _roles(spec: MatmulSpec) -> str:
    return f"a={spec.a!r}, b={spec.b!r}, out={spec.out!r}"


def _bind_buffers(
    plan: LoweredPlan,
    buffers: Mapping[str, Any],
    backend: str,
    error: type[Exception],
    *,
    sync: bool = False,
) -> tuple[dict[str, Any], dict[str, Operand]]:
    """Each buffer the plan needs as ``backend`` takes it, checked against its spec (the
    arrays the steps run over), and how each was taken (``sync``: for work on a stream)."""
    _check_backend(backend)
    _check_mapping("buffers", buffers)
    bound: dict[str, Any] = {}
    taken: dict[str, Operand] = {}
    devices: dict[int, str] = {}
    required = plan.required
    written = {spec.name for spec in plan.outputs + plan.workspaces}
    for spec in required.values():
        if spec.name not in buffers:
            raise error(f"buffer {spec.name!r} is not bound; the plan needs {list(required)}")
        item = operand(
            buffers[spec.name], f"buffer {spec.name!r}", side=backend,
            written=spec.name in written, error=error, sync=sync, where=_where,
        )  # fmt: skip
        taken[spec.name] = item
        bound[spec.name] = _fit(spec, item.array, error)
        if backend == "device":
            devices.setdefault(item.array.device_index, spec.name)
    if len(devices) > 1:
        where = ", ".join(f"{name!r} on cuda:{index}" for index, name in devices.items())
        raise error(f"the buffers are on different devices ({where}); put them on one device")
    for name in written:
        for other, array in bound.items():
            if other != name and _shares_memory(bound[name], array):
                raise error(
                    f"buffers {name!r} and {other!r} share memory, and the plan writes "
                    f"{name!r}: a step would read or write what another step wrote; pass "
                    "separate arrays"
                )
    return bound, taken


def _fit(spec: WorkspaceSpec, array: Any, error: type[Exception]) -> Any:
    """``array`` (a side's own) checked against ``spec``, seen in its declared shape."""
    dtype = np.dtype(array.dtype)
    if dtype != dtype_of(spec.dtype):
        raise error(f"buffer {spec.name!r} is {dtype}; the plan declares it {spec.dtype}")
    shape = tuple(array.shape)
    if shape == spec.shape:
        return array
    count = math.prod(spec.shape)
    if shape == (count,) and (count <= 1 or array.strides[0] == dtype.itemsize):
        return array.reshape(spec.shape)
    raise error(
        f"buffer {spec.name!r} has shape {shape}; the plan declares {spec.shape} (a contiguous "
        f"1-D buffer of {count} elements is also taken)"
    )


def _where(buffer: Any) -> str:
    if getattr(buffer, "is_host", None) is False:
        return f"on {buffer.device}"
    if getattr(buffer, "is_host", None) or isinstance(buffer, np.ndarray):
        return "on the host"
    return f"a {type(buffer).__name__}"


def _check_mapping(label: str, buffers: Any) -> None:
    if type(buffers) is not dict and not isinstance(buffers, Mapping):  # (dict: no ABC check)
        raise EagleTypeError(
            f"{label} must be a mapping of buffer name -> array (a dict such as "
            f"{{'a': a, 'b': b, 'out': out}}), not {type(buffers).__name__}"
        )


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:  # (every run checks: the common case costs one test)
        check_option(backend, Side, "backend")
