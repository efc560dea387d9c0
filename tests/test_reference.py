# ruff: noqa: F821, F841, SIM108, UP037
# Kernels assign to their output planes (F841), name table axes with string slices (F821,
# UP037) and keep an if statement (SIM108).
"""The reference backend: a kernel interpreted one lane at a time gives what the numpy
program gives, refuses what it refuses, and runs the debugging calls the other backends
compile out."""

from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle.plan._backends import backend_named
from hawk import ir
from hawk import math as hm
from hawk.emit import cuda, host
from hawk.emit._batch import batch
from tests._hawk_kernels import CASES, Case, saxpy
from tests._route_kernels import contract


def _run(backend: str, kernel: hawk.Kernel, planes: dict[str, np.ndarray]) -> dict[str, Any]:
    out = {name: value.copy() for name, value in planes.items()}
    eagle.plan.auto(kernel, backend=backend).run(**out)
    return out


def test_it_is_registered_for_host_planes_and_shows_the_ir_it_runs() -> None:
    backend = backend_named("reference")
    assert (backend.name, backend.side) == ("reference", "host")
    plan = eagle.plan.auto(saxpy, backend="reference")
    assert plan.source("host") == str(saxpy.ir)
    assert plan.route("host") == "loop"
    routed = eagle.plan.auto(contract, contraction="gemm", backend="reference")
    assert routed.route("host") == "loop"
    assert "'reference' backend runs the kernel's own loop" in routed.reasons[0]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_every_test_kernel_matches_the_numpy_program(
    case: Case, dtype: type, rng: np.random.Generator
) -> None:
    """Bit for bit, but for the sums the numpy program makes in another order: adds into
    tables, and the carries of a loop it runs a chunk of iterations at a time."""
    planes = case.make(rng, np.dtype(dtype))
    numpy_run = _run("numpy", case.kernel, planes)
    reference_run = _run("reference", case.kernel, planes)
    reordered = {p.name for p in case.kernel.planes if p.kind == "accumulator"}
    if _chunked(case.kernel.ir):
        reordered |= {p.name for p in case.kernel.planes if p.kind == "output"}
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    for name, value in numpy_run.items():
        if name in reordered:
            np.testing.assert_allclose(reference_run[name], value, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(reference_run[name], value, err_msg=name)


def _chunked(kernel: ir.KernelIR) -> bool:
    """True when the numpy program runs a loop of ``kernel`` a chunk at a time."""
    return any(isinstance(node, ir.Loop) and batch(node) for node in ir.walk(kernel))


@hawk.kernel
def mixed(
    a: hawk.Param,
    x: hawk.Scalar,
    t: hawk.Table["row":3, "col":2],
    h: hawk.Mutable[hawk.Table],
    y: hawk.Mutable[hawk.Scalar],
):
    acc = 0.0
    for i in range(3):
        acc += t.at(col=i % 2, row=i) * x
    if x > 0.0:
        z = hm.exp(acc) + a
    else:
        z = hm.erf(acc) // 0.3
    h.add(int(x * 2.0) % 4, value=z)
    y = z + float(hm.sample_index() // 3)


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64], ids=lambda d: d.__name__
)
def test_16_bit_and_wider_planes_round_as_the_numpy_program(
    dtype: type, rng: np.random.Generator
) -> None:
    """Loads, stores and adds convert as the numpy program does, bit for bit (one add per
    table element and lane here, so the sums are made in the same order)."""
    planes = {
        "a": np.array([0.5], dtype),
        "x": rng.uniform(-2, 2, 9).astype(dtype),
        "t": rng.uniform(-1, 1, 6).astype(dtype),
        "h": rng.uniform(-1, 1, 4).astype(dtype),
        "y": np.full(9, np.nan, dtype),
    }
    numpy_run, reference_run = _run("numpy", mixed, planes), _run("reference", mixed, planes)
    for name in ("h", "y"):
        assert reference_run[name].dtype == np.dtype(dtype)
        assert np.array_equal(reference_run[name], numpy_run[name]), name


@hawk.kernel
def wraps(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]):
    big = hm.sample_index() + 9223372036854775806
    y = float(big * 3)
    z = float(-(big + 1) // 7)


def test_int64_wraps_in_twos_complement() -> None:
    planes = {"x": np.zeros(3), "y": np.zeros(3), "z": np.zeros(3)}
    numpy_run, reference_run = _run("numpy", wraps, planes), _run("reference", wraps, planes)
    big = np.arange(3, dtype=np.int64) + np.int64(9223372036854775806)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(reference_run["y"], (big * 3).astype(np.float64))
        np.testing.assert_array_equal(reference_run["z"], (-(big + 1) // 7).astype(np.float64))
    for name in ("y", "z"):
        np.testing.assert_array_equal(reference_run[name], numpy_run[name])


@hawk.kernel
def gather(
    x: hawk.Scalar, t: hawk.Table, h: hawk.Mutable[hawk.Table], y: hawk.Mutable[hawk.Scalar]
):
    h.add(0, value=x)
    k = int(x)
    y = t.at(k) + float(10 // (k - 2))


@pytest.mark.parametrize(
    ("x", "error", "message"),
    [
        ([0.0, 1.0, 7.0], hawk.PlaneIndexError, "index 7 is out of range at lane 2"),
        ([0.0, np.nan, 1.0], ValueError, "int\\(\\) of nan at lane 1"),
        ([0.0, 2.0, 1.0], ZeroDivisionError, "integer // by zero at lane 1"),
    ],
)
@pytest.mark.parametrize("backend", ["numpy", "reference"])
def test_it_refuses_what_the_numpy_program_refuses_leaving_the_planes(
    backend: str, x: list[float], error: type[Exception], message: str
) -> None:
    t, h, y = np.arange(4.0), np.zeros(1), np.full(3, -1.0)
    with pytest.raises(error, match=message):
        eagle.plan.auto(gather, backend=backend).run(x=np.array(x), t=t, h=h, y=y)
    assert h[0] == 0.0 and (y == -1.0).all()


def test_an_fp8_table_that_takes_adds_is_refused_as_on_the_host() -> None:
    planes = {
        "x": np.ones(3),
        "t": np.zeros(4),
        "h": np.zeros(1, ml_dtypes.float8_e4m3fn),
        "y": np.zeros(3),
    }
    for backend in ("numpy", "reference"):
        with pytest.raises(hawk.HawkError, match="take no adds"):
            eagle.plan.auto(gather, backend=backend).run(**planes)


def test_the_adjoint_of_a_reference_plan_runs_lane_by_lane_too(rng: np.random.Generator) -> None:
    x, y_bar = rng.standard_normal(5), rng.standard_normal(5)
    grads = {}
    for backend in ("numpy", "reference"):
        adjoint = eagle.diff.reverse(eagle.plan.auto(saxpy, backend=backend))
        grads[backend] = x_bar = np.zeros(5)
        adjoint.run(a=0.7, x=x, y_bar=y_bar, x_bar=x_bar)
    np.testing.assert_array_equal(grads["reference"], grads["numpy"])
    np.testing.assert_array_equal(grads["reference"], 0.7 * y_bar)


# -- debugging calls ----------------------------------------------------------------------


@hawk.kernel
def printed(x: hawk.Scalar, h: hawk.Mutable[hawk.Table], y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for i in range(2):
        acc += x * i
        hm.debug_print("step", i, acc)
    if x > 1.0:
        hm.debug_print("big", x)
    h.add(0, value=acc)
    y = acc


@hawk.kernel
def quiet(x: hawk.Scalar, h: hawk.Mutable[hawk.Table], y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for i in range(2):
        acc += x * i
    if x > 1.0:
        pass
    h.add(0, value=acc)
    y = acc


def test_debug_print_prints_each_lane_on_the_reference_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    x, h, y = np.array([0.5, 2.0]), np.zeros(1), np.zeros(2)
    eagle.plan.auto(printed, backend="reference").run(x=x, h=h, y=y)
    assert capsys.readouterr().out.splitlines() == [
        "lane 0: step 0 0.0",
        "lane 0: step 1 0.5",
        "lane 1: step 0 0.0",
        "lane 1: step 1 2.0",
        "lane 1: big 2.0",
    ]
    np.testing.assert_array_equal(y, [0.5, 2.0])
    eagle.plan.auto(printed).run(x=x, h=h, y=y)
    assert capsys.readouterr().out == ""


def test_debug_print_is_compiled_out_of_the_numpy_and_cuda_programs() -> None:
    assert str(printed.ir) == str(quiet.ir).replace("quiet", "printed")
    dtypes = {"x": "float32", "h": "float32", "y": "float32"}
    assert host.emit(printed.ir, dtypes).source == host.emit(quiet.ir, dtypes).source.replace(
        "quiet", "printed"
    )
    device, plain = cuda.emit(printed.ir, dtypes), cuda.emit(quiet.ir, dtypes)
    assert device.source == plain.source.replace("quiet", "printed")
    assert printed.debug_ir != printed.ir and quiet.debug_ir is quiet.ir


def test_printing_the_debug_ir_shows_each_debugging_call_where_it_sits() -> None:
    lines = [line.strip() for line in str(printed.debug_ir).splitlines()]
    assert "debug_print('step', i, acc.2)" in lines, lines
    assert any(line.startswith("debug_print('big', x)") for line in lines), lines
    assert "debug_print" not in str(printed.ir)


def test_debug_print_gives_no_value_and_prints_outside_a_kernel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(hawk.HawkError, match="gives no value; call it on a line of its own"):

        @hawk.kernel
        def misused(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
            y = hm.debug_print(x)

    hm.debug_print("outside", 1.5)
    assert capsys.readouterr().out == "outside 1.5\n"


@hawk.kernel
def stops(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    doubled = 2.0 * x
    k = hm.sample_index()
    hm.breakpoint()
    y = doubled + a


def test_breakpoint_stops_in_each_lane_with_its_values_in_scope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, Any]] = []

    def hook(*args: Any, **kwargs: Any) -> None:
        seen.append(dict(sys._getframe(1).f_locals))  # the frame pdb would stop in

    monkeypatch.setattr(sys, "breakpointhook", hook)
    x, y = np.array([1.0, -3.0], np.float32), np.zeros(2, np.float32)
    eagle.plan.auto(stops, backend="reference").run(a=0.5, x=x, y=y)
    assert [frame["lane"] for frame in seen] == [0, 1]
    assert [frame["doubled"] for frame in seen] == [2.0, -6.0]
    assert [frame["k"] for frame in seen] == [0, 1]
    assert seen[1]["x"] == np.float32(-3.0) and seen[1]["a"] == np.float32(0.5)
    assert isinstance(seen[0]["doubled"], np.float32)
    eagle.plan.auto(stops).run(a=0.5, x=x, y=y)  # compiled out: no stop
    assert len(seen) == 2


def test_breakpoint_with_arguments_is_refused() -> None:
    with pytest.raises(hawk.HawkError, match=r"hm\.breakpoint\(\) takes no arguments"):

        @hawk.kernel
        def noisy(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
            hm.breakpoint(x)
            y = x
