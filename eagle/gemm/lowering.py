"""Lowering a recognised contraction to a plan of products, and binding a plan for capture.

:func:`lower_dense_gemm` turns a
:class:`~eagle.gemm.contraction.RecognizedContraction` into a
:class:`~eagle.gemm.steps.LoweredPlan` of matmul steps, forward or adjoint;
:func:`captured_gemm_calls` binds such a plan's float32 products to your
buffers for :meth:`~eagle.gemm.CublasCaptureHandle.sgemm`, and
:func:`captured_calls` binds a plan of any product dtype for
:meth:`~eagle.gemm.CublasCaptureHandle.gemm`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from eagle.errors import EagleTypeError, EagleValueError, check_option
from eagle.gemm.contraction import ContractionOperand, RecognizedContraction
from eagle.gemm.dtypes import PRODUCT_DTYPES, dtype_of, product_dtypes
from eagle.gemm.errors import GemmMappingUnavailable, NotCapturable, PlanUnavailable
from eagle.gemm.matmul import matmul_step
from eagle.gemm.params import (
    GemmParams,
    SgemmParams,
    gemm_params_for_arrays,
    sgemm_params_for_arrays,
)
from eagle.gemm.steps import LoweredPlan, WorkspaceSpec, _bind_buffers, _roles
from hawk.records import OperandClass

__all__ = [
    "CapturedCall",
    "CapturedGemmCall",
    "Direction",
    "captured_calls",
    "captured_gemm_calls",
    "check_plan_capturable",
    "lower_dense_gemm",
]


Direction = Literal["forward", "adjoint"]
"""Which products a contraction lowers to (its forward product, or the gradients' two)."""


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


class CapturedCall(NamedTuple):
    """One product of a plan, of any dtype, bound to your buffers, ready for ``handle.gemm``.

    Attributes:
        name: the plan step's name.
        params: the :class:`~eagle.gemm.GemmParams` of the call.
        operands: ``{"a": ..., "b": ..., "out": ...}``, your own device arrays, with
            ``"a_scale"`` and ``"b_scale"`` where an fp8 step names scales.
    """

    name: str
    params: GemmParams
    operands: dict[str, Any]


def check_plan_capturable(plan: LoweredPlan) -> None:
    """Refuse a plan whose products cannot all be captured as float32 Sgemm calls.

    Raises:
        GemmCaptureUnavailable: the plan is of the ``"gemv"`` mechanism, or a
            step is not a matmul step.
        GemmMappingUnavailable: a buffer the plan declares is not float32.
        TypeError: ``plan`` is not a LoweredPlan.
    """
    _check_products(plan)
    for spec in plan.required.values():
        if spec.dtype != "float32":
            raise GemmMappingUnavailable(
                f"buffer {spec.name!r} is {spec.dtype}; Sgemm calls (captured_gemm_calls, "
                f"handle.sgemm) are float32 only: lower with dtype='float32', or capture the "
                f"plan with captured_calls and handle.gemm, which take every product dtype"
            )


def _check_products(plan: LoweredPlan) -> None:
    """Refuse a plan that is not products alone (not a LoweredPlan, "gemv", another step)."""
    if not isinstance(plan, LoweredPlan):
        raise EagleTypeError(
            f"plan must be a LoweredPlan (from lower_dense_gemm), not {type(plan).__name__}"
        )
    if plan.mechanism == "gemv":
        raise NotCapturable(
            "a 'gemv' plan (a product against a ones vector) is not captured; run it with "
            "plan('device', buffers)"
        )
    for step in plan.steps:
        if step.kind != "matmul":
            raise NotCapturable(
                f"step {step.name!r} is a {step.kind!r} step, not a matmul; only products "
                f"are captured"
            )


def captured_gemm_calls(
    plan: LoweredPlan, buffers: Mapping[str, Any], *, operand_class: OperandClass
) -> tuple[CapturedGemmCall, ...]:
    """One :class:`CapturedGemmCall` per step of ``plan``, over your own buffers (no copies).

    Warm each call's params on the handle before the capture, then record them
    with ``handle.sgemm(call.params, call.operands, ...)``.

    Args:
        plan: a plan of matmul steps over float32 buffers.
        buffers: device arrays by name (eagle Arrays, torch tensors, CuPy arrays,
            CUDA array interface or DLPack objects), as for ``plan("device", buffers)``;
            the calls' operands are eagle Arrays over the same memory.
        operand_class: the contraction's class, ``"gemm"`` or ``"gemv"``.

    Raises:
        TypeError: ``plan`` is not a LoweredPlan, or ``buffers`` not a mapping.
        ValueError: ``operand_class`` is neither ``"gemm"`` nor ``"gemv"``.
        GemmCaptureUnavailable: the ``"gemv"`` class, a step that is not a
            matmul, an unbound buffer, one that is not a float32 device array
            of its spec's shape.
        GemmMappingUnavailable: the plan declares a buffer that is not float32,
            or cuBLAS cannot address a buffer's layout.
    """
    check_option(operand_class, OperandClass, "operand_class")
    if operand_class == "gemv":
        raise NotCapturable(
            "the 'gemv' class is not captured: it lowers against a ones vector; run its plan "
            "with plan('device', buffers)"
        )
    check_plan_capturable(plan)
    bound, _ = _bind_buffers(plan, buffers, "device", NotCapturable)
    return tuple(
        CapturedGemmCall(*call) for call in _bound_products(plan, bound, sgemm_params_for_arrays)
    )


def captured_calls(
    plan: LoweredPlan, buffers: Mapping[str, Any], *, math: str | None = None
) -> tuple[CapturedCall, ...]:
    """One :class:`CapturedCall` per step of ``plan``, of any product dtype, over your buffers.

    :func:`captured_gemm_calls` for every dtype of :mod:`eagle.gemm.dtypes`
    (bfloat16, float16, float32, float64, fp8 with its steps' scales; no copies).
    Warm each call's params on the handle before the capture, then record them
    with ``handle.gemm(call.params, call.operands, ...)``.

    Args:
        plan: a plan of matmul steps, e.g. from ``lower_dense_gemm(record, dtype=...)``.
        buffers: device arrays by name (eagle Arrays, torch tensors, CuPy arrays,
            CUDA array interface or DLPack objects), as for ``plan("device", buffers)``;
            the calls' operands are eagle Arrays over the same memory.
        math: None (exact), ``"tf32"`` for a plan of float32 buffers whose
            products accept TF32 rounding, or ``"fast_accum"`` for a plan of fp8
            products summed in the tensor cores' own accumulator.

    Raises:
        TypeError: ``plan`` is not a LoweredPlan, or ``buffers`` not a mapping.
        GemmCaptureUnavailable: a ``"gemv"`` plan, a step that is not a matmul,
            an unbound buffer, one that is not a device array of its spec's
            dtype and shape.
        GemmMappingUnavailable: a step's dtypes or ``math`` no product has, or
            a buffer's layout cuBLAS cannot address.
    """
    _check_products(plan)
    declared = plan.required
    for step in plan.steps:
        spec = step.matmul
        assert spec is not None  # _check_products passed
        try:
            product_dtypes(
                declared[spec.a].dtype, declared[spec.b].dtype, declared[spec.out].dtype, math
            )
        except GemmMappingUnavailable as exc:
            raise GemmMappingUnavailable(f"step {step.name!r} ({_roles(spec)}): {exc}") from None
    bound, _ = _bind_buffers(plan, buffers, "device", NotCapturable)
    return tuple(
        CapturedCall(*call)
        for call in _bound_products(plan, bound, gemm_params_for_arrays, math=math)
    )


def _bound_products(
    plan: LoweredPlan, bound: Mapping[str, Any], make: Callable[..., Any], **options: Any
) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """Each matmul step's name, the params ``make`` reads off its bound device arrays (with
    ``options``), and its operands; every step is a matmul (_check_products passed)."""
    for step in plan.steps:
        spec = step.matmul
        assert spec is not None
        operands = {"a": bound[spec.a], "b": bound[spec.b], "out": bound[spec.out]}
        params = make(
            *operands.values(),
            transpose_a=spec.transpose_a,
            transpose_b=spec.transpose_b,
            transpose_out=spec.transpose_out,
            **options,
        )
        operands.update({role: bound[name] for role, name in spec.scales.items()})
        yield step.name, params, operands


def lower_dense_gemm(
    record: RecognizedContraction | None,
    *,
    direction: Direction = "forward",
    dtype: str = "float64",
) -> LoweredPlan:
    """Lower a recognised dense contraction to a plan of matrix products.

    ``record`` is a :class:`~eagle.gemm.contraction.RecognizedContraction`
    (``None`` means "no contraction" and is refused). Its first operand is
    ``a``, its second ``b``; the output is ``out``.

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
        record: the contraction.
        direction: ``"forward"`` or ``"adjoint"``.
        dtype: the buffers' dtype: ``"bfloat16"``, ``"float16"``,
            ``"float32"`` or ``"float64"``.

    Raises:
        PlanUnavailable: no record, not dense, a transformed term, a reduce that
            is not a full unit-step range, a non-constant extent, an operand
            that is not two-axis, an axis extent that disagrees with the loop,
            an operand count that does not match the class, or not one output.
        ValueError: an unknown ``direction`` or ``dtype``.
        TypeError: ``record`` is neither a RecognizedContraction nor None.
    """
    if record is not None and not isinstance(record, RecognizedContraction):
        raise EagleTypeError(
            f"record must be a RecognizedContraction (from hawk.contraction.recognize, or "
            f"eagle.plan.auto(kernel).record), not {type(record).__name__}"
        )
    check_option(direction, Direction, "direction")
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


def _check_record(record: RecognizedContraction) -> int:
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


def _check_operand(operand: ContractionOperand, reduce_var: str, extent: int) -> None:
    name = operand.name
    if not operand.dense:
        raise PlanUnavailable(f"operand {name!r} is not dense: {_reasons(operand.refusals)}")
    if len(operand.dims) != 2:
        axes = "axis" if len(operand.dims) == 1 else "axes"
        raise PlanUnavailable(
            f"operand {name!r} has {len(operand.dims)} {axes}; a matrix product takes tables "
            "of two axes (a matrix-vector contraction keeps the kernel's loop)"
        )
    for label, size, _ in operand.dims:
        if not isinstance(size, int):
            raise PlanUnavailable(
                f"operand {name!r} has a non-constant extent along {label!r} ({size!r})"
            )
    if operand.reduce_axis not in (0, 1):
        raise PlanUnavailable(
            f"operand {name!r} is not read along one of its axes by the loop variable "
            f"{reduce_var!r} (read it as {name}.at(<axis>={reduce_var}, ...) in the loop)"
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


def _shape(operand: ContractionOperand) -> tuple[int, int]:
    """The declared shape of an operand :func:`_check_operand` passed (two int extents)."""
    (_, rows, _), (_, cols, _) = operand.dims
    assert isinstance(rows, int) and isinstance(cols, int)
    return rows, cols


def _free_extent(operand: ContractionOperand) -> int:
    axis = operand.reduce_axis
    assert axis is not None  # _check_operand passed
    return _shape(operand)[1 - axis]


def _float_dtype(dtype: Any) -> str:
    names = ", ".join(repr(name) for name in PRODUCT_DTYPES)
    try:
        resolved = dtype_of(dtype)
    except TypeError as exc:
        raise EagleValueError(f"dtype must be one of {names}, not {dtype!r}") from exc
    if dtype is None or resolved.name not in PRODUCT_DTYPES:
        raise EagleValueError(f"dtype must be one of {names}, not {dtype!r}")
    return resolved.name
