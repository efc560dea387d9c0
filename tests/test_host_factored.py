"""Chunked host loops on factored lanes (hawk/emit/_factor.py): the same results as a
float64 numpy reference, on factored lanes and where ``n`` leaves them (the lane form),
checks that name the same lane, and the loops that keep their lanes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from hawk import ir
from hawk.emit import host
from tests import _factored_kernels as fk
from tests._util import rel_error


def _program(kernel: ir.KernelIR, dtype: str = "float64") -> host.HostProgram:
    return host.emit(kernel, {plane.name: dtype for plane in kernel.planes})


def _run(kernel: ir.KernelIR, planes: dict[str, Any], n: int) -> None:
    """Run the host program of ``kernel`` on ``n`` lanes (its launch checks unmade)."""
    program = _program(kernel)
    program.function(*(np.asarray(planes[name]).reshape(-1) for name in program.arguments), n)


def _scaled_reference(
    a: float, w: np.ndarray, f: np.ndarray, x: np.ndarray, y_bar: np.ndarray
) -> dict[str, np.ndarray]:
    """``y`` of :func:`fk.scaled_contract` and its gradients, float64 (``x``, ``y_bar``
    as ``(B, U)``)."""
    product = f.T @ w  # (B, U)
    weight = y_bar * x
    return {
        "y": (a * product * x).reshape(-1),
        "a_bar": np.array([np.sum(weight * product)]),
        "w_bar": a * f @ weight,
        "f_bar": a * w @ weight.T,
        "x_bar": (a * y_bar * product).reshape(-1),
    }


def _a_bar_error(got: float, w, f, x, y_bar, want: float) -> float:
    """``a_bar``'s error against the magnitudes of the ``R * B * U`` terms it sums: they
    have either sign, so the sum can be far smaller than they are."""
    terms = np.sum(np.abs(y_bar * x) * (np.abs(f).T @ np.abs(w)))
    return abs(got - want) / terms


@settings(max_examples=25, deadline=None)
@given(
    R=st.integers(1, 5),
    U=st.integers(2, 6),
    B=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_a_product_and_its_adjoint_on_factored_lanes_match_numpy(
    R: int, U: int, B: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    kernel = fk.scaled_contract(R, U, B)
    if R > 1:  # a loop of one iteration runs as it is, unchunked
        assert "_carry_product(" in _program(kernel.ir).source
        assert "_add_product(" in _program(hawk.diff.vjp(kernel).ir).source
    a = float(rng.standard_normal())
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    x, y_bar = rng.standard_normal((B, U)), rng.standard_normal((B, U))
    ref = _scaled_reference(a, w, f, x, y_bar)
    y = np.full(B * U, np.nan)
    eagle.plan.auto(kernel).run(a=a, w=w, f=f, x=x.reshape(-1), y=y)
    assert rel_error(y, ref["y"]) < 1e-12
    grads = {
        "a_bar": np.zeros(1),
        "w_bar": np.zeros((R, U)),
        "f_bar": np.zeros((R, B)),
        "x_bar": np.zeros(B * U),
    }
    adjoint = eagle.diff.reverse(eagle.plan.auto(kernel))
    adjoint.run(a=a, w=w, f=f, x=x.reshape(-1), y_bar=y_bar.reshape(-1), **grads)
    for name in ("w_bar", "f_bar", "x_bar"):
        assert rel_error(grads[name], ref[name]) < 1e-12, name
    assert _a_bar_error(grads["a_bar"][0], w, f, x, y_bar, ref["a_bar"][0]) < 1e-12


@pytest.mark.parametrize("shape", [(64, 32, 128), (300, 2, 3), (5, 64, 512)])
def test_the_seed_adjoint_in_float32_on_factored_lanes_matches_numpy(
    shape: tuple[int, int, int], rng: np.random.Generator
) -> None:
    R, U, B = shape
    kernel = fk.scaled_contract(R, U, B)
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    x, y_bar = rng.standard_normal((B, U)), rng.standard_normal((B, U))
    ref = _scaled_reference(1.0, w, f, x, y_bar)
    planes = {
        "a": np.ones(1),
        "w": w,
        "f": f,
        "x": x,
        "y_bar": y_bar,
        "a_bar": np.zeros(1),
        "w_bar": np.zeros((R, U)),
        "f_bar": np.zeros((R, B)),
        "x_bar": np.zeros(B * U),
    }
    planes = {name: value.astype(np.float32) for name, value in planes.items()}
    vjp = hawk.diff.vjp(kernel).ir
    program = _program(vjp, "float32")
    program.function(*(planes[name].reshape(-1) for name in program.arguments), B * U)
    for name in ("w_bar", "f_bar", "x_bar"):
        assert rel_error(planes[name], ref[name]) < 1e-5, name
    assert _a_bar_error(planes["a_bar"][0], w, f, x, y_bar, ref["a_bar"][0]) < 1e-5


@pytest.mark.parametrize("cut", [0, 1, 5])
def test_lanes_that_are_not_whole_groups_run_the_lane_form(
    cut: int, rng: np.random.Generator
) -> None:
    # n = B * U - cut: the program picks the lane form for cut > 0; the lanes it runs
    # are the first n of the reference's
    R, U, B = 4, 6, 3
    n = B * U - cut
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    x, y_bar = rng.standard_normal((B, U)), rng.standard_normal((B, U))
    x_lanes = x * (np.arange(B * U) < n).reshape(B, U)
    ref = _scaled_reference(0.5, w, f, x_lanes, y_bar)
    y = np.zeros(n)
    x_n, y_bar_n = x.reshape(-1)[:n], y_bar.reshape(-1)[:n]
    _run(fk.scaled_contract(R, U, B).ir, {"a": [0.5], "w": w, "f": f, "x": x_n, "y": y}, n)
    assert rel_error(y, ref["y"][:n]) < 1e-12
    grads = {"a_bar": np.zeros(1), "w_bar": np.zeros((R, U)), "f_bar": np.zeros((R, B))}
    planes = {"a": [0.5], "w": w, "f": f, "x": x_n, "y_bar": y_bar_n, "x_bar": np.zeros(n)}
    _run(hawk.diff.vjp(fk.scaled_contract(R, U, B)).ir, {**planes, **grads}, n)
    for name in ("w_bar", "f_bar"):
        assert rel_error(grads[name], ref[name]) < 1e-12, name
    assert _a_bar_error(grads["a_bar"][0], w, f, x_lanes, y_bar, ref["a_bar"][0]) < 1e-12


def test_a_sum_that_is_no_product_and_an_add_by_unit_on_factored_lanes(
    rng: np.random.Generator,
) -> None:
    R, U, B = 5, 4, 6
    kernel = fk.shifted_sum(R, U, B)
    assert "_add_product(" in _program(kernel.ir).source
    w, f, t = rng.standard_normal((R, U)), rng.standard_normal((R, B)), rng.standard_normal(R)
    y, total = np.full(B * U, np.nan), np.zeros(U)
    eagle.plan.auto(kernel).run(w=w, f=f, t=t, y=y, total=total)
    ref = w.sum(0)[None, :] + f.sum(0)[:, None] - t.sum()
    assert rel_error(y, ref.reshape(-1)) < 1e-12
    assert rel_error(total, B * w.sum(0)) < 1e-12


_BIG = float(np.finfo(np.float32).max) / 2


@pytest.mark.parametrize(
    "case",
    [
        # terms of +-inf whose factored sum cancels: sum(x) * w = 1 * w
        ("terms overflow", [_BIG, -_BIG, 1.0], [4.0, 4.0]),
        # finite terms whose factored sum overflows: x * sum(w) = x * inf
        ("sum of a factor overflows", [1e-3, 2e-3, 1e-3], [_BIG, _BIG, _BIG]),
        ("a factor is NaN", [1.0, np.nan, 2.0], [1.0, 3.0]),
        # a term 0 * inf is NaN; sum(x) * w is (0 + 1 + 2) * inf = inf
        ("a factor is inf beside a zero", [0.0, 1.0, 2.0], [np.inf, 1.0]),
    ],
    ids=lambda case: case[0],
)
def test_a_factored_sum_overflows_or_not_as_the_lane_by_lane_kernel(case: tuple) -> None:
    """Summed as factors, a float32 sum of products would give a number where the
    kernel's terms give NaN, or inf where they give a number: the host forms the terms
    then, and agrees with the reference backend (lane by lane, as the device runs)."""
    _, samples, weights = case
    U = 4
    kernel = fk.scaled_sums(len(weights), U)
    program = host.emit(kernel.ir, {plane.name: "float32" for plane in kernel.ir.planes})
    assert "_add_product(" in program.source and "_carry_product(" in program.source
    x = np.repeat(np.asarray(samples, np.float32), U) * np.tile(
        np.float32([1, -1, 1.5, 2]), len(samples)
    )
    w = np.repeat(np.asarray(weights, np.float32)[:, None], U, axis=1)
    got = {}
    for backend in ("numpy", "reference"):
        h, y = np.zeros(U, np.float32), np.full(x.size, np.nan, np.float32)
        with np.errstate(all="ignore"):
            eagle.plan.auto(kernel, backend=backend).run(x=x, w=w, h=h, y=y)
        got[backend] = h, y
    for host_out, lane_out in zip(got["numpy"], got["reference"], strict=True):
        np.testing.assert_allclose(host_out, lane_out, rtol=1e-6)


_CARRIES = ("by_lane", "by_row", "repeated", "shifted")


def _carried_in_kernel_order(
    x: np.ndarray, s: np.ndarray, a: np.float32, w: np.ndarray, v: np.ndarray
) -> list[np.ndarray]:
    """:func:`fk.carried` lane by lane in float32 numbers, each term added to the running
    carry in turn, as the kernel's loop adds them."""
    outs: list[list[np.float32]] = [[] for _ in _CARRIES]
    for lane, (x_lane, s_lane) in enumerate(zip(x, s, strict=True)):
        lane_acc = row_acc = repeat_acc = a
        shift_acc = s_lane
        for r in range(len(v)):
            lane_acc = lane_acc + x_lane * w[r, lane % w.shape[1]]
            row_acc = row_acc + a * v[r]
            repeat_acc = repeat_acc - s_lane
            shift_acc = shift_acc - a
        for out, value in zip(outs, (lane_acc, row_acc, repeat_acc, shift_acc), strict=True):
            out.append(value)
    return [np.array(out, np.float32) for out in outs]


@pytest.mark.parametrize("a", [np.finfo(np.float32).max, np.inf], ids=["max", "inf"])
@pytest.mark.parametrize("lanes", [4, 3, 1], ids=["factored", "lane form", "one lane"])
def test_a_carry_overflows_or_not_as_the_kernels_running_sum(a: float, lanes: int) -> None:
    """Added to a carry a chunk at a time, ``acc + (t0 + t1)``, float32 terms near the
    float limit would give a number where the kernel's running sum ``(acc + t0) + t1``
    overflows to inf, -inf where it stays finite, or NaN where it stays inf: the host
    adds such a chunk's terms to the carry in turn then, as the kernel does."""
    kernel = fk.carried(2, 2)
    assert "_factored(" in _program(kernel.ir, "float32").source
    big = np.finfo(np.float32).max
    x = np.float32([big / 2, -big / 2, 1.0, big / 4])[:lanes]
    s = np.float32([big, -big, 1.0, 0.0])[:lanes]
    w, v = np.float32([[1.0, 0.5], [-1.0, -0.5]]), np.float32([1.0, -1.0])
    outs = {name: np.full(lanes, np.nan, np.float32) for name in _CARRIES}
    with np.errstate(all="ignore"):
        want = _carried_in_kernel_order(x, s, np.float32(a), w, v)
        plan = eagle.plan.auto(kernel, backend="numpy")
        plan.run(x=x, s=s, a=np.float32(a), w=w, v=v, **outs)
    for (name, got), expected in zip(outs.items(), want, strict=True):
        np.testing.assert_array_equal(got, expected, err_msg=name)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_terms_formed_on_factored_lanes_are_grouped_as_the_kernel_groups_them(dtype):
    """``x * (w * a)`` with x the largest float, w 2 and a 0.25 is half of it in the kernel;
    multiplied left to right, ``(x * w) * a``, it would be inf."""
    kernel = fk.grouped_add(4, 16)
    source = host.emit(kernel.ir, {plane.name: dtype for plane in kernel.ir.planes}).source
    assert "(0, (1, 2))" in source
    big = np.finfo(dtype).max
    x, w, a = np.full(32, big, dtype), np.full((4, 16), 2.0, dtype), np.array([0.25], dtype)
    got = {}
    for backend in ("numpy", "reference"):
        t = np.zeros((4, 16), dtype)
        with np.errstate(all="ignore"):
            eagle.plan.auto(kernel, backend=backend).run(x=x, a=a, w=w, t=t)
        got[backend] = t
    assert np.isfinite(got["numpy"]).all()
    np.testing.assert_allclose(got["numpy"], got["reference"], rtol=1e-6)


def _first_failure(col: np.ndarray, extent: int) -> tuple[int, int]:
    """The first iteration's first lane (of ``col``, ``(R, n)``) out of ``[0, extent)``:
    ``(lane, index)``."""
    for row in col:
        bad = (row < 0) | (row >= extent)
        if bad.any():
            lane = int(bad.argmax())
            return lane, int(row[lane])
    raise AssertionError("no lane fails")


@pytest.mark.parametrize("cut", [0, 3])
def test_a_check_on_factored_lanes_names_the_first_iteration_then_the_first_lane(
    cut: int,
) -> None:
    R, U, C, B = 3, 4, 9, 5
    n = B * U - cut
    k = np.array([2.0, 0.0, 5.0, 1.0])
    lane = np.arange(n)
    # col = k[u] + s + r: lanes with k[u] + s >= 7 fail at r = 2 first, the first lane
    # with k[u] + s = 9 at r = 0
    col = k[lane % U].astype(np.int64) + lane // U + np.arange(R)[:, None]
    expected = _first_failure(col, C)
    assert expected[0] % U and expected[0] // U  # neither the group's first nor group 0
    with pytest.raises(hawk.PlaneIndexError) as caught:
        _run(fk.indirect(R, U, C).ir, {"t": np.ones((R, C)), "k": k, "y": np.zeros(n)}, n)
    assert (caught.value.lane, caught.value.index, caught.value.extent) == (*expected, C)


@pytest.mark.parametrize("cut", [0, 1])
def test_a_divisor_checked_on_factored_lanes_names_the_first_lane(cut: int) -> None:
    R, U, B = 3, 4, 5
    n = B * U - cut
    k = np.array([9.0, 3.0, 9.0, 9.0])  # int(k[u]) - s is zero at s = 3, u = 1 (lane 13)
    with pytest.raises(ZeroDivisionError, match="at lane 13,"):
        _run(fk.divided(R, U).ir, {"k": k, "y": np.zeros(n)}, n)
    k[1] = 9.0
    y = np.zeros(n)
    _run(fk.divided(R, U).ir, {"k": k, "y": y}, n)
    lane = np.arange(n)
    s, d = lane // U, k[lane % U].astype(np.int64) - lane // U
    assert np.array_equal(y, sum((r + s) // d for r in range(R)))


def test_a_loop_of_two_lane_splits_keeps_its_lanes(rng: np.random.Generator) -> None:
    kernel = fk.two_splits(3)
    assert "_factored(" not in _program(kernel.ir).source
    w, y = rng.standard_normal((3, 12)), np.zeros(12)
    eagle.plan.auto(kernel).run(w=w, y=y)
    lane = np.arange(12)
    assert rel_error(y, w[:, lane % 4 + lane % 6].sum(0)) < 1e-12
