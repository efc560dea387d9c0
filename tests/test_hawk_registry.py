# ruff: noqa: F841 - kernels assign to their output planes
"""The hawk.math registry: every entry is honoured by trace, both emitters and the
adjoint, and a function added as one entry works everywhere."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import numpy as np
import pytest

import hawk
import hawk._functions
import hawk.diff
from eagle.cuda import compile_cuda
from hawk import ir
from hawk import math as hm
from hawk._functions import FUNCTIONS, Function
from hawk.emit import cuda, host
from hawk.kinds import PlaneKind, Type

F64 = "float64"


def _call_kernel(fn: str) -> ir.KernelIR:
    """``y = fn(x, 0.75, ...)`` over lanes, built as IR."""
    x, y = ir.Plane("x", PlaneKind.INPUT), ir.Plane("y", PlaneKind.OUTPUT)
    entry = FUNCTIONS[fn]
    args = (ir.Load(x), *(ir.Const(0.75) for _ in entry.params[1:]))
    return ir.KernelIR(f"call_{fn}", (x, y), (ir.Store(y, ir.Call(fn, args)),))


def _run(kernel_ir: ir.KernelIR, planes: dict[str, np.ndarray]) -> None:
    program = host.emit(kernel_ir, {name: F64 for name in planes})
    program.function(*(planes[name] for name in program.arguments), len(planes["x"]))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_entry_is_honoured(name: str) -> None:
    entry = FUNCTIONS[name]
    public = getattr(hm, name)
    assert public.__doc__ == entry.doc and public.__hawk_op__ == name
    assert list(inspect.signature(public).parameters) == list(entry.params)
    x = np.linspace(0.3, 1.7, 9)
    rest = [0.75] * (entry.arity - 1)
    np.testing.assert_array_equal(public(x, *rest), getattr(np, entry.numpy)(x, *rest))

    kernel_ir = _call_kernel(name)
    y = np.zeros_like(x)
    _run(kernel_ir, {"x": x, "y": y})  # host: the numpy form
    np.testing.assert_allclose(y, public(x, *rest), rtol=1e-15)
    for dtype in ("float32", "float64"):  # device: the CUDA form compiles
        source = cuda.emit(kernel_ir, {"x": dtype, "y": dtype})
        compile_cuda(source.source, name=source.name, arch="sm_90")
    if entry.keeps_int:
        assert ir.Call(name, tuple(ir.Const(3) for _ in entry.params)).type == Type.INT
    else:
        with pytest.raises(hawk.HawkError, match="takes reals"):
            ir.Call(name, tuple(ir.Const(3) for _ in entry.params))

    # the adjoint: its derivative rule against central differences
    adjoint = hawk.diff.vjp(hawk.trace.Kernel(public, kernel_ir))
    x_bar, step = np.zeros_like(x), 1e-6
    _run(adjoint.ir, {"x": x, "y_bar": np.ones_like(x), "x_bar": x_bar})
    expected = (public(x + step, *rest) - public(x - step, *rest)) / (2 * step)
    np.testing.assert_allclose(x_bar, expected, rtol=1e-6)


@pytest.fixture
def expm1_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``hawk.math.expm1``, added as one registry entry and nothing else."""
    entry = Function(
        "expm1",
        ("x",),
        "e ** x - 1, exact near 0.",
        "expm1",
        {Type.REAL: "expm1$f"},
        lambda bar, result, x: (bar * (result + 1.0),),
    )
    monkeypatch.setitem(hawk._functions.FUNCTIONS, "expm1", entry)  # type: ignore[index]
    importlib.reload(hm)
    yield
    monkeypatch.undo()
    importlib.reload(hm)


def test_a_function_is_added_by_one_entry(expm1_registered: None) -> None:
    @hawk.kernel
    def shifted(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = hm.expm1(x) * 2.0

    x = np.linspace(-1e-3, 1.0, 7)
    y = np.zeros_like(x)
    _run(shifted.ir, {"x": x, "y": y})
    np.testing.assert_allclose(y, np.expm1(x) * 2.0, rtol=1e-15)
    source = cuda.emit(shifted.ir, {"x": "float32", "y": "float32"})
    assert "expm1f(" in source.source
    compile_cuda(source.source, name=source.name, arch="sm_90")
    x_bar = np.zeros_like(x)
    _run(hawk.diff.vjp(shifted).ir, {"x": x, "y_bar": np.ones_like(x), "x_bar": x_bar})
    np.testing.assert_allclose(x_bar, 2.0 * np.exp(x), rtol=1e-14)


def test_math_has_exactly_the_registry_and_the_lane_indices() -> None:
    assert set(hm.__all__) == {"sample_index", "split_index", *FUNCTIONS}
