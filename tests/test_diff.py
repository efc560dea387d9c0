# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["i":N], which pyflakes reads as forward references (F821, UP037).
"""Reverse mode on the host: hawk.diff.vjp and eagle.diff.reverse.

Every test kernel's adjoint is checked against central finite differences in
float64 (and against closed forms where they exist); gradient planes are
added into; a table read by two launches gets the sum; a gradient plane not
passed is neither computed nor required; every adjoint compiles for sm_90.
"""

from __future__ import annotations

import gc
import importlib
import sys
import threading
import warnings
import weakref

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from eagle.cuda import compile_cuda
from hawk import HawkError, ir
from hawk import math as hm
from hawk.emit import cuda, policy
from tests._diff_kernels import (
    ALL,
    adjoint_planes,
    lanes_only,
    power_param,
    power_zero,
    random_cotangents,
    square_in_place,
)
from tests._hawk_kernels import Case, contract, histogram, horner, nested, saxpy
from tests._util import rel_error

#: lanes kept for finite differences (each lane element costs two forward runs)
FD_LANES = 48
FD_STEP = 1e-6


@hawk.kernel
def lookup(t: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(int(x * 4.0)) * x


@hawk.kernel
def binned(x: hawk.Scalar, h: hawk.Mutable[hawk.Table["bin":4]]):
    h.add(bin=int(x), value=x * x)


@hawk.kernel
def doubled(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 2.0 * x


@hawk.kernel
def repeated(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = hm.sin(x) * hm.sin(x) + 1.0 / (1.0 + x * x * (x * x))


@hawk.kernel
def scratch_loops(
    x: hawk.Scalar, a: hawk.Param, t: hawk.Table["k":2], y: hawk.Mutable[hawk.Scalar]
):
    v = x
    w = x
    u = t.at(k=0)
    for _ in range(4):
        v = v * v * a  # overflows; reaches no output
        w = w * 0.5
        u = u * u * a  # reaches nothing at all
    y = w + x * a + t.at(k=1) + (1.0 if v > 0.0 else 2.0)


@hawk.kernel
def compared_only(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    v = x
    for _ in range(200):
        v = hm.sin(v) * 0.5 + x
    y = float(1 if v > 0.0 else 2)  # v decides; it reaches y through no real operation


@hawk.kernel
def overflowing_but_unused(x: hawk.Scalar, t: hawk.Table["k":3], y: hawk.Mutable[hawk.Scalar]):
    v = x
    w = x
    for _ in range(3):
        v = v * v * 1e200
        w = w * w * 1e200
    u = x if v > 0.0 else 2.0 * x  # v only in a condition
    for _ in range(2):
        w = x * 2.0  # w overwritten on every trip of a loop that runs
    j = hm.floor(v) if v < 1e18 else 0  # v in an address (floor raises for inf)
    y = u + w + x * t.at(k=hm.minimum(hm.maximum(j, 0), 2))


@hawk.kernel
def nested_after_a_loop(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    u = x
    for _ in range(2):
        u = u * 1.5
    for _i in range(2):  # reads its carry only as the inner loop's initial value
        for _j in range(3):
            u = u * 2.0
    y = u  # 144 x


@hawk.kernel
def clash(x: hawk.Scalar, x_bar: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = x * x_bar


# -- helpers -----------------------------------------------------------------------------


def _fd_planes(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    planes = case.make(rng, np.dtype(np.float64))
    for plane in case.kernel.planes:
        if plane.is_lane:
            planes[plane.name] = planes[plane.name][:FD_LANES].copy()
    return planes


def _loss(kernel: hawk.Kernel, planes, cotangents) -> float:
    work = {name: value.copy() for name, value in planes.items()}
    eagle.plan.auto(kernel).run(**work)
    return sum(float(np.sum(bar * work[out])) for out, bar in cotangents.items())


def _finite_differences(kernel, planes, cotangents, name: str) -> np.ndarray:
    values = planes[name].reshape(-1)
    gradient = np.empty(values.size)
    for element in range(values.size):
        original = values[element]
        values[element] = original + FD_STEP
        up = _loss(kernel, planes, cotangents)
        values[element] = original - FD_STEP
        down = _loss(kernel, planes, cotangents)
        values[element] = original
        gradient[element] = (up - down) / (2 * FD_STEP)
    return gradient.reshape(planes[name].shape)


def _gradients(kernel, planes, cotangents, rng, wrt=None) -> dict[str, np.ndarray]:
    """Run the adjoint through eagle.diff.reverse; the gradient it added, by primal plane."""
    names = list(hawk.diff.gradient_planes(kernel)) if wrt is None else wrt
    given, start = adjoint_planes(kernel, planes, cotangents, names, rng)
    eagle.diff.reverse(eagle.plan.auto(kernel)).run(**given)
    gradients = hawk.diff.gradient_planes(kernel)
    return {name: given[gradients[name]] - start[gradients[name]] for name in names}


def _close(out: np.ndarray, ref: np.ndarray, tolerance: float) -> bool:
    if np.linalg.norm(ref) == 0.0:
        return float(np.max(np.abs(out), initial=0.0)) < 1e-9
    return rel_error(out, ref) < tolerance


# -- finite differences and closed forms ---------------------------------------------------


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_gradients_match_central_finite_differences(case: Case) -> None:
    rng = np.random.default_rng(sum(map(ord, case.name)))  # fixed: no draw lands on a step
    planes = _fd_planes(case, rng)
    cotangents = random_cotangents(case.kernel, planes, rng)
    gradients = _gradients(case.kernel, planes, cotangents, rng)
    assert gradients, "the kernel has planes to differentiate with respect to"
    for name, gradient in gradients.items():
        expected = _finite_differences(case.kernel, planes, cotangents, name)
        assert _close(gradient, expected, 1e-6), (name, gradient, expected)


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_an_adjoint_specialised_to_one_plane_agrees_with_the_full_one(case: Case) -> None:
    rng = np.random.default_rng(7)
    planes = _fd_planes(case, rng)
    cotangents = random_cotangents(case.kernel, planes, rng)
    full = _gradients(case.kernel, planes, cotangents, rng)
    for name in hawk.diff.gradient_planes(case.kernel):
        alone = _gradients(case.kernel, planes, cotangents, rng, wrt=[name])
        assert list(alone) == [name]
        assert np.array_equal(alone[name], full[name]) or rel_error(alone[name], full[name]) < 1e-14


def test_closed_forms(rng: np.random.Generator) -> None:
    planes = {"a": np.array([1.7]), "x": rng.standard_normal(50), "y": rng.standard_normal(50)}
    cot = {"y": rng.standard_normal(50)}
    got = _gradients(saxpy, planes, cot, rng)
    assert _close(got["a"], [np.dot(cot["y"], planes["x"])], 1e-12)
    assert _close(got["x"], 1.7 * cot["y"], 1e-12)
    assert _close(got["y"], cot["y"], 1e-12)

    w, f = rng.standard_normal((16, 8)), rng.standard_normal((16, 12))
    y_bar = rng.standard_normal(96)
    got = _gradients(contract, {"w": w, "f": f, "y": np.empty(96)}, {"y": y_bar}, rng)
    y_bar = y_bar.reshape(12, 8)  # lane = sample * U + unit
    assert _close(got["w"], f @ y_bar, 1e-12)
    assert _close(got["f"], w @ y_bar.T, 1e-12)

    c, x = rng.standard_normal(7), rng.uniform(-1, 1, 30)
    cot = {"y": rng.standard_normal(30), "dy": rng.standard_normal(30)}
    got = _gradients(horner, {"c": c, "x": x, "y": np.empty(30), "dy": np.empty(30)}, cot, rng)
    poly = np.polynomial.Polynomial(c)
    assert _close(got["x"], cot["y"] * poly.deriv(1)(x) + cot["dy"] * poly.deriv(2)(x), 1e-12)
    powers = x[None, :] ** np.arange(7)[:, None]
    slopes = np.arange(7)[:, None] * x[None, :] ** np.maximum(np.arange(7) - 1, 0)[:, None]
    assert _close(got["c"], powers @ cot["y"] + slopes @ cot["dy"], 1e-12)

    m, u, v = rng.standard_normal((5, 6)), rng.standard_normal((40, 5)), rng.standard_normal(40)
    y_bar = rng.standard_normal(40)
    got = _gradients(nested, {"m": m, "u": u, "v": v, "y": np.empty(40)}, {"y": y_bar}, rng)
    rows = m @ np.arange(1, 7)
    assert _close(got["v"], y_bar * (u @ rows), 1e-12)
    assert _close(got["u"], np.outer(y_bar * v, rows), 1e-12)
    assert _close(got["m"], np.outer(u.T @ (y_bar * v), np.arange(1, 7)), 1e-12)

    x = (rng.integers(-6, 22, 64) + 0.5) / 8.0
    planes = {"x": x, "lo": np.array([0.0]), "counts": np.zeros(8), "stats": np.zeros(3)}
    cot = {"counts": rng.standard_normal(8), "stats": rng.standard_normal(3)}
    got = _gradients(histogram, planes, cot, rng)
    assert _close(got["x"], np.full(64, cot["stats"][1]), 1e-12)
    assert np.all(got["lo"] == 0.0)  # lo only places the bins: a step


def test_float32_adjoint_matches_float64_reference(rng: np.random.Generator) -> None:
    w = rng.standard_normal((16, 8)).astype(np.float32)
    f = rng.standard_normal((16, 12)).astype(np.float32)
    y_bar = rng.standard_normal(96).astype(np.float32)
    w_bar = np.zeros((16, 8), np.float32)
    f_bar = np.zeros((16, 12), np.float32)
    eagle.diff.reverse(eagle.plan.auto(contract)).run(
        w=w, f=f, y_bar=y_bar, w_bar=w_bar, f_bar=f_bar
    )
    yb = y_bar.astype(np.float64).reshape(12, 8)
    assert w_bar.dtype == np.float32
    assert rel_error(w_bar, f.astype(np.float64) @ yb) < 1e-5
    assert rel_error(f_bar, w.astype(np.float64) @ yb.T) < 1e-5


# -- adding into gradient planes, sequences, partial requests -------------------------------


def _contractadjoint_planes(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w": rng.standard_normal((16, 8)),
        "f": rng.standard_normal((16, 12)),
        "y_bar": rng.standard_normal(96),
    }


def test_two_runs_add(rng: np.random.Generator) -> None:
    planes = _contractadjoint_planes(rng)
    start = rng.standard_normal((16, 8))
    w_bar = start.copy()
    adjoint = eagle.diff.reverse(eagle.plan.auto(contract))
    adjoint.run(**planes, w_bar=w_bar)
    adjoint.run(**planes, w_bar=w_bar)
    once = planes["f"] @ planes["y_bar"].reshape(12, 8)
    assert rel_error(w_bar, start + 2 * once) < 1e-12


def test_a_table_read_by_two_launches_gets_the_sum(rng: np.random.Generator) -> None:
    first, second = _contractadjoint_planes(rng), _contractadjoint_planes(rng)
    second["w"] = first["w"]
    w_bar = np.zeros((16, 8))
    plan = eagle.plan.auto(contract)
    sequence = eagle.diff.reverse([plan, plan])
    assert sequence.route("host") == ("loop", "loop")
    sequence.run({**first, "w_bar": w_bar}, {**second, "w_bar": w_bar})
    expected = sum(p["f"] @ p["y_bar"].reshape(12, 8) for p in (first, second))
    assert rel_error(w_bar, expected) < 1e-12


def test_a_gradient_plane_not_passed_is_not_computed_nor_required(
    rng: np.random.Generator,
) -> None:
    only_w = hawk.diff.vjp(contract, ["w"])
    assert [p.name for p in only_w.planes] == ["w", "f", "y_bar", "w_bar"]
    adds = {n.plane.name for n in ir.walk(only_w.ir) if isinstance(n, ir.Accumulate)}
    assert adds == {"w_bar"}
    assert hawk.diff.vjp(contract, ["w"]) is only_w  # one kernel per request
    assert hawk.diff.vjp(contract, ["f", "w"]) is hawk.diff.vjp(contract)

    planes = _contractadjoint_planes(rng)
    w_bar = np.zeros((16, 8))
    eagle.diff.reverse(eagle.plan.auto(contract)).run(**planes, w_bar=w_bar)
    assert rel_error(w_bar, planes["f"] @ planes["y_bar"].reshape(12, 8)) < 1e-12


N = 24


@hawk.kernel
def _squash(x: hawk.Scalar, a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = hm.tanh(a * x)


@hawk.kernel
def _neighbours(t: hawk.Table["i":N], z: hawk.Mutable[hawk.Scalar]):
    i = hm.sample_index()
    z = t.at(i=i) * t.at(i=(i + 1) % N)


def test_a_sequence_chains_through_shared_planes(rng: np.random.Generator) -> None:
    x, a, z_bar = rng.standard_normal(N), np.array([0.8]), rng.standard_normal(N)

    def loss(x: np.ndarray, a: float) -> float:
        y = np.tanh(a * x)
        return float(np.dot(z_bar, y * np.roll(y, -1)))

    y = np.full(N, np.nan)
    first, second = eagle.plan.auto(_squash), eagle.plan.auto(_neighbours)
    first.run(x=x, a=a, y=y)
    chain = np.zeros(N)  # the second launch's t_bar is the first launch's y_bar
    x_bar, a_bar = np.zeros(N), np.zeros(1)
    eagle.diff.reverse([first, second]).run(
        {"x": x, "a": a, "y_bar": chain, "x_bar": x_bar, "a_bar": a_bar},
        {"t": y, "z_bar": z_bar, "t_bar": chain},
    )
    h = 1e-6
    fd_x = [
        (loss(x + h * np.eye(N)[k], a[0]) - loss(x - h * np.eye(N)[k], a[0])) / (2 * h)
        for k in range(N)
    ]
    fd_a = (loss(x, a[0] + h) - loss(x, a[0] - h)) / (2 * h)
    assert rel_error(x_bar, fd_x) < 1e-6
    assert rel_error(a_bar, [fd_a]) < 1e-6


def test_an_output_read_first_is_taken_only_when_needed(rng: np.random.Generator) -> None:
    assert hawk.diff.gradient_planes(saxpy) == {"a": "a_bar", "x": "x_bar", "y": "y_in_bar"}
    assert "y" not in [p.name for p in hawk.diff.vjp(saxpy).planes]  # y enters linearly
    assert "y" in [p.name for p in hawk.diff.vjp(square_in_place).planes]
    adjoint = eagle.diff.reverse(eagle.plan.auto(square_in_place))
    with pytest.raises(TypeError, match=r"missing plane\(s\) 'y' \('y' is the value output 'y'"):
        adjoint.run(x=np.ones(4), y_bar=np.ones(4), x_bar=np.zeros(4))
    y0, x, y_bar, x_bar = rng.standard_normal(4), rng.standard_normal(4), np.ones(4), np.zeros(4)
    adjoint.run(x=x, y=y0, y_bar=y_bar, x_bar=x_bar)
    assert rel_error(x_bar, y0**2) < 1e-12


# -- refusals ------------------------------------------------------------------------------


def test_an_address_computed_with_int_of_differentiated_data_is_refused() -> None:
    with pytest.raises(HawkError, match=r"t\.at\(\.\.\.\) with respect to x: its address uses"):
        hawk.diff.vjp(lookup)
    with pytest.raises(HawkError, match=r"int\(x \* 4\.0\)"):
        hawk.diff.vjp(lookup, ["x"])
    with pytest.raises(HawkError, match=r"h\.add\(\.\.\.\) with respect to x"):
        hawk.diff.vjp(binned)
    hawk.diff.vjp(histogram)  # a count added at such an address carries no gradient


def test_gradient_with_respect_to_the_table_at_a_data_address() -> None:
    t = np.arange(8.0)
    x = np.array([0.3, 1.1, 1.2, 0.26])
    y_bar, t_bar = np.ones(4), np.zeros(8)
    eagle.diff.reverse(eagle.plan.auto(lookup)).run(t=t, x=x, y_bar=y_bar, t_bar=t_bar)
    expected = np.zeros(8)
    np.add.at(expected, (x * 4).astype(int), x)
    assert rel_error(t_bar, expected) < 1e-12


def test_wrt_is_checked_by_name() -> None:
    with pytest.raises(HawkError, match=r"with respect to 'q': it has no plane 'q'"):
        hawk.diff.vjp(saxpy, ["q"])
    with pytest.raises(HawkError, match="'y' is an output it writes without reading first"):
        hawk.diff.vjp(contract, ["y"])
    with pytest.raises(HawkError, match="'counts' is a table it adds into"):
        hawk.diff.vjp(histogram, ["counts"])
    with pytest.raises(HawkError, match="needs at least one plane"):
        hawk.diff.vjp(saxpy, [])
    with pytest.raises(HawkError, match="'lanes_only' has no plane to differentiate"):
        hawk.diff.vjp(lanes_only)
    with pytest.raises(TypeError, match="takes a @hawk.kernel function, not function"):
        hawk.diff.vjp(lambda x: x)


@hawk.kernel
def two_ins(y: hawk.Mutable[hawk.Scalar], y_in: hawk.Scalar):
    y = y * y_in


def test_a_name_an_adjoint_takes_already_gets_a_number(rng: np.random.Generator) -> None:
    """A plane named like one the adjoint adds (x_bar), or two added planes named alike
    (y_in's gradient and y's initial value's), were refused: the later one is numbered."""
    assert hawk.diff.gradient_planes(clash) == {"x": "x_bar2", "x_bar": "x_bar_bar"}
    assert hawk.diff.gradient_planes(two_ins) == {"y": "y_in_bar", "y_in": "y_in_bar2"}
    x, x_bar, y_bar = (rng.standard_normal(6) for _ in range(3))
    grads = {"x_bar2": np.zeros(6), "x_bar_bar": np.zeros(6)}
    eagle.plan.auto(hawk.diff.vjp(clash)).run(x=x, x_bar=x_bar, y_bar=y_bar, **grads)
    assert rel_error(grads["x_bar2"], y_bar * x_bar) < 1e-15
    assert rel_error(grads["x_bar_bar"], y_bar * x) < 1e-15
    y, y_in = rng.standard_normal(6), rng.standard_normal(6)
    grads = {"y_in_bar": np.zeros(6), "y_in_bar2": np.zeros(6)}
    eagle.plan.auto(hawk.diff.vjp(two_ins)).run(y=y, y_in=y_in, y_bar=y_bar, **grads)
    assert rel_error(grads["y_in_bar"], y_bar * y_in) < 1e-15
    assert rel_error(grads["y_in_bar2"], y_bar * y) < 1e-15


def test_reverse_checks_its_planes_by_name(rng: np.random.Generator) -> None:
    adjoint = eagle.diff.reverse(eagle.plan.auto(contract))
    planes = _contractadjoint_planes(rng)
    with pytest.raises(TypeError, match=r"pass at least one gradient plane .* \(w_bar, f_bar\)"):
        adjoint.run(**planes)
    with pytest.raises(TypeError, match="plane 'y' is an output of kernel 'contract'.*'y_bar'"):
        adjoint.run(**planes, y=np.zeros(96), w_bar=np.zeros((16, 8)))
    with pytest.raises(TypeError, match=r"unknown plane 'g_bar': the adjoint of 'contract' takes"):
        adjoint.run(**planes, g_bar=np.zeros(3), w_bar=np.zeros((16, 8)))
    with pytest.raises(TypeError, match=r"unknown plane 'wbar' .*gradient planes are w_bar, f_bar"):
        adjoint.run(**planes, wbar=np.zeros((16, 8)))  # misspelt, and no gradient plane
    del planes["y_bar"]
    with pytest.raises(TypeError, match=r"missing plane\(s\) 'y_bar': the adjoint"):
        adjoint.run(**planes, w_bar=np.zeros((16, 8)))
    with pytest.raises(TypeError, match="takes a plan from eagle.plan.auto"):
        eagle.diff.reverse(contract)
    with pytest.raises(TypeError, match=r"^pass at least one gradient plane") as refused:
        eagle.diff.reverse([eagle.plan.auto(contract), eagle.plan.auto(saxpy)]).run(
            {**_contractadjoint_planes(rng), "w_bar": np.zeros((16, 8))}, {}
        )
    assert refused.value.__notes__ == ["in launch 1 (saxpy) of the adjoint"]  # message kept
    with pytest.raises(TypeError, match="one mapping of planes per launch: 2 launch"):
        eagle.diff.reverse([eagle.plan.auto(contract)] * 2).run({})
    with pytest.raises(ValueError, match="'lanes_only' has no plane to differentiate"):
        eagle.diff.reverse(eagle.plan.auto(lanes_only))
    with pytest.raises(ValueError, match="^launch 1: kernel 'lanes_only' has no plane"):
        eagle.diff.reverse([eagle.plan.auto(contract), eagle.plan.auto(lanes_only)])


@pytest.mark.parametrize("wrt", [3, [["x"]], b"x", [None]])
def test_vjp_takes_plane_names_only(wrt: object) -> None:
    with pytest.raises(TypeError, match=r"wrt takes a plane name or a list of plane names \(from"):
        hawk.diff.vjp(saxpy, wrt)
    with pytest.raises(TypeError, match=r"broadcast takes a plane name .*\(from y\), not None"):
        hawk.diff.vjp(saxpy, broadcast=None)
    every = hawk.diff.vjp(saxpy)  # names from any iterable: gradient_planes' dict, a generator
    assert hawk.diff.vjp(saxpy, hawk.diff.gradient_planes(saxpy)) is every
    assert hawk.diff.vjp(saxpy, (name for name in ("x", "a"))) is hawk.diff.vjp(saxpy, ["a", "x"])


@pytest.mark.parametrize("accumulate", [True, False])
def test_a_flat_tables_gradient_has_its_size(rng: np.random.Generator, accumulate: bool) -> None:
    @hawk.kernel
    def flat(t: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = t.at(hm.sample_index() % 7) * x * x

    adjoint = eagle.diff.reverse(eagle.plan.auto(flat), accumulate=accumulate)
    t, x, y_bar = rng.standard_normal(7), rng.standard_normal(10), rng.standard_normal(10)
    for size in (9, 5):
        t_bar = np.full(size, 3.0)
        with pytest.raises(ValueError, match=f"'t_bar' has {size} elements, but table 't' has 7"):
            adjoint.run(t=t, x=x, y_bar=y_bar, t_bar=t_bar)
        assert (t_bar == 3.0).all()
    t_bar = np.zeros(7)
    adjoint.run(t=t, x=x, y_bar=y_bar, t_bar=t_bar)
    np.testing.assert_allclose(t_bar, np.bincount(np.arange(10) % 7, y_bar * x * x), rtol=1e-13)


def test_launch_planes_given_as_a_list_are_refused_by_name(rng: np.random.Generator) -> None:
    planes = {**_contractadjoint_planes(rng), "w_bar": np.zeros((16, 8))}
    sequence = eagle.diff.reverse([eagle.plan.auto(contract)] * 2)
    with pytest.raises(
        TypeError, match=r"launches: pass one mapping .* each as its own argument .* not one list"
    ):
        sequence.run([planes, planes])
    with pytest.raises(TypeError, match=r"launch 0: pass its planes as a mapping .* not list"):
        eagle.diff.reverse([eagle.plan.auto(contract)]).run(list(planes.items()))


def test_a_table_gradient_takes_its_tables_shape(rng: np.random.Generator) -> None:
    planes = _contractadjoint_planes(rng)
    adjoint = eagle.diff.reverse(eagle.plan.auto(contract))
    transposed = np.zeros((8, 16))
    with pytest.raises(
        ValueError,
        match=r"plane 'w_bar' is Mutable\[Table\[.*\]\]: pass an array of shape \(16, 8\)",
    ):
        adjoint.run(**planes, w_bar=transposed)
    np.testing.assert_array_equal(transposed, 0.0)
    flat = np.zeros(128)  # one row-major axis is accepted
    adjoint.run(**planes, w_bar=flat)
    assert rel_error(flat.reshape(16, 8), planes["f"] @ planes["y_bar"].reshape(12, 8)) < 1e-13


@hawk.kernel
def _gather(t: hawk.Table["bin":4], i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(bin=int(i)) * i


def test_an_adjoint_sequence_that_raises_part_way_leaves_the_gradients_as_they_were(
    rng: np.random.Generator,
) -> None:
    t = rng.standard_normal(4)
    t_bar = rng.standard_normal(4)
    start = t_bar.copy()
    plan = eagle.plan.auto(_gather)
    good = {"t": t, "i": np.array([0.0, 3.0]), "y_bar": np.ones(2), "t_bar": t_bar}
    bad = {**good, "i": np.array([1.0, 9.0])}  # bin 9 of 4
    with pytest.raises(IndexError):  # the later launch's adjoint runs (and adds) first
        eagle.diff.reverse([plan, plan]).run(bad, good)
    np.testing.assert_array_equal(t_bar, start)
    eagle.diff.reverse([plan, plan]).run(good, good)
    np.testing.assert_allclose(t_bar, start + 2 * np.array([0.0, 0.0, 0.0, 3.0]))


def test_the_adjoint_routes_where_its_primal_does() -> None:
    adjoint = eagle.diff.reverse(eagle.plan.auto(contract))
    assert adjoint.route("host") == "loop"
    assert adjoint.route("device") == "loop"
    assert any("contraction='loop'" in reason for reason in adjoint.reasons)
    with policy.using(contraction="gemm"):
        primal = eagle.plan.auto(contract)
    routed = eagle.diff.reverse(primal)
    assert primal.route("device") == routed.route("device") == "gemm"
    assert routed.reasons == ()
    assert routed.route("host") == "loop"
    assert routed.route("device", "float64") == primal.route("device", "float64") == "gemm"
    with pytest.raises(ValueError, match="side must be 'host' or 'device'"):
        adjoint.route("gpu")


# -- an adjoint for a fresh call: lane gradients stored, broadcast cotangents ---------------


def _fresh_gradients(
    case: Case, planes, cotangents, broadcast=(), zero=()
) -> dict[str, np.ndarray]:
    """The gradients of the adjoint that stores its lane gradients (they start as NaN;
    param and table gradients start at zero), with ``broadcast`` outputs' cotangents
    given as their first element and ``zero`` outputs' left out."""
    kernel = case.kernel
    adjoint = hawk.diff.vjp(
        kernel, lane_gradients="store", broadcast=broadcast, zero_cotangents=zero
    )
    given = {p.name: planes[p.name].copy() for p in adjoint.planes if p.name in planes}
    for out, cotangent in adjoint.cotangents.items():
        given[cotangent] = cotangents[out][:1].copy() if out in broadcast else cotangents[out]
    lane = {p.name for p in kernel.planes if p.is_lane}
    for name, gradient in adjoint.gradients.items():
        fill = np.nan if name in lane else 0.0
        given[gradient] = np.full(planes[name].shape, fill, planes[name].dtype)
    eagle.plan.auto(adjoint, contraction="loop").run(**given)
    return {name: given[gradient] for name, gradient in adjoint.gradients.items()}


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_an_adjoint_that_stores_lane_gradients_agrees_with_one_that_adds(case: Case) -> None:
    rng = np.random.default_rng(11)
    planes = _fd_planes(case, rng)
    cotangents = random_cotangents(case.kernel, planes, rng)
    added = _gradients(case.kernel, planes, cotangents, rng)
    stored = _fresh_gradients(case, planes, cotangents)
    assert list(stored) == list(added)
    for name, gradient in stored.items():
        assert np.all(np.isfinite(gradient)), name  # every lane wrote its gradient
        assert _close(gradient, added[name], 1e-12), (name, gradient, added[name])


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_a_broadcast_cotangent_is_one_value_for_every_lane(case: Case) -> None:
    outputs = [p.name for p in case.kernel.planes if p.kind == "output"]
    if not any(p.kind == "input" for p in case.kernel.planes):
        with pytest.raises(ValueError, match="no lane plane to count its lanes by"):
            hawk.diff.vjp(case.kernel, broadcast=outputs)
        return
    rng = np.random.default_rng(12)
    planes = _fd_planes(case, rng)
    cotangents = random_cotangents(case.kernel, planes, rng)
    for out in outputs:  # the gradient of sum(c * out): the same value on every lane
        cotangents[out] = np.full_like(cotangents[out], rng.standard_normal())
    added = _gradients(case.kernel, planes, cotangents, rng)
    shared = _fresh_gradients(case, planes, cotangents, broadcast=tuple(outputs))
    for name, gradient in shared.items():
        assert _close(gradient, added[name], 1e-12), (name, gradient, added[name])


def test_a_lane_gradient_nothing_depends_on_is_stored_as_zero(rng: np.random.Generator) -> None:
    adjoint = hawk.diff.vjp(doubled, lane_gradients="store", broadcast="y")
    x, z = rng.standard_normal(20), rng.standard_normal(20)
    x_bar, z_bar = np.full(20, np.nan), np.full(20, np.nan)
    eagle.plan.auto(adjoint).run(x=x, z=z, y_bar=np.array([3.0]), x_bar=x_bar, z_bar=z_bar)
    assert np.array_equal(x_bar, np.full(20, 6.0))
    assert np.array_equal(z_bar, np.zeros(20))


def test_vjp_options_are_checked_and_cached() -> None:
    store = hawk.diff.vjp(saxpy, lane_gradients="store", broadcast="y")
    assert store is hawk.diff.vjp(saxpy, lane_gradients="store", broadcast=["y"])
    assert store is not hawk.diff.vjp(saxpy, lane_gradients="store")
    assert store is not hawk.diff.vjp(saxpy)
    assert {p.name: p.kind for p in store.planes}["y_bar"] == "param"
    assert {p.name: p.kind for p in hawk.diff.vjp(saxpy).planes}["y_bar"] == "input"
    with pytest.raises(ValueError, match=r"lane_gradients must be 'add' or 'store', not 'write'"):
        hawk.diff.vjp(saxpy, lane_gradients="write")
    with pytest.raises(ValueError, match="broadcast names 'x', which is not a Mutable"):
        hawk.diff.vjp(saxpy, broadcast=["x"])
    with pytest.raises(ValueError, match="broadcast names 'h', which is not a Mutable"):
        hawk.diff.vjp(binned, broadcast=["h"])


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_a_zero_cotangent_left_out_gives_the_gradients_of_a_zero_cotangent_given(
    case: Case,
) -> None:
    rng = np.random.default_rng(13)
    planes = _fd_planes(case, rng)
    outputs = list(hawk.diff.cotangent_planes(case.kernel))
    lanes = {p.name for p in case.kernel.planes if p.is_lane}
    for out in outputs:
        if lanes <= {out}:  # (the output is the only lane plane)
            with pytest.raises(ValueError, match=r"zero_cotangents=\('y',\) leaves .* no lane"):
                hawk.diff.vjp(case.kernel, zero_cotangents=out)
            continue
        cotangents = random_cotangents(case.kernel, planes, rng)
        cotangents[out] = np.zeros_like(cotangents[out])
        given = _fresh_gradients(case, planes, cotangents)
        adjoint = hawk.diff.vjp(case.kernel, lane_gradients="store", zero_cotangents=out)
        assert out not in adjoint.cotangents
        assert out + "_bar" not in {p.name for p in adjoint.planes}
        left_out = _fresh_gradients(case, planes, cotangents, zero=(out,))
        for name, gradient in left_out.items():
            assert _close(gradient, given[name], 1e-12), (out, name, gradient, given[name])


@hawk.kernel
def _root_and_square(
    x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], w: hawk.Mutable[hawk.Scalar]
):
    y = x * hm.sqrt(z)
    w = x * x


def test_a_zero_cotangent_left_out_forms_no_partial_of_its_output() -> None:
    x, z = np.array([1.0, 2.0]), np.array([0.0, 4.0])  # dy/dz is +inf at z = 0
    planes = {"x": x, "z": z, "w_bar": np.ones(2), "x_bar": np.zeros(2), "z_bar": np.zeros(2)}
    zero_given = hawk.diff.vjp(_root_and_square)
    with np.errstate(invalid="ignore", divide="ignore"):
        eagle.plan.auto(zero_given).run(**planes, y_bar=np.zeros(2))
    assert np.isnan(planes["z_bar"][0])  # 0 * inf: why a zero cotangent is better left out
    planes["x_bar"][:], planes["z_bar"][:] = 0.0, 0.0
    left_out = hawk.diff.vjp(_root_and_square, zero_cotangents=["y"])
    assert list(left_out.cotangents) == ["w"]
    eagle.plan.auto(left_out).run(**planes)
    np.testing.assert_array_equal(planes["x_bar"], 2 * x)
    np.testing.assert_array_equal(planes["z_bar"], [0.0, 0.0])
    with pytest.raises(TypeError, match=r"missing plane\(s\) 'w_bar'"):
        eagle.plan.auto(hawk.diff.vjp(_root_and_square, zero_cotangents="y")).run(x=x, z=z)


def test_zero_cotangents_is_checked_and_cached() -> None:
    adjoint = hawk.diff.vjp(_root_and_square, zero_cotangents="y")
    assert adjoint is hawk.diff.vjp(_root_and_square, zero_cotangents=("y",))
    assert adjoint is not hawk.diff.vjp(_root_and_square)
    with pytest.raises(ValueError, match="zero_cotangents names 'x', which is not a Mutable plane"):
        hawk.diff.vjp(_root_and_square, zero_cotangents="x")
    with pytest.raises(ValueError, match="'y' is named in both broadcast and zero_cotangents"):
        hawk.diff.vjp(_root_and_square, broadcast="y", zero_cotangents="y")
    with pytest.raises(TypeError, match=r"zero_cotangents takes a plane name .*, not 3"):
        hawk.diff.vjp(_root_and_square, zero_cotangents=3)
    every = hawk.diff.vjp(_root_and_square, zero_cotangents=["y", "w"])
    assert every.cotangents == {}  # every gradient is zero


def test_threads_that_race_for_an_adjoint_or_a_plan_all_get_the_same_one() -> None:
    @hawk.kernel
    def raced(x: hawk.Scalar, c: hawk.Table["k":8], y: hawk.Mutable[hawk.Scalar]):
        p = 0.0
        for k in range(8):
            p = p * x + hm.tanh(c.at(k=k) * x)
        y = p

    barrier, got = threading.Barrier(8), []

    def take() -> None:
        barrier.wait()
        got.append((hawk.diff.vjp(raced), eagle.plan.auto(raced)._shared))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads switch often, so that they race)
    try:
        threads = [threading.Thread(target=take) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(got) == 8
    assert all(adjoint is got[0][0] and shared is got[0][1] for adjoint, shared in got)


# -- the device source ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
@pytest.mark.parametrize("store", [False, True], ids=["add", "store"])
def test_every_adjoint_compiles_for_sm90(case: Case, dtype: str, store: bool) -> None:
    lanes_left = any(p.kind == "input" for p in case.kernel.planes)
    outputs = [p.name for p in case.kernel.planes if p.kind == "output" and store and lanes_left]
    lane_gradients = "store" if store else "add"
    adjoint = hawk.diff.vjp(case.kernel, lane_gradients=lane_gradients, broadcast=outputs)
    emitted = cuda.emit(adjoint.ir, {p.name: dtype for p in adjoint.planes})
    assert compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


def test_table_gradients_are_atomic_adds() -> None:
    adjoint = hawk.diff.vjp(contract)
    source = cuda.emit(adjoint.ir, {p.name: "float32" for p in adjoint.planes}).source
    assert source.count("atomicAdd(&p_w_bar[") == 1
    assert source.count("atomicAdd(&p_f_bar[") == 1
    loops = [node for node in ir.walk(adjoint.ir) if isinstance(node, ir.Loop)]
    assert len(loops) == 1  # the fold's adjoint reruns nothing


def test_a_kernel_and_its_adjoint_go_when_the_kernel_goes(tmp_path, monkeypatch):
    """The adjoint refers to its primal, so it is kept on the kernel (not in a global
    cache keyed by it): both are collected once the caller drops the kernel."""
    (tmp_path / "leak_kernels.py").write_text(
        "import hawk\n\n\n"
        "def make():\n"
        "    @hawk.kernel\n"
        "    def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):\n"
        "        y = a * x + y\n\n"
        "    return axpy\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel = importlib.import_module("leak_kernels").make()
    adjoint = hawk.diff.vjp(kernel)
    assert hawk.diff.vjp(kernel) is adjoint  # still made once per request
    reverse = eagle.diff.reverse(eagle.plan.auto(kernel))
    reverse.run(a=2.0, x=np.ones(4), y_bar=np.ones(4), x_bar=np.zeros(4))
    refs = weakref.ref(kernel), weakref.ref(adjoint)
    del kernel, adjoint, reverse
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


@pytest.mark.parametrize("backend", [None, "reference"])
def test_a_power_has_zero_partials_where_it_does_not_change(backend):
    """x ** 0 has no slope in x (NaN x too), 0 ** a (a >= 0) none in a: no 0 * inf NaN, as
    in torch."""
    x = np.array([0.0, 1.0, 2.0, np.nan])
    x_bar = np.full(4, np.nan)
    eagle.diff.reverse(eagle.plan.auto(power_zero, backend=backend), accumulate=False).run(
        x=x, y_bar=np.ones(4), x_bar=x_bar
    )
    np.testing.assert_array_equal(x_bar, [1.0, 1.0, 1.0, 1.0])
    a_bar = np.zeros(1)
    x = np.array([0.0, 1.0, 2.0])
    eagle.diff.reverse(eagle.plan.auto(power_param, backend=backend)).run(
        x=x, a=2.0, y_bar=np.ones(3), a_bar=a_bar
    )
    np.testing.assert_allclose(a_bar, [4.0 * np.log(2.0)], rtol=1e-14)
    x_bar = np.zeros(3)
    eagle.diff.reverse(eagle.plan.auto(power_param, backend=backend)).run(
        x=x, a=2.0, y_bar=np.ones(3), x_bar=x_bar
    )
    np.testing.assert_allclose(x_bar, 2.0 * x, rtol=1e-14)


@pytest.mark.parametrize("backend", [None, "reference"])
def test_an_adjoints_adjoint_names_its_values_apart_from_the_adjoints(backend, rng):
    # the adjoint's own variables are named as the adjoint's adjoint names its new ones
    # (<base>.d<k>): with the same k, a repeated value's partials were mixed up
    first = hawk.diff.vjp(repeated, ["x"], lane_gradients="store")
    second = hawk.diff.vjp(first, ["x", "y_bar"], lane_gradients="store")
    x, y_bar, x_bar_bar = (rng.standard_normal(7) for _ in range(3))
    planes = {"x_bar": np.zeros(7), "y_bar_bar": np.zeros(7)}
    eagle.plan.auto(second, backend=backend).run(x=x, y_bar=y_bar, x_bar_bar=x_bar_bar, **planes)
    slope = np.sin(2 * x) - 4 * x**3 / (1 + x**4) ** 2  # dy/dx
    curve = 2 * np.cos(2 * x) + (-12 * x**2 * (1 + x**4) + 32 * x**6) / (1 + x**4) ** 3
    np.testing.assert_allclose(planes["y_bar_bar"], x_bar_bar * slope, rtol=1e-12)
    np.testing.assert_allclose(planes["x_bar"], x_bar_bar * y_bar * curve, rtol=1e-10)
    names = [s.var.name for s in second.ir.body if isinstance(s, ir.Let)]
    first_names = {s.var.name for s in first.ir.body if isinstance(s, ir.Let)}
    assert len(names) == len(set(names)) and not first_names & set(names)


@pytest.mark.parametrize("backend", [None, "reference"])
def test_a_loop_carry_that_reaches_no_output_is_not_swept(backend):
    # its zero gradient times its infinite partials made the other gradients NaN
    x, t = np.array([1.0, 2.0, 0.5]), np.array([3.0, 4.0])
    grads = {"x_bar": np.zeros(3), "a_bar": np.zeros(1), "t_bar": np.zeros(2)}
    plan = eagle.plan.auto(scratch_loops, backend=backend)
    eagle.diff.reverse(plan).run(x=x, a=1e100, t=t, y_bar=np.ones(3), **grads)
    np.testing.assert_array_equal(grads["x_bar"], 0.5**4 + 1e100)
    np.testing.assert_array_equal(grads["a_bar"], [x.sum()])
    np.testing.assert_array_equal(grads["t_bar"], [0.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no rerun of a loop whose gradient is zero
        x_bar = np.full(3, np.nan)
        eagle.diff.reverse(eagle.plan.auto(compared_only, backend=backend), accumulate=False).run(
            x=x, y_bar=np.ones(3), x_bar=x_bar
        )
    np.testing.assert_array_equal(x_bar, np.zeros(3))
    x_bar = np.zeros(3)
    t = np.array([2.0, 3.0, 5.0])
    eagle.diff.reverse(eagle.plan.auto(overflowing_but_unused, backend=backend)).run(
        x=x, t=t, y_bar=np.ones(3), x_bar=x_bar
    )
    # v is inf: u = x, and the address is 0: t.at(k=0)
    np.testing.assert_array_equal(x_bar, [1.0 + 2.0 + 2.0] * 3)
    x_bar = np.zeros(3)  # a carry read only as a nested loop's initial value is read
    eagle.diff.reverse(eagle.plan.auto(nested_after_a_loop, backend=backend)).run(
        x=x, y_bar=np.ones(3), x_bar=x_bar
    )
    np.testing.assert_array_equal(x_bar, [144.0] * 3)
