# ruff: noqa: F841 - kernels assign to their output planes
"""The registry of hawk's operations: every hawk.math entry is honoured by trace, both
emitters and the adjoint, and a function added as one entry works everywhere."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import hawk
import hawk._registry
import hawk.diff
from eagle.cuda import compile_cuda
from hawk import ir
from hawk import math as hm
from hawk._expressions import _COMPARE_OPS, _LOGIC_OPS, _NOT_OPS, _UNARY_OPS, BINOPS
from hawk._registry import BUILTINS, DEBUG_CALLS, Builtin, Form, math_functions
from hawk._registry.entry import function, numpy
from hawk.emit import cuda, host
from hawk.kinds import PlaneKind, Type

F64 = "float64"


def _call_kernel(fn: str) -> ir.KernelIR:
    """``y = fn(x, 0.75, ...)`` over lanes, built as IR."""
    x, y = ir.Plane("x", PlaneKind.INPUT), ir.Plane("y", PlaneKind.OUTPUT)
    entry = math_functions()[fn]
    args = (ir.Load(x), *(ir.Const(0.75) for _ in entry.params[1:]))
    value: ir.Expr = ir.Call(fn, args)
    if value.type == Type.INT:  # a function that gives an int from reals (floor)
        value = ir.Cast(Type.REAL, value)
    return ir.KernelIR(f"call_{fn}", (x, y), (ir.Store(y, value),))


def _run(kernel_ir: ir.KernelIR, planes: dict[str, np.ndarray]) -> None:
    program = host.emit(kernel_ir, {name: F64 for name in planes})
    program.function(*(planes[name] for name in program.arguments), len(planes["x"]))


@pytest.mark.parametrize("name", sorted(math_functions()))
def test_every_entry_is_honoured(name: str) -> None:
    entry = math_functions()[name]
    public = getattr(hm, name)
    assert public.__doc__ == entry.doc and public.__hawk_op__ == name
    assert list(inspect.signature(public).parameters) == list(entry.params)
    x = np.linspace(0.3, 1.7, 9)
    rest = [0.75] * (entry.arity - 1)
    np.testing.assert_array_equal(public(x, *rest), entry.evaluate(x, *rest))

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
    if entry.result == Type.INT:  # piecewise constant: zero away from its steps
        expected = np.zeros_like(x)
    np.testing.assert_allclose(x_bar, expected, rtol=1e-6)


@pytest.fixture
def expm1_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``hawk.math.expm1``, added as one registry entry and nothing else."""
    entry = function(
        "expm1",
        ("x",),
        "e ** x - 1, exact near 0.",
        host=numpy("expm1"),
        c={Type.REAL: "expm1$f"},
        derivative=lambda bar, result, x: (bar * (result + 1.0),),
    )
    monkeypatch.setitem(hawk._registry.BUILTINS, "expm1", entry)
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
    every = {"sample_index", "split_index", *math_functions(), *DEBUG_CALLS}
    assert set(hm.__all__) == every


# -- operators ---------------------------------------------------------------------------

X_PLANE, Z_PLANE = ir.Plane("x", PlaneKind.INPUT), ir.Plane("z", PlaneKind.INPUT)
Y_PLANE = ir.Plane("y", PlaneKind.OUTPUT)


def _node(entry: Builtin) -> ir.Operation:
    """An IR node applying ``entry`` to lane values of the types it takes."""
    real, other = ir.Load(X_PLANE), ir.Load(Z_PLANE)
    flag = ir.Compare("<", real, other)
    nodes: dict[Form, Callable[[], ir.Operation]] = {
        Form.UNARY: lambda: ir.Unary(entry.spelling, real),
        Form.BINARY: lambda: ir.Binary(entry.spelling, real, other),
        Form.COMPARE: lambda: ir.Compare(entry.spelling, real, other),
        Form.LOGIC: lambda: ir.Logic(entry.spelling, flag, ir.Not(flag)),
        Form.NOT: lambda: ir.Not(flag),
        Form.CAST: lambda: ir.Cast(
            Type(entry.spelling), real if entry.spelling == Type.INT else ir.Lane()
        ),
        Form.SELECT: lambda: ir.Select(flag, real, other),
        Form.CALL: lambda: ir.Call(entry.name, (real, other)[: entry.arity]),
    }
    return nodes[entry.form]()


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_entry_is_the_operation_of_its_nodes(name: str) -> None:
    entry = BUILTINS[name]
    node = _node(entry)
    assert node.builtin is entry and type(node).__name__ == entry.form
    assert len(node.children()) == entry.arity and set(entry.lazy) <= set(range(entry.arity))
    assert entry.doc
    if entry.syntax is not None:  # the tracer reads Python's operator from the entry
        tables = (BINOPS, _COMPARE_OPS, _LOGIC_OPS, _UNARY_OPS, _NOT_OPS)
        assert any(table.get(entry.syntax) == entry.spelling for table in tables)


def test_the_ir_operator_sets_are_the_registrys() -> None:
    assert {e.spelling for e in BUILTINS.values() if e.form is Form.BINARY} == ir.ARITHMETIC
    assert {e.spelling for e in BUILTINS.values() if e.form is Form.COMPARE} == ir.COMPARISONS
    with pytest.raises(hawk.HawkError, match="unknown arithmetic operator '\\*\\*'"):
        ir.Binary("**", ir.Const(2.0), ir.Const(3.0))
    with pytest.raises(hawk.HawkError, match="unknown unary operator '~'"):
        ir.Unary("~", ir.Const(2))


_DIFFERENTIABLE = sorted(
    name
    for name, entry in BUILTINS.items()
    if entry.derivative is not None and entry.form in (Form.UNARY, Form.BINARY)
)


@pytest.mark.parametrize("name", _DIFFERENTIABLE)
def test_an_operators_derivative_rule_matches_finite_differences(name: str) -> None:
    entry = BUILTINS[name]
    kernel_ir = ir.KernelIR(
        f"op_{name}", (X_PLANE, Z_PLANE, Y_PLANE), (ir.Store(Y_PLANE, _node(entry)),)
    )
    adjoint = hawk.diff.vjp(hawk.trace.Kernel(entry.evaluate, kernel_ir))
    x, z = np.linspace(0.3, 2.9, 9), np.linspace(1.7, 0.4, 9)  # away from %'s steps
    bars = {"x_bar": np.zeros_like(x), "z_bar": np.zeros_like(z)}
    _run(adjoint.ir, {"x": x, "z": z, "y_bar": np.ones_like(x), **bars})
    step = 1e-6
    operands = (x, z)[: entry.arity]
    for position, plane in enumerate(("x_bar", "z_bar")[: entry.arity]):
        up = [o + step if k == position else o for k, o in enumerate(operands)]
        down = [o - step if k == position else o for k, o in enumerate(operands)]
        expected = (entry.evaluate(*up) - entry.evaluate(*down)) / (2 * step)
        np.testing.assert_allclose(bars[plane], expected, rtol=1e-6, atol=1e-9)
