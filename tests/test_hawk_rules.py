# ruff: noqa: F841 - kernels assign to their output planes
"""Every pass and emitter dispatches on IR node classes through a rule table
(:mod:`hawk.ir.rules`): each table has a rule for every IR class, and a class without
rules is refused by every one, by name, never handled by a default (a silent zero
gradient being the worst)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import hawk
import hawk.diff
from hawk import ir
from hawk._activity import Activity, _flows
from hawk._adjoint import Adjoint, GradientNamer
from hawk._fold import fold
from hawk._passes import Namer, flatten, prune
from hawk.emit import cuda, host, reference
from hawk.emit.checks import Ranges
from hawk.kinds import PlaneKind, Type

X = ir.Plane("x", PlaneKind.INPUT)
Y = ir.Plane("y", PlaneKind.OUTPUT)
DTYPES = {"x": "float64", "y": "float64"}


@dataclass(frozen=True)
class Mystery(ir.Expr):
    """A real expression class no pass has a rule for."""

    type: Type = field(init=False, default=Type.REAL)
    varying: bool = field(init=False, default=True)


@dataclass(frozen=True)
class Ritual(ir.Stmt):
    """A statement class no pass has a rule for."""


def _with_expression() -> ir.KernelIR:
    value = ir.Var("v", Type.REAL, True)
    body = (ir.Let(value, Mystery()), ir.Store(Y, ir.Ref(value)))
    return ir.KernelIR("mystery", (X, Y), body)


def _with_statement() -> ir.KernelIR:
    return ir.KernelIR("ritual", (X, Y), (Ritual(), ir.Store(Y, ir.Load(X))))


def _adjoint() -> Adjoint:
    return Adjoint("k", GradientNamer(), Activity({X}), {X: X}, {Y: Y}, {X: X})


def _activity(kernel: ir.KernelIR) -> None:
    Activity({X}).block(kernel.body)


# How each table's pass or emitter is run on IR that holds the new class: by the table's
# name and family. A table made without a driver here fails the test below.
EXPRESSION = ir.Expr
STATEMENT = ir.Stmt
DRIVERS: dict[tuple[str, type], Callable[[], Any]] = {
    ("printing", EXPRESSION): lambda: str(Mystery()),
    ("printing", STATEMENT): lambda: str(_with_statement()),
    ("fold", EXPRESSION): lambda: fold(Mystery()),
    ("activity", EXPRESSION): lambda: _activity(_with_expression()),
    ("activity", STATEMENT): lambda: _activity(_with_statement()),
    ("activity flows", STATEMENT): lambda: _flows([Ritual()]),
    ("adjoint", EXPRESSION): lambda: _adjoint().backprop(Mystery(), ir.Load(Y), {}, {}),
    ("adjoint forward", STATEMENT): lambda: _adjoint().forward([Ritual()], {}),
    ("adjoint reverse", STATEMENT): lambda: _adjoint().reverse((Ritual(),), {}, {}),
    ("flatten", EXPRESSION): lambda: flatten(_with_expression().body, Namer()),
    ("flatten", STATEMENT): lambda: flatten(_with_statement().body, Namer()),
    ("prune", STATEMENT): lambda: prune([Ritual()], set()),
    ("launch checks", EXPRESSION): lambda: Ranges(_with_expression()),
    ("launch checks", STATEMENT): lambda: Ranges(_with_statement()),
    # unchecked, so the emitters' own rules are reached rather than the checks' analysis
    ("host emitter", EXPRESSION): lambda: host.emit(_with_expression(), DTYPES, checks=False),
    ("host emitter", STATEMENT): lambda: host.emit(_with_statement(), DTYPES, checks=False),
    ("C emitter", EXPRESSION): lambda: cuda.emit(_with_expression(), DTYPES, checks=False),
    ("C emitter", STATEMENT): lambda: cuda.emit(_with_statement(), DTYPES, checks=False),
    ("reference", EXPRESSION): lambda: _interpret(_with_expression()),
    ("reference", STATEMENT): lambda: _interpret(_with_statement()),
}


def _interpret(kernel: ir.KernelIR) -> None:
    reference.emit(kernel, DTYPES).function(np.zeros(2), np.zeros(2), 2)


def _key(table: ir.Rules[Any]) -> tuple[str, type]:
    return table.name, table.family


def test_every_table_has_a_driver_here() -> None:
    assert sorted(map(str, DRIVERS)) == sorted(str(_key(table)) for table in ir.TABLES)


@pytest.mark.parametrize("table", ir.TABLES, ids=lambda t: f"{t.name}/{t.family.__name__}")
def test_every_table_has_a_rule_for_every_class(table: ir.Rules[Any]) -> None:
    every = set(ir.EXPRESSIONS if table.family is ir.Expr else ir.STATEMENTS)
    if _key(table) == ("printing", ir.Stmt):
        every.add(ir.Debug)  # a kernel's debug_ir holds its debugging calls, and prints
    assert table.classes == every


@pytest.mark.parametrize("table", ir.TABLES, ids=lambda t: f"{t.name}/{t.family.__name__}")
def test_a_class_without_rules_is_refused_by_every_table(table: ir.Rules[Any]) -> None:
    node = Mystery() if table.family is ir.Expr else Ritual()
    name = type(node).__name__
    with pytest.raises(hawk.HawkError, match=f"^no {table.name} rule for {name}$"):
        table(node)
    with pytest.raises(hawk.HawkError, match=f"^no {table.name} rule for {name}$"):
        DRIVERS[_key(table)]()


def test_the_adjoint_refuses_rather_than_giving_a_zero_gradient() -> None:
    adjoint, grads = _adjoint(), {}
    with pytest.raises(hawk.HawkError, match="no adjoint rule for Mystery"):
        adjoint.backprop(Mystery(), ir.Load(Y), {}, grads)
    assert grads == {} and adjoint.out == []
    kernel = hawk.trace.Kernel(lambda: None, _with_expression())
    with pytest.raises(hawk.HawkError, match="no flatten rule for Mystery"):
        hawk.diff.vjp(kernel)


def test_a_table_refuses_a_second_rule_and_a_class_of_another_family() -> None:
    table: ir.Rules[Callable[..., None]] = ir.Rules("probe", ir.Expr)
    ir.TABLES.remove(table)  # a probe, not a pass
    table.rule(ir.Lane)(lambda node: None)
    with pytest.raises(ValueError, match="probe has a rule for Lane already"):
        table.rule(ir.Lane)(lambda node: None)
    with pytest.raises(TypeError, match="probe: Let is not a Expr"):
        table.rule(ir.Let)(lambda node: None)


def test_a_known_kernel_still_runs_through_the_tables() -> None:
    @hawk.kernel
    def mixed(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        k = int(x * 3.0) // 2
        y = hawk.math.exp(x) * 2.0 + float(k) if x > 0.5 and k >= 0 else -x

    x = np.linspace(0.0, 1.0, 11)
    y = np.zeros_like(x)
    program = host.emit(mixed.ir, DTYPES)
    program.function(x, y, len(x))
    k = (x * 3.0).astype(np.int64) // 2
    np.testing.assert_allclose(y, np.where((x > 0.5) & (k >= 0), np.exp(x) * 2.0 + k, -x))
