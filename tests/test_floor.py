# ruff: noqa: F841 - a kernel assigns its output plane
"""``hawk.math.floor``: an int from a real, usable in a table address, whose derivative is
zero (an address through it is piecewise constant for ``hawk.diff``)."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from eagle.cuda import compile_cuda
from hawk import math as hm
from hawk.emit import cuda, host
from hawk.errors import HawkOverflowError, HawkValueError
from hawk.kinds import Type
from tests._floor_kernels import (
    KNOTS,
    SCALE,
    floors,
    interpolate,
    quarters,
    truncated,
    unclamped,
)


def test_floor_outside_a_kernel_gives_ints() -> None:
    values = np.array([-1.5, -1.0, -0.25, 0.0, 0.75, 2.0, 1e18])
    got = hm.floor(values)
    assert got.dtype == np.int64
    assert got.tolist() == [-2, -1, -1, 0, 0, 2, 10**18]
    assert hm.floor(2.5) == 2 and isinstance(hm.floor(-0.5), int)
    assert hm.floor(-(2.0**63)) == -(2**63)  # the least int64 is an int, as in a kernel


@pytest.mark.parametrize(
    ("value", "error"),
    [(np.nan, HawkValueError), (np.inf, OverflowError), (-1e300, OverflowError)],
)
def test_floor_outside_a_kernel_refuses_what_no_int_holds(value: float, error: type) -> None:
    with pytest.raises(error, match=r"hm\.floor\(\) of .*: an int is finite and within int64$"):
        hm.floor(value)
    with pytest.raises(error):
        hm.floor(np.array([1.0, value]))


@pytest.mark.parametrize("backend", ["numpy", "reference"])
@pytest.mark.parametrize(
    ("value", "error"),
    [(np.nan, HawkValueError), (np.inf, HawkOverflowError), (-1e30, OverflowError)],
)
def test_floor_in_a_kernel_raises_as_int_does(backend: str, value: float, error: type) -> None:
    """NaN, +-inf and reals beyond int64 raise, naming the lane, wherever floor's int goes:
    it was the least int64 before, which a clamp or a comparison took silently."""
    x = np.array([2.5, value, 1.0])
    for kernel in (floors, interpolate):
        planes = {"x": x.copy(), "y": np.full(3, 7.0)}
        if kernel is interpolate:
            planes["t"] = np.arange(float(KNOTS))
        with pytest.raises(error, match=r"hm\.floor\(\) of .* at lane 1, in floor\("):
            eagle.plan.auto(kernel, backend=backend).run(**planes)
        assert planes["y"].tolist() == [7.0, 7.0, 7.0]  # nothing written


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_floor_in_a_kernel_is_an_int(rng: np.random.Generator, dtype: str) -> None:
    (let,) = [s for s in floors.ir.body if getattr(s, "value", None) is not None][:1]
    assert let.value.operand.type == Type.INT  # float(floor(x)): floor gives an int
    x = np.concatenate([rng.uniform(-50.0, 50.0, 101), [-3.0, -2.5, 0.0, 7.0]]).astype(dtype)
    y = np.full_like(x, np.nan)
    eagle.plan.auto(floors).run(x=x, y=y)
    assert np.array_equal(y, np.floor(x))


def test_floor_of_an_int_is_that_int() -> None:
    @hawk.kernel
    def of_int(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = x * hm.floor(hm.sample_index() - 3)

    y = np.full(6, np.nan)
    eagle.plan.auto(of_int).run(x=np.full(6, 2.0), y=y)
    assert y.tolist() == [-6.0, -4.0, -2.0, 0.0, 2.0, 4.0]

    @hawk.kernel
    def beyond_a_real(y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]):
        i = hm.sample_index() + 16777217  # not a float32: its real's floor would be another
        y = float(hm.floor(i) - i)
        k = hm.sample_index() + 9223372036854775800  # nor a float64 this one
        z = float(hm.floor(k) - (k - 1))

    for backend in ("numpy", "reference"):
        y, z = np.full(3, np.nan, np.float32), np.full(3, np.nan, np.float32)
        eagle.plan.auto(beyond_a_real, backend=backend).run(y=y, z=z)
        assert y.tolist() == [0.0, 0.0, 0.0] and z.tolist() == [1.0, 1.0, 1.0]


def _reference(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The interpolation, its slope in x and its weights on each knot (float64)."""
    u = x.astype(np.float64) * SCALE
    j = np.clip(np.floor(u), 0, KNOTS - 2).astype(np.int64)
    f = u - j
    y = t[j] * (1.0 - f) + t[j + 1] * f
    slope = (t[j + 1] - t[j]) * SCALE
    weights = np.zeros((x.size, KNOTS))
    np.add.at(weights, (np.arange(x.size), j), 1.0 - f)
    np.add.at(weights, (np.arange(x.size), j + 1), f)
    return y, slope, weights


def test_an_address_through_floor_reads_the_cell(rng: np.random.Generator) -> None:
    x = rng.uniform(-0.5, 3.5, 257)  # past both ends: the clamp extrapolates the end cells
    t = rng.standard_normal(KNOTS)
    y = np.full_like(x, np.nan)
    eagle.plan.auto(interpolate).run(x=x, t=t, y=y)
    assert np.allclose(y, _reference(x, t)[0], rtol=1e-14, atol=1e-14)


def test_the_gradient_flows_through_the_weights_only(rng: np.random.Generator) -> None:
    x = rng.uniform(-0.5, 3.5, 257)
    t = rng.standard_normal(KNOTS)
    y_bar = rng.standard_normal(x.size)
    _, slope, weights = _reference(x, t)
    x_bar, t_bar = np.full_like(x, np.nan), np.full_like(t, np.nan)
    adjoint = eagle.diff.reverse(eagle.plan.auto(interpolate), accumulate=False)
    adjoint.run(x=x, t=t, y_bar=y_bar, x_bar=x_bar, t_bar=t_bar)
    assert np.allclose(x_bar, y_bar * slope, rtol=1e-12, atol=1e-12)
    assert np.allclose(t_bar, weights.T @ y_bar, rtol=1e-12, atol=1e-12)

    # finite differences away from the knots agree: floor is constant there
    step = 1e-7
    inside = np.abs(x * SCALE - np.round(x * SCALE)) > 1e-4
    up, down = np.empty_like(x), np.empty_like(x)
    eagle.plan.auto(interpolate).run(x=x + step, t=t, y=up)
    eagle.plan.auto(interpolate).run(x=x - step, t=t, y=down)
    numeric = (up - down) / (2 * step)
    assert np.allclose(numeric[inside], slope[inside], rtol=1e-6, atol=1e-6)


def test_int_keeps_its_refusal() -> None:
    with pytest.raises(hawk.HawkError, match=r"its address uses int\(u\).*hawk\.math\.floor"):
        hawk.diff.vjp(truncated, wrt="x")
    hawk.diff.vjp(truncated, wrt="t")  # the table's gradient needs no derivative in x
    hawk.diff.vjp(interpolate, wrt="x")


def test_a_clamped_floor_proves_its_reads() -> None:
    """``minimum(maximum(floor(u), 0), K - 2)`` is in 0 .. K - 2: no read is checked, only
    the floor's int (as ``int()`` is)."""
    for dtype in ("float32", "float64"):
        dtypes = {p.name: dtype for p in interpolate.planes}
        device = cuda.emit(interpolate.ir, dtypes)
        assert "hawk_clamp" not in device.source
        assert [site.kind for site in device.checks] == ["int"]
        assert "_check_index" not in host.emit(interpolate.ir, dtypes).source
        assert "hawk_to_int(floor" in device.source  # NaN and inf are recorded
        assert len(compile_cuda(device.source, name=device.name, arch="sm_90")) > 0
    unchecked = cuda.emit(interpolate.ir, dict.fromkeys(dtypes, "float32"), checks=False)
    assert "hawk_floor_int((double)floorf(" in unchecked.source
    assert len(compile_cuda(unchecked.source, name=unchecked.name, arch="sm_90")) > 0


def test_a_floor_division_of_a_known_range_is_bounded() -> None:
    dtypes = {p.name: "float32" for p in quarters.planes}
    assert not cuda.emit(quarters.ir, dtypes).checks
    y = np.full(24, np.nan)
    eagle.plan.auto(quarters).run(x=np.ones(24), t=np.arange(4.0), y=y)
    assert y.tolist() == [float((lane % 12) // 3) for lane in range(24)]


def test_a_floor_error_names_the_kernels_own_variables() -> None:
    """A NaN through hm.floor raises at its lane, forward and in the adjoint, whose error
    names the kernel's own variables (not its copies, x.d7)."""
    x, t = np.array([1.0, np.nan]), np.arange(4.0)
    with pytest.raises(HawkValueError) as forward:
        eagle.plan.auto(unclamped).run(x=x, t=t, y=np.zeros(2))
    with pytest.raises(HawkValueError) as adjoint:
        eagle.diff.reverse(eagle.plan.auto(unclamped)).run(
            x=x, t=t, y_bar=np.ones(2), t_bar=np.zeros(4)
        )
    for error in (forward.value, adjoint.value):
        message = str(error)
        assert message.startswith("hm.floor() of nan at lane 1, in floor(x):"), message


def test_an_index_of_the_least_int64_is_out_of_range() -> None:
    x, t = np.array([1.0, 2.0]), np.arange(4.0)
    with pytest.raises(hawk.PlaneIndexError, match=r"index -9223372036854775808 is out of range"):
        eagle.plan.auto(unclamped).run(x=x - 2.0**63, t=t, y=np.zeros(2))
