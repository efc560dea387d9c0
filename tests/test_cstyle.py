# ruff: noqa: F821, F841, UP037 - kernels assign to their output planes and name table axes
# with string slices, Table["row":R], which pyflakes reads as forward references
"""The C-family renderer (``hawk/emit/_cstyle.py``) is a base a new C target subclasses:
a C++ target on the CPU, written here in a few methods, compiles with the system's C++
compiler and agrees with the numpy program."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import hawk
from hawk import ir
from hawk import math as hm
from hawk._registry.entry import CForm
from hawk.emit import Names, host
from hawk.emit._cstyle import CStyle
from hawk.emit.checks import MAX_LANES
from tests import _int_kernels
from tests._int_reference import widths_expected, widths_inputs

CXX = shutil.which("c++")


class PlainC(CStyle):
    """A C++ target on the CPU: one function that runs every lane in a loop, unchecked."""

    inline = "static inline"

    def __init__(self, kernel: ir.KernelIR, lanes: int = MAX_LANES) -> None:
        super().__init__(kernel, "double", checks=False, lanes=lanes)

    def nonfinite(self, value: float) -> str:
        return {"inf": "INFINITY", "-inf": "(-INFINITY)", "nan": "NAN"}[repr(value)]

    def read(self, node: ir.Read) -> str:
        index = self.offset(node, [self.expr(item) for item in node.index], checked=False)
        return f"{Names.plane(node.plane.name)}[{index}]"

    def store(self, stmt: ir.Store, depth: int) -> None:
        self.emit(depth, f"{Names.plane(stmt.plane.name)}[lane] = {self.value(stmt.value, depth)};")

    def accumulate(self, stmt: ir.Accumulate, depth: int) -> None:
        index = self.offset(stmt, [self.value(item, depth) for item in stmt.index], checked=False)
        value = self.value(stmt.value, depth)
        self.emit(depth, f"{Names.plane(stmt.plane.name)}[{index}] += {value};")

    def divisor(self, node: ir.Binary, text: str) -> str:
        raise AssertionError("an unchecked kernel checks no divisor")

    def function(self) -> str:
        for stmt in self.kernel.body:
            self.statement(stmt, 2)
        params = [f"double* {Names.plane(plane.name)}" for plane in self.kernel.planes]
        loads = [
            f"        const double {Names.load(p.name)} = "
            + (
                f"{Names.plane(p.name)}[0];"
                if p.kind == "param"
                else f"{Names.plane(p.name)}[lane];"
            )
            for p in self.kernel.planes
            if p.kind in ("input", "output", "param")
        ]
        return "\n".join(
            [
                "#include <math.h>",
                *self.helpers(),
                f'extern "C" void kernel({", ".join([*params, "long long n"])})',
                "{",
                "    for (long long lane = 0; lane < n; ++lane) {",
                *loads,
                *self.lines,
                "    }",
                "}",
                "",
            ]
        )


def _run_c(
    kernel: hawk.Kernel, planes: dict[str, np.ndarray], tmp: Path, lanes: int = MAX_LANES
) -> None:
    assert CXX is not None
    source = PlainC(kernel.ir, lanes).function()
    (tmp / "kernel.cpp").write_text(source)
    library = tmp / "kernel.so"
    command = [CXX, "-O1", "-shared", "-fPIC", "-o", library, tmp / "kernel.cpp"]
    subprocess.run(command, check=True, capture_output=True)
    function = ctypes.CDLL(str(library)).kernel
    pointer = ctypes.POINTER(ctypes.c_double)
    arguments: list[Any] = [planes[p.name].ctypes.data_as(pointer) for p in kernel.planes]
    function(*arguments, ctypes.c_longlong(len(planes["x"])))


@hawk.kernel
def everything(
    x: hawk.Scalar,
    a: hawk.Param,
    t: hawk.Table["row":4, "col":3],
    h: hawk.Mutable[hawk.Table["bin":5]],
    y: hawk.Mutable[hawk.Scalar],
):
    lane = hm.sample_index()
    row, col = lane // 3 % 4, lane % 3
    acc = 0.0
    for k in range(3):
        acc = acc + t.at(row=row, col=k) * (x - 2.0 * k) // 1.5
    if acc > a and not x < 0.25:
        z = hm.minimum(acc, hm.exp(x)) + hm.sqrt(hm.abs(x)) ** 1.5
    else:
        z = float(-(lane % 7)) % 2.5
    h.add(bin=int(hm.maximum(x * 5.0, 0.0)) % 5, value=z)
    y = z if col != 1 else hm.tanh(z) + float(col)


@pytest.mark.skipif(CXX is None, reason="no C++ compiler on this machine")
def test_a_c_target_is_one_subclass_of_the_c_family_renderer(rng, tmp_path) -> None:
    n = 37
    planes = {
        "x": rng.uniform(-1.0, 2.0, n),
        "a": np.array([0.3]),
        "t": rng.standard_normal(12),
        "h": np.zeros(5),
        "y": np.full(n, np.nan),
    }
    expected = {name: value.copy() for name, value in planes.items()}
    program = host.emit(everything.ir, {name: "float64" for name in planes}, checks=False)
    program.function(*(expected[name] for name in program.arguments), n)
    _run_c(everything, planes, tmp_path)
    np.testing.assert_allclose(planes["y"], expected["y"], rtol=1e-13)
    np.testing.assert_allclose(planes["h"], expected["h"], rtol=1e-12)


@pytest.mark.skipif(CXX is None, reason="no C++ compiler on this machine")
def test_ints_written_in_32_bits_keep_int64_values(rng, tmp_path) -> None:
    """Told that fewer than 2**31 lanes run, the renderer writes the ints that fit 32 bits
    as ``int`` (with the 32-bit helpers: floor division and modulo of negatives) and the
    rest as ``long long``: the compiled C gives Python's values, as the host does."""
    lanes = 2500
    planes = widths_inputs(rng, lanes)
    expected = widths_expected(planes["x"], planes["t"].reshape(5, 7))
    planes |= {name: np.full(lanes, np.nan) for name in expected}
    assert "int hawk_floordiv(int a, int b)" in PlainC(_int_kernels.widths.ir, 2**31).function()
    _run_c(_int_kernels.widths, planes, tmp_path, lanes=2**31)
    for name, values in expected.items():
        np.testing.assert_array_equal(planes[name], values, err_msg=name)


def test_a_target_overrides_an_operator_by_its_entry() -> None:
    class Fused(PlainC):
        operators: ClassVar[Mapping[str, CForm]] = {"mul": lambda out, node, a, b: f"mul({a}, {b})"}

    text = Fused(everything.ir).function()
    assert "(v4_acc + hawk_floordiv(mul(p_t[" in text
    assert "static inline double hawk_floordiv(double a, double b)" in text
    assert "hawk_add_uniform" not in text  # only the helpers the body uses
