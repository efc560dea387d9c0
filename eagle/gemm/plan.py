"""Plans of matrix products, and lowering a recognised contraction to one.

A :class:`LoweredPlan` is an ordered list of :class:`PlanStep` over named
buffers, each declared by a :class:`WorkspaceSpec`. A matmul step
(:func:`matmul_step`) computes ``out = op(a) @ op(b)`` on the host with numpy
or on the device with cuBLAS on eagle's current stream. :func:`lower_dense_gemm`
turns a :class:`~eagle.gemm.contraction.RecognizedContraction` into such a
plan, forward or adjoint; :func:`captured_gemm_calls` binds a plan's products
to your buffers for :meth:`~eagle.gemm.CublasCaptureHandle.sgemm`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from eagle.cuda.graph import record_use
from eagle.cuda.stream import current_stream
from eagle.gemm.capture import stream_handle
from eagle.gemm.errors import (
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    MatmulUnavailable,
    PlanUnavailable,
)
from eagle.gemm.params import SgemmParams, product_shape, sgemm_params, sgemm_params_for_arrays

__all__ = [
    "BACKENDS",
    "STEP_KINDS",
    "CapturedGemmCall",
    "LoweredPlan",
    "MatmulSpec",
    "PlanStep",
    "WorkspaceSpec",
    "assembly_step",
    "captured_gemm_calls",
    "check_plan_capturable",
    "lower_dense_gemm",
    "matmul_step",
]

BACKENDS = ("host", "device")
"""Where a step or plan runs."""

STEP_KINDS = ("generated", "matmul", "assembly")
"""A kernel emitted for the plan, a matrix product, or a step that arranges buffers."""

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

StepFn = Callable[[Mapping[str, Any]], None]
"""A step's host or device function: it takes the bound buffers by name."""


@dataclass(frozen=True)
class WorkspaceSpec:
    """A buffer a plan reads or writes.

    Attributes:
        name: the buffer's name in the plan.
        shape: its shape, a tuple of non-negative ints.
        dtype: its dtype name, e.g. ``"float32"`` (anything ``numpy.dtype``
            takes is accepted and stored by name).

    Raises:
        PlanUnavailable: a negative or non-integer extent, or an unknown dtype.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        try:
            shape = tuple(int(extent) for extent in self.shape)
            dtype = np.dtype(self.dtype).name if self.dtype is not None else None
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
    """

    a: str
    b: str
    out: str
    transpose_a: bool = False
    transpose_b: bool = False
    transpose_out: bool = False


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
        PlanUnavailable: an unknown kind, a matmul step without a spec (or
            another kind with one), names that are not a sequence of strings,
            or a function that is not callable.
    """

    name: str
    kind: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    device_fn: StepFn = field(compare=False, repr=False)
    host_fn: StepFn = field(compare=False, repr=False)
    matmul: MatmulSpec | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
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
                raise PlanUnavailable(f"step {self.name!r}: {label} must be callable")

    def run(self, bufs: Mapping[str, Any], backend: str) -> None:
        """Run the step on ``backend`` over ``bufs`` (buffers by name), in place.

        Args:
            bufs: the buffers by name: numpy arrays or host eagle Arrays for
                ``"host"``, device eagle Arrays for ``"device"``.
            backend: ``"host"`` or ``"device"``. On the device the step only
                enqueues work on eagle's current stream.

        Raises:
            ValueError: an unknown backend.
            MatmulUnavailable: (a matmul step) a buffer is missing, on the wrong
                side, of a dtype other than float32/float64 or mixed, of the
                wrong shape, or (device) laid out so cuBLAS cannot address it.
            GemmCaptureUnavailable: (a matmul step, device) no driver or cuBLAS.
        """
        _check_backend(backend)
        if backend == "host":
            self.host_fn(bufs)
        else:
            self.device_fn(bufs)


def matmul_step(
    name: str,
    *,
    a: str,
    b: str,
    out: str,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
) -> PlanStep:
    """A step computing ``out = op(a) @ op(b)`` over the buffers named ``a``, ``b``, ``out``.

    On the host it is numpy's matmul through transposed views (float32 or
    float64), written into ``out`` in place. On the device it is one cuBLAS
    Sgemm (float32) or Dgemm (float64) on eagle's current stream, through a
    handle cached per device and stream: no allocation and no synchronisation
    per call.

    Args:
        name: the step's name.
        a, b: the operands' buffer names.
        out: the destination's buffer name.
        transpose_a, transpose_b: ``op(x)`` is ``x.T`` when set.
        transpose_out: ``out`` receives the product transposed.

    Raises:
        PlanUnavailable: ``out`` is also an operand.
    """
    if out in (a, b):
        raise PlanUnavailable(
            f"matmul step {name!r}: out {out!r} is also an operand; a product cannot write "
            f"over its own input"
        )
    spec = MatmulSpec(a, b, out, bool(transpose_a), bool(transpose_b), bool(transpose_out))
    return PlanStep(
        name,
        "matmul",
        tuple(dict.fromkeys((a, b))),
        (out,),
        functools.partial(_device_matmul, name, spec),
        functools.partial(_host_matmul, name, spec),
        matmul=spec,
    )


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
        PlanUnavailable: as :class:`PlanStep`.
    """
    return PlanStep(name, "assembly", tuple(reads), tuple(writes), device_fn, host_fn)


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
    """

    steps: tuple[PlanStep, ...]
    mechanism: str
    determinism: str
    inputs: tuple[WorkspaceSpec, ...]
    outputs: tuple[WorkspaceSpec, ...]
    workspaces: tuple[WorkspaceSpec, ...] = ()

    def __post_init__(self) -> None:
        for label in ("steps", "inputs", "outputs", "workspaces"):
            object.__setattr__(self, label, tuple(getattr(self, label)))
        _validate(self)

    @property
    def required(self) -> dict[str, WorkspaceSpec]:
        """Every buffer the caller binds, by name (inputs, then outputs, then workspaces)."""
        return {spec.name: spec for spec in self.inputs + self.outputs + self.workspaces}

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kind of each step, in order."""
        return tuple(step.kind for step in self.steps)

    def __call__(self, backend: str, buffers: Mapping[str, Any]) -> None:
        """Run every step on ``backend`` over ``buffers``, writing outputs in place.

        Each buffer is checked against its spec first; nothing is allocated. A
        buffer of the declared shape is used as it is; a contiguous 1-D buffer
        with as many elements (a lane plane, say) is seen in the declared shape
        without a copy.

        Args:
            backend: ``"host"`` or ``"device"``.
            buffers: by name; numpy arrays or host eagle Arrays for the host,
                device eagle Arrays (all on one device) for the device.

        Raises:
            ValueError: an unknown backend.
            MatmulUnavailable: a buffer is missing, on the wrong side or device,
                or of another dtype or shape than its spec; or a step refused.
        """
        bound = _bind(self, buffers, backend, MatmulUnavailable)
        for step in self.steps:
            step.run(bound, backend)


class CapturedGemmCall(NamedTuple):
    """One product of a plan, bound to your buffers, ready for ``handle.sgemm``.

    Attributes:
        name: the plan step's name.
        params: the :class:`~eagle.gemm.SgemmParams` of the call.
        operands: ``{"a": ..., "b": ..., "out": ...}``, your own device arrays.
    """

    name: str
    params: SgemmParams
    operands: dict[str, Any]


def check_plan_capturable(plan: LoweredPlan) -> None:
    """Refuse a plan whose products cannot all be captured as float32 Sgemm calls.

    Raises:
        GemmCaptureUnavailable: the plan is of the ``"gemv"`` mechanism, or a
            step is not a matmul step.
        GemmMappingUnavailable: a buffer the plan declares is not float32.
    """
    if plan.mechanism == "gemv":
        raise GemmCaptureUnavailable(
            "a 'gemv' plan (a product against a ones vector) is not captured; run it with "
            "plan('device', buffers)"
        )
    for step in plan.steps:
        if step.kind != "matmul":
            raise GemmCaptureUnavailable(
                f"step {step.name!r} is a {step.kind!r} step, not a matmul; only products "
                f"are captured through captured_gemm_calls"
            )
    for spec in plan.required.values():
        if spec.dtype != "float32":
            raise GemmMappingUnavailable(
                f"buffer {spec.name!r} is {spec.dtype}; a captured product is float32 only "
                f"(lower with dtype='float32')"
            )


def captured_gemm_calls(
    plan: LoweredPlan, buffers: Mapping[str, Any], *, operand_class: str
) -> tuple[CapturedGemmCall, ...]:
    """One :class:`CapturedGemmCall` per step of ``plan``, over your own buffers (no copies).

    Warm each call's params on the handle before the capture, then record them
    with ``handle.sgemm(call.params, call.operands, ...)``.

    Args:
        plan: a plan of matmul steps over float32 buffers.
        buffers: device eagle Arrays by name, as for ``plan("device", buffers)``.
        operand_class: the contraction's class, ``"gemm"`` or ``"gemv"``.

    Raises:
        ValueError: ``operand_class`` is neither ``"gemm"`` nor ``"gemv"``.
        GemmCaptureUnavailable: the ``"gemv"`` class, a step that is not a
            matmul, an unbound buffer, one that is not a float32 device array
            of its spec's shape.
        GemmMappingUnavailable: the plan declares a buffer that is not float32,
            or cuBLAS cannot address a buffer's layout.
    """
    if operand_class not in ("gemm", "gemv"):
        raise ValueError(f"operand_class must be 'gemm' or 'gemv', not {operand_class!r}")
    if operand_class == "gemv":
        raise GemmCaptureUnavailable(
            "the 'gemv' class is not captured: it lowers against a ones vector; run its plan "
            "with plan('device', buffers)"
        )
    check_plan_capturable(plan)
    bound = _bind(plan, buffers, "device", GemmCaptureUnavailable)
    return tuple(_captured_call(step, bound) for step in plan.steps)


def _captured_call(step: PlanStep, bound: Mapping[str, Any]) -> CapturedGemmCall:
    """A matmul step over bound device arrays: its Sgemm parameters and operands."""
    spec = step.matmul
    operands = {"a": bound[spec.a], "b": bound[spec.b], "out": bound[spec.out]}
    params = sgemm_params_for_arrays(
        *operands.values(),
        transpose_a=spec.transpose_a,
        transpose_b=spec.transpose_b,
        transpose_out=spec.transpose_out,
    )
    return CapturedGemmCall(step.name, params, operands)


def lower_dense_gemm(
    record: Any, *, direction: str = "forward", dtype: str = "float64"
) -> LoweredPlan:
    """Lower a recognised dense contraction to a plan of matrix products.

    ``record`` is read by attribute (a
    :class:`~eagle.gemm.contraction.RecognizedContraction`). Its first operand
    is ``a``, its second ``b``; the output is ``out``.

    * Forward: one step named after the output, ``out = op(a) @ op(b)`` with
      ``transpose_a = (a's reduce axis is 0)``, ``transpose_b = (b's reduce
      axis is 1)``; ``out`` has shape ``(a's free extent, b's free extent)``.
    * Adjoint: input ``<out>_bar`` (and ``a``, ``b``); outputs ``<a>_bar`` and
      ``<b>_bar`` in each operand's declared shape, each one product with
      ``<out>_bar`` as its first operand. With both operands declared
      ``(k, free)`` the flags are forward (T, F, F), ``a_bar`` (F, T, T) and
      ``b_bar`` (T, T, T). To accumulate gradients, issue them with beta = 1.
    * A ``"gemv"`` record (one operand read bare) lowers against an input
      ``ones`` of shape ``(k, 1)`` that the caller fills with ones; its output
      is ``(free, 1)``.

    Args:
        record: the contraction, a
            :class:`~eagle.gemm.contraction.RecognizedContraction`.
        direction: ``"forward"`` or ``"adjoint"``.
        dtype: the buffers' dtype, ``"float32"`` or ``"float64"``.

    Raises:
        PlanUnavailable: no record, not dense, a transformed term, a reduce that
            is not a full unit-step range, a non-constant extent, an operand
            that is not two-axis, an axis extent that disagrees with the loop,
            an operand count that does not match the class, or not one output.
        ValueError: an unknown ``direction`` or ``dtype``.
    """
    if direction not in ("forward", "adjoint"):
        raise ValueError(f"direction must be 'forward' or 'adjoint', not {direction!r}")
    dtype = _float_dtype(dtype)
    if record is None:
        raise PlanUnavailable(
            "no record: the kernel is not a recognised contraction (nothing to lower)"
        )
    extent = _check_record(record)
    out = record.outputs[0][0]
    a = record.operands[0]
    b = record.operands[1] if record.operand_class == "gemm" else None
    if direction == "adjoint" and b is not None and a.name == b.name:
        raise PlanUnavailable(
            f"operand {a.name!r} is both factors; its adjoint is not two separate products"
        )
    a_spec = WorkspaceSpec(a.name, _shape(a), dtype)
    b_spec = (
        WorkspaceSpec(b.name, _shape(b), dtype) if b else WorkspaceSpec("ones", (extent, 1), dtype)
    )
    transpose_a = a.reduce_axis == 0
    transpose_b = b is not None and b.reduce_axis == 1
    free = (_free_extent(a), _free_extent(b) if b else 1)
    mechanism = "gemm" if b else "gemv"
    if direction == "forward":
        step = matmul_step(
            out, a=a_spec.name, b=b_spec.name, out=out,
            transpose_a=transpose_a, transpose_b=transpose_b,
        )  # fmt: skip
        inputs = tuple(dict.fromkeys((a_spec, b_spec)))  # one table may be both factors
        return LoweredPlan(
            (step,), mechanism, "run_to_run", inputs, (WorkspaceSpec(out, free, dtype),)
        )
    out_bar = WorkspaceSpec(f"{out}_bar", free, dtype)
    a_bar = WorkspaceSpec(f"{a.name}_bar", a_spec.shape, dtype)
    a_step = matmul_step(
        a_bar.name, a=out_bar.name, b=b_spec.name, out=a_bar.name,
        transpose_a=False, transpose_b=not transpose_b, transpose_out=transpose_a,
    )  # fmt: skip
    if b is None:
        return LoweredPlan((a_step,), mechanism, "run_to_run", (b_spec, out_bar), (a_bar,))
    b_bar = WorkspaceSpec(f"{b.name}_bar", b_spec.shape, dtype)
    b_step = matmul_step(
        b_bar.name, a=out_bar.name, b=a_spec.name, out=b_bar.name,
        transpose_a=True, transpose_b=transpose_a, transpose_out=not transpose_b,
    )  # fmt: skip
    return LoweredPlan(
        (a_step, b_step), mechanism, "run_to_run", (a_spec, b_spec, out_bar), (a_bar, b_bar)
    )


# --- lowering checks -------------------------------------------------------------------------

_CLASS_OPERANDS = {"gemm": (2, "product_of_reads"), "gemv": (1, "bare_read")}


def _check_record(record: Any) -> int:
    if not record.dense:
        raise PlanUnavailable(f"the contraction is not dense: {_reasons(record.refusals)}")
    if record.term_form == "transformed":
        raise PlanUnavailable(
            "the term is transformed (a function applied to the reads); only a product of "
            "reads, or a bare read, lowers to a matrix product"
        )
    if record.operand_class not in _CLASS_OPERANDS:
        raise PlanUnavailable(
            f"operand_class must be 'gemm' or 'gemv', not {record.operand_class!r}"
        )
    count, term_form = _CLASS_OPERANDS[record.operand_class]
    if len(record.operands) != count or record.term_form != term_form:
        raise PlanUnavailable(
            f"a {record.operand_class!r} contraction is {count} operand(s) with a "
            f"{term_form!r} term; this one has {len(record.operands)} with {record.term_form!r}"
        )
    if len(record.outputs) != 1:
        names = [name for name, _ in record.outputs]
        raise PlanUnavailable(
            f"the contraction writes {len(record.outputs)} outputs {names}; a product writes one"
        )
    extent = record.reduce_extent
    if not isinstance(extent, int):
        raise PlanUnavailable(
            f"the reduce extent of {record.reduce_var!r} is not a constant ({extent!r})"
        )
    if record.reduce_start != 0 or record.reduce_step != 1:
        raise PlanUnavailable(
            f"the reduce over {record.reduce_var!r} is not a full unit-step range: "
            f"range({record.reduce_start}, {extent}, {record.reduce_step})"
        )
    for operand in record.operands:
        _check_operand(operand, record.reduce_var, extent)
    return extent


def _check_operand(operand: Any, reduce_var: str, extent: int) -> None:
    name = operand.name
    if not operand.dense:
        raise PlanUnavailable(f"operand {name!r} is not dense: {_reasons(operand.refusals)}")
    if len(operand.dims) != 2:
        raise PlanUnavailable(
            f"operand {name!r} has {len(operand.dims)} axes; a matrix product takes two-axis tables"
        )
    for label, size, _ in operand.dims:
        if not isinstance(size, int):
            raise PlanUnavailable(
                f"operand {name!r} has a non-constant extent along {label!r} ({size!r})"
            )
    if operand.reduce_axis not in (0, 1):
        raise PlanUnavailable(
            f"operand {name!r} is not walked by {reduce_var!r} along one of its two axes "
            f"(reduce_dim {operand.reduce_dim!r})"
        )
    label, size, stride = operand.dims[operand.reduce_axis]
    if size != extent:
        raise PlanUnavailable(
            f"operand {name!r}'s axis {label!r} has extent {size}, but the loop over "
            f"{reduce_var!r} runs {extent} steps"
        )
    if operand.reduce_stride != stride:
        raise PlanUnavailable(
            f"the reduce over {reduce_var!r} is not a unit-step walk of operand {name!r}: its "
            f"address advances {operand.reduce_stride!r} elements per step, its axis "
            f"{label!r} has stride {stride!r}"
        )


def _reasons(refusals: Sequence[str]) -> str:
    return "; ".join(refusals) if refusals else "no reason given"


def _shape(operand: Any) -> tuple[int, int]:
    return tuple(size for _, size, _ in operand.dims)  # type: ignore[return-value]


def _free_extent(operand: Any) -> int:
    return operand.dims[1 - operand.reduce_axis][1]


def _float_dtype(dtype: Any) -> str:
    try:
        resolved = np.dtype(dtype)
    except TypeError as exc:
        raise ValueError(f"dtype must be 'float32' or 'float64', not {dtype!r}") from exc
    if dtype is None or resolved not in _FLOATS:
        raise ValueError(f"dtype must be 'float32' or 'float64', not {dtype!r}")
    return resolved.name


# --- plan validation and binding -------------------------------------------------------------


def _names(step: str, label: str, names: Any) -> tuple[str, ...]:
    if isinstance(names, str) or not all(isinstance(name, str) for name in names):
        raise PlanUnavailable(
            f"step {step!r}: {label} must be a sequence of buffer names, not {names!r}"
        )
    return tuple(names)


def _validate(plan: LoweredPlan) -> None:
    specs = plan.inputs + plan.outputs + plan.workspaces
    for spec in specs:
        if not isinstance(spec, WorkspaceSpec):
            raise PlanUnavailable(f"buffers are declared with WorkspaceSpec, not {spec!r}")
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
            raise PlanUnavailable(f"plan steps are PlanStep, not {step!r}")
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
    dtypes = {a.dtype, b.dtype, out.dtype}
    if len(dtypes) != 1 or np.dtype(a.dtype) not in _FLOATS:
        raise PlanUnavailable(
            f"matmul step {step!r}: buffers {a.name!r}, {b.name!r}, {out.name!r} are declared "
            f"{a.dtype}, {b.dtype}, {out.dtype}; a product takes one of float32 or float64"
        )
    try:
        want = product_shape(
            a.shape, b.shape,
            transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
            transpose_out=spec.transpose_out,
        )  # fmt: skip
    except GemmMappingUnavailable as exc:
        raise PlanUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
    if out.shape != want:
        raise PlanUnavailable(
            f"matmul step {step!r}: out {out.name!r} is declared {out.shape}; it must be {want}"
        )


def _roles(spec: MatmulSpec) -> str:
    return f"a={spec.a!r}, b={spec.b!r}, out={spec.out!r}"


def _bind(
    plan: LoweredPlan, buffers: Mapping[str, Any], backend: str, error: type[Exception]
) -> dict[str, Any]:
    _check_backend(backend)
    bound: dict[str, Any] = {}
    devices: dict[int, str] = {}
    required = plan.required
    for spec in required.values():
        if spec.name not in buffers:
            raise error(f"buffer {spec.name!r} is not bound; the plan needs {list(required)}")
        buffer = buffers[spec.name]
        bound[spec.name] = _bind_one(spec, buffer, backend, error)
        if backend == "device":
            devices.setdefault(buffer.device_index, spec.name)
    if len(devices) > 1:
        where = ", ".join(f"{name!r} on cuda:{index}" for index, name in devices.items())
        raise error(f"the buffers are on different devices ({where}); put them on one device")
    return bound


def _bind_one(spec: WorkspaceSpec, buffer: Any, backend: str, error: type[Exception]) -> Any:
    if backend == "host":
        array = _host_view(buffer)
        if array is None:
            raise error(
                f"buffer {spec.name!r} is {_where(buffer)}; the host backend takes numpy arrays "
                f"or host eagle Arrays"
            )
    else:
        if getattr(buffer, "is_host", True) or not isinstance(getattr(buffer, "ptr", None), int):
            raise error(
                f"buffer {spec.name!r} is {_where(buffer)}; the device backend takes device "
                f"eagle Arrays"
            )
        array = buffer
    dtype = np.dtype(array.dtype)
    if dtype != np.dtype(spec.dtype):
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


def _host_view(buffer: Any) -> np.ndarray | None:
    if isinstance(buffer, np.ndarray):
        return buffer
    if getattr(buffer, "is_host", False):
        return np.asarray(buffer)
    return None


def _where(buffer: Any) -> str:
    if getattr(buffer, "is_host", None) is False:
        return f"on {buffer.device}"
    if getattr(buffer, "is_host", None) or isinstance(buffer, np.ndarray):
        return "on the host"
    return f"a {type(buffer).__name__}"


# --- the matmul step's two sides -------------------------------------------------------------


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'host' or 'device', not {backend!r}")


def _lookup(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    try:
        return bufs[spec.a], bufs[spec.b], bufs[spec.out]
    except KeyError as exc:
        raise MatmulUnavailable(
            f"matmul step {step!r}: buffer {exc.args[0]!r} is not bound (bound: {sorted(bufs)})"
        ) from None


def _common_dtype(step: str, spec: MatmulSpec, arrays: Sequence[Any]) -> np.dtype:
    dtypes = [np.dtype(array.dtype) for array in arrays]
    if len(set(dtypes)) != 1 or dtypes[0] not in _FLOATS:
        raise MatmulUnavailable(
            f"matmul step {step!r}: a={spec.a!r} is {dtypes[0]}, b={spec.b!r} is {dtypes[1]}, "
            f"out={spec.out!r} is {dtypes[2]}; a product takes float32 or float64, the same "
            f"for all three"
        )
    return dtypes[0]


def _host_matmul(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> None:
    arrays = []
    for name, buffer in zip((spec.a, spec.b, spec.out), _lookup(step, spec, bufs), strict=True):
        array = _host_view(buffer)
        if array is None:
            raise MatmulUnavailable(
                f"matmul step {step!r}: buffer {name!r} is {_where(buffer)}; the host backend "
                f"takes numpy arrays or host eagle Arrays"
            )
        arrays.append(array)
    a, b, out = arrays
    _common_dtype(step, spec, arrays)
    try:
        want = product_shape(
            a.shape, b.shape,
            transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
            transpose_out=spec.transpose_out,
        )  # fmt: skip
    except GemmMappingUnavailable as exc:
        raise MatmulUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
    if out.shape != want:
        raise MatmulUnavailable(
            f"matmul step {step!r}: out {spec.out!r} has shape {out.shape}; it must have "
            f"shape {want}"
        )
    left = a.T if spec.transpose_a else a
    right = b.T if spec.transpose_b else b
    if spec.transpose_out:
        np.matmul(right.T, left.T, out=out)  # out = (left @ right).T, written C-ordered
    else:
        np.matmul(left, right, out=out)


@functools.lru_cache(maxsize=1024)
def _layout_params(
    shapes: tuple[tuple[int, ...], ...],
    strides: tuple[tuple[int, ...], ...],
    itemsize: int,
    spec: MatmulSpec,
) -> SgemmParams:
    return sgemm_params(
        shapes[0], strides[0], shapes[1], strides[1], shapes[2], strides[2], itemsize,
        transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
        transpose_out=spec.transpose_out,
    )  # fmt: skip


def _device_matmul(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> None:
    arrays = _lookup(step, spec, bufs)
    for name, array in zip((spec.a, spec.b, spec.out), arrays, strict=True):
        if getattr(array, "is_host", True):
            raise MatmulUnavailable(
                f"matmul step {step!r}: buffer {name!r} is {_where(array)}; the device backend "
                f"takes device eagle Arrays"
            )
    a, b, out = arrays
    device = a.device_index
    if b.device_index != device or out.device_index != device:
        raise MatmulUnavailable(
            f"matmul step {step!r}: a={spec.a!r} is on {a.device}, b={spec.b!r} on {b.device}, "
            f"out={spec.out!r} on {out.device}; put them on one device"
        )
    dtype = _common_dtype(step, spec, arrays)
    try:
        params = _layout_params(
            (a.shape, b.shape, out.shape), (a.strides, b.strides, out.strides), dtype.itemsize, spec
        )
    except GemmMappingUnavailable as exc:
        raise MatmulUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
    stream_ptr = current_stream(device).ptr()
    handle = stream_handle(stream_ptr, device)
    first, second = (a, b) if params.operands == ("a", "b") else (b, a)
    handle._enqueue(params, first.ptr, second.ptr, out.ptr, 1.0, 0.0, double=dtype.itemsize == 8)
    record_use(stream_ptr, handle, a, b, out)
